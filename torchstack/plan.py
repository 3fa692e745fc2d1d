"""The build plan: from the user's request and the catalog to stages, images, tags and flags."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from torchstack import host, tags
from torchstack.errors import UsageProblem
from torchstack.model import (
    Architecture,
    Backend,
    Catalog,
    Component,
    Distribution,
    RuntimeSetting,
    Source,
    Stage,
    Target,
    _read_yaml,
    parse_target,
)
from torchstack.wheels import (
    WheelName,
    WheelSpec,
    check_contents,
    pick_from_folder,
    refuse_backend_without_wheels,
    torch_version_of,
)

BUILD_TYPES = ("base", "libs", "tools", "dev", "final", "full", "pytorch")
BUILD_TYPE_ALIASES = {"full": "final", "pytorch": "final"}
RELEASE_STAGE = "final"  # the stage whose image gets the release tag
VENV = "/opt/venv"
IMAGE_PATH = f"{VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SOURCES_DIR = "/opt/torchstack/sources"
CCACHE_DIR = "/ccache"
BUILDERS = ("auto", "docker", "buildx")
# The final image's runtime: "full" ships what torch.compile needs at run time (a C++ compiler,
# the Python headers, openssl); "slim" leaves it out, for sites that forbid compilers.
RUNTIMES = ("full", "slim")
GIB_PER_TORCH_JOB = 3.0
GIB_PER_JOB = 1.0


@dataclass(frozen=True)
class Request:
    """What the user asked for, as given on the command line."""

    build_type: str = "full"
    backend: str | None = None
    build_target: str = "generic"
    arch: str | None = None
    custom_target: Path | None = None
    jobs: int | None = None
    torch_version: str | None = None
    release: str | None = None
    repository: str = "torchstack"
    tag: str | None = None
    methods: dict[str, str] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    torch_wheel: str | None = None
    distribution: str | None = None
    base_image: str | None = None
    builder: str = "docker"  # docker | buildx; "auto" is resolved by the caller, who can ask the engine
    runtime: str = "full"
    cpuinfo: str | None = None
    now: datetime | None = None


@dataclass(frozen=True)
class ComponentPlan:
    name: str
    stage: str  # the stage that builds or installs it
    method: str  # source | distro | wheel
    version: str
    needed_by: str
    script: str
    prefix: str | None
    libdir: str | None  # where its shared libraries are installed, for source builds with a prefix
    env: dict[str, str]
    source: Source | None
    build_packages: tuple[str, ...]
    runtime_packages: tuple[str, ...]
    build_requirements: tuple[str, ...]
    runtime_requirements: tuple[str, ...] = ()  # pip constraints for the packages it pulls in

    @property
    def source_path(self) -> str | None:
        return f"{SOURCES_DIR}/{self.source.filename}" if self.source else None


@dataclass(frozen=True)
class StagePlan:
    name: str
    template: str
    description: str
    image: str
    parent_image: str
    copies: dict[str, str]
    components: tuple[ComponentPlan, ...]
    packages: tuple[str, ...]
    size_budget_mib: int | None
    upstream: frozenset[str] = frozenset()  # this stage and every stage it is built from or copies from


@dataclass(frozen=True)
class Plan:
    arch: Architecture
    distribution: Distribution
    backend: Backend
    target: Target
    target_note: str
    host_arch: str
    release: str
    torch_version: str
    release_tag: str
    repository: str
    build_type: str
    jobs: int
    torch_jobs: int
    base_image: str
    base_is_bootstrapped: bool
    builder: str
    runtime: str
    torch_wheel: WheelSpec | None
    torch_wheel_file: Path | None
    components: tuple[ComponentPlan, ...]
    stages: tuple[StagePlan, ...]

    @property
    def emulated(self) -> bool:
        return self.arch.name != self.host_arch

    @property
    def final_image(self) -> str:
        return f"{self.repository}:{self.release_tag}"

    @property
    def platform(self) -> str:
        return self.arch.docker

    @property
    def cflags(self) -> str:
        return f"-O2 {self.target.flag}"

    @property
    def runtime_packages(self) -> list[str]:
        """Debian packages the final image needs: for the components it ships, for its runtime
        settings, and (runtime "full") for torch.compile."""
        packages = {p for c in self.components if c.needed_by == "runtime" for p in c.runtime_packages}
        packages |= {*self.arch.runtime.packages, *self.backend.runtime.packages}
        if self.runtime == "full":
            packages |= {p.format(python=self.distribution.python) for p in self.distribution.compile_packages}
        return sorted(packages)

    @property
    def runtime_settings(self) -> dict[str, RuntimeSetting]:
        """The final image's environment settings: the architecture's, then the backend's."""
        return {**self.arch.runtime.env, **self.backend.runtime.env}

    @property
    def runtime_env(self) -> dict[str, str]:
        """What the final image sets by default (each one a user can turn off with -e VAR=)."""
        return {name: s.value for name, s in self.runtime_settings.items() if s.default}

    @property
    def runtime_libdirs(self) -> list[str]:
        """Library folders of the compiled components the final image ships."""
        return [c.libdir for c in self.components if c.needed_by == "runtime" and c.libdir]

    @property
    def python_constraints(self) -> list[str]:
        """The pins (name==version) the final stage installs torch's dependencies at."""
        return sorted({r for c in self.components if c.needed_by == "runtime" for r in c.runtime_requirements})

    def component(self, name: str) -> ComponentPlan | None:
        return next((c for c in self.components if c.name == name), None)

    def stage(self, name: str) -> StagePlan:
        return next(s for s in self.stages if s.name == name)

    def stage_labels(self, stage: StagePlan) -> dict[str, str]:
        """A stage image's OCI labels and build information. The release image (RELEASE_STAGE)
        carries all of it; an earlier stage only what its own content depends on. Labels are part
        of an image, and the next stage is built FROM it: a release or torch version in the libs
        image would make another torch recompile OpenBLAS and ACL."""
        info = self.build_info()
        labels = {
            "org.opencontainers.image.licenses": "BSD-3-Clause",
            "org.opencontainers.image.base.name": self.base_image,
            "io.torchstack.arch": self.arch.name,
            "io.torchstack.backend": self.backend.name,
            "io.torchstack.target": self.target.name,
            "io.torchstack.stage": stage.name,
        }
        if stage.name == RELEASE_STAGE:
            labels.update({
                "org.opencontainers.image.title": (
                    f"PyTorch {self.torch_version} on {self.backend.name} for {self.target.name} ({self.arch.name})"
                ),
                "org.opencontainers.image.version": self.release_tag,
                "io.torchstack.release": self.release,
                "io.torchstack.torch.version": self.torch_version,
                "io.torchstack.runtime": self.runtime,
            })  # fmt: skip
        else:
            labels["org.opencontainers.image.title"] = (
                f"torchstack {stage.name} stage: {self.backend.name} for {self.target.name} ({self.arch.name})"
            )
            info["components"] = {
                name: c for name, c in info["components"].items() if self.component(name).stage in stage.upstream
            }
            for key in ("release_tag", "release", "python_constraints", "runtime", "runtime_env", "cpu_features"):
                del info[key]
            if "torch" not in info["components"]:
                del info["torch_version"]
        labels["io.torchstack.build-info"] = json.dumps(info, sort_keys=True)
        return labels

    def build_info(self) -> dict:
        """What the image records about how it was built (/opt/torchstack/build-info.json)."""
        return {
            "release_tag": self.release_tag,
            "release": self.release,
            "arch": self.arch.name,
            "backend": self.backend.name,
            "target": self.target.name,
            "target_flag": self.target.flag,
            "distribution": self.distribution.name,
            "python": self.distribution.python,
            "torch_version": self.torch_version,
            "venv": VENV,
            "mkldnn": self.backend.mkldnn,
            "libraries": list(self.backend.libraries),
            "components": {
                c.name: {"method": c.method, "version": c.version, "prefix": c.prefix} for c in self.components
            },
            "python_constraints": self.python_constraints,
            "runtime": self.runtime,
            "runtime_env": {
                name: {"value": s.value, "default": s.default, "why": s.why} for name, s in self.runtime_settings.items()
            },
            "cpu_features": list(self.target.cpu_features),
        }


def _fail_choice(what: str, value: str, valid: list[str], extra: str = "") -> UsageProblem:
    return UsageProblem(f"unknown {what} {value!r}{extra}; valid: {', '.join(valid)}")


def _resolve_arch(catalog: Catalog, request: Request, host_arch: str) -> tuple[str, str]:
    """The image's architecture and why: --arch, else the target's, else the backend's, else the host's."""
    if request.arch:
        if request.arch not in catalog.architectures:
            raise _fail_choice("--arch", request.arch, sorted(catalog.architectures))
        return request.arch, "--arch"
    target_arches = catalog.arches_of_target(request.build_target)
    if len(target_arches) == 1:
        return target_arches[0], f"--build-target {request.build_target}"
    if request.backend in catalog.backends:
        arches = catalog.backends[request.backend].arches
        if len(arches) == 1:
            return arches[0], f"--backend {request.backend}"
    return host_arch, "this host"


def _resolve_target(catalog: Catalog, request: Request, arch: str, host_arch: str) -> tuple[Target, str]:
    name = request.build_target
    if name == "native":
        if arch != host_arch:
            raise UsageProblem(f"--build-target native describes this {host_arch} host, not an {arch} image")
        cpuinfo = request.cpuinfo if request.cpuinfo is not None else host.read_cpuinfo()
        target = host.resolve_native(catalog, arch, cpuinfo)
        return target, f"native resolved to {target.name} from /proc/cpuinfo"
    if name == "custom":
        if request.custom_target is None:
            raise UsageProblem("--build-target custom needs --custom-target FILE (a YAML target entry)")
        target = parse_target(request.custom_target, _read_yaml(request.custom_target))
        if target.arch != arch:
            raise UsageProblem(f"{request.custom_target}: target {target.name} is for {target.arch}, not {arch}")
        return target, f"custom target {target.name} from {request.custom_target}"
    target = catalog.find_target(name, arch)
    if target is None:
        valid = catalog.target_names(arch) + ["native", "custom"]
        elsewhere = catalog.arches_of_target(name)
        if elsewhere:
            raise UsageProblem(
                f"--build-target {name} is for {', '.join(elsewhere)}, not {arch}; targets for {arch}: {', '.join(valid)}"
            )
        raise _fail_choice("--build-target", name, sorted(set(catalog.target_names())) + ["native", "custom"])
    note = f"{name} is an alias of {target.name}" if name != target.name else ""
    return target, note


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def _component_env(
    plan_ctx: dict, component: Component, method: str, prefix: str | None, source: Source | None, version: str
) -> dict[str, str]:
    """The named inputs each component's script reads; every flag is computed here."""
    target: Target = plan_ctx["target"]
    jobs = str(plan_ctx["jobs"])
    env: dict[str, str] = {}
    if source is not None:
        env["SOURCE"] = f"{SOURCES_DIR}/{source.filename}"
        env["VERSION"] = version
        env["PATCHES"] = f"/opt/torchstack/patches/{component.name}"
        if prefix:
            env["PREFIX"] = prefix
        if plan_ctx["builder"] == "buildx":
            # BuildKit keeps /ccache across builds; Debian's ccache wrappers come first on PATH.
            env.update(CCACHE_DIR=CCACHE_DIR, PATH=f"/usr/lib/ccache:{IMAGE_PATH}")
    if component.name == "openblas" and method == "source":
        tuning = target.openblas
        flags = [f"TARGET={tuning.target}", "USE_OPENMP=1", "NUM_THREADS=256", "NO_STATIC=1", "COMMON_OPT=-O2"]
        if tuning.dynamic_arch:
            flags += ["DYNAMIC_ARCH=1"]
        if target.arch == "aarch64":
            flags += ["BUILD_BFLOAT16=1"]
        env.update(OPENBLAS_MAKE_FLAGS=" ".join(flags), JOBS=jobs)
    elif component.name == "acl":
        if target.acl is None:
            raise UsageProblem(f"target {target.name} has no Arm Compute Library settings (acl:) for backend onednn-acl")
        flags = [
            "Werror=0", "debug=0", "neon=1", "opencl=0", "embed_kernels=0", "os=linux",
            f"arch={target.acl.arch}", "build=native", f"multi_isa={int(target.acl.multi_isa)}",
            "fixed_format_kernels=1", "openmp=1", "cppthreads=0", f"-j{jobs}",
        ]  # fmt: skip
        if plan_ctx["builder"] == "buildx":
            flags.append("compiler_cache=ccache")  # scons does not pass PATH on to the compiler
        env.update(ACL_SCONS_FLAGS=" ".join(flags))
    elif component.name == "zdnn":
        if target.zdnn is None:
            raise UsageProblem(f"target {target.name} has no zDNN settings (zdnn:) for backend zdnn")
        env.update(ZDNN_CFLAGS=f"-O3 -march={target.zdnn.march} -mzvector", JOBS=jobs)
    elif component.name == "numpy" and method == "source":
        blas = plan_ctx["openblas_prefix"]
        env.update(
            CFLAGS=f"-O2 {target.flag}",
            CXXFLAGS=f"-O2 {target.flag}",
            PKG_CONFIG_PATH=f"{blas}/lib/pkgconfig" if blas != "/usr" else "",
            NUMPY_SETUP_ARGS="-Dblas=openblas -Dlapack=openblas -Dallow-noblas=false",
            BUILD_REQUIREMENTS=" ".join(component.build_requirements),
            VENV=VENV,
            JOBS=jobs,
        )
    elif component.name == "numpy":
        env.update(NUMPY_REQUIREMENT=f"numpy=={version}", VENV=VENV)
    elif component.name == "torch" and method == "source":
        backend: Backend = plan_ctx["backend"]
        env.update(component.env)
        env.update(plan_ctx["arch"].torch_env)
        env.update(backend.torch_env)
        env.update(
            MAX_JOBS=str(plan_ctx["torch_jobs"]),
            PYTORCH_BUILD_VERSION=plan_ctx["torch_version"],
            PYTORCH_BUILD_NUMBER="1",
            OpenBLAS_HOME=plan_ctx["openblas_prefix"],
            CFLAGS=f"-O2 {target.flag}",
            CXXFLAGS=f"-O2 {target.flag}",
            BUILD_REQUIREMENTS=" ".join(component.build_requirements),
            VENV=VENV,
        )
        if "acl_prefix" in plan_ctx:
            env["ACL_ROOT_DIR"] = plan_ctx["acl_prefix"]
    elif component.name == "torch":
        env.update(WHEEL=f"/opt/torchstack/wheels/{plan_ctx['torch_wheel_name']}")
    return env


def _tag_variants(
    catalog: Catalog, backend: Backend, target: Target, arch: str, methods: dict[str, str], request: Request
) -> tuple[str, ...]:
    """What sets this build apart from its backend's default build, in the order of the tag."""
    variants: list[str] = []
    if target.name != "generic":
        variants.append(target.name)
    elif len(backend.arches) > 1:
        variants.append(arch)
    if request.base_image:
        variants.append(tags.tag_safe(request.base_image.replace(":", "-").replace("/", "-")))
    elif request.distribution and request.distribution != catalog.default_distribution:
        variants.append(request.distribution)
    if request.runtime != RUNTIMES[0]:
        variants.append(request.runtime)
    variants += [f"{name}.{method}" for name, method in methods.items() if method != "source"]
    variants += [
        f"{name}-{tags.tag_safe(version)}"
        for name, version in request.versions.items()
        if name in methods and version != catalog.components[name].default_version
    ]
    return tuple(variants)


def _methods(catalog: Catalog, request: Request, backend: Backend) -> dict[str, str]:
    """How each component of the backend is obtained: its pinned source unless the user chose otherwise.

    Components only PyTorch's compile needs (ACL) are left out when torch comes prebuilt.
    """
    for name, method in request.methods.items():
        if name not in catalog.components:
            raise _fail_choice("component", name, sorted(catalog.components))
        if method not in catalog.components[name].methods:
            raise UsageProblem(f"--{name}-from {method}: valid for {name}: {', '.join(catalog.components[name].methods)}")
    torch_prebuilt = request.methods.get("torch", "source") != "source"
    return {
        name: request.methods.get(name, "source")
        for name in backend.components
        if not (catalog.components[name].needed_by == "torch-build" and torch_prebuilt)
    }


def _torch_origin(
    catalog: Catalog, request: Request, backend: Backend, arch_name: str, distribution: Distribution
) -> tuple[WheelSpec | None, Path | None, str]:
    """Where torch comes from, and so the version in the tag: its pinned source or a wheel."""
    pinned_torch = catalog.components["torch"].default_version
    if request.methods.get("torch", "source") != "wheel":
        return None, None, request.torch_version or pinned_torch
    refuse_backend_without_wheels(backend.name, backend.wheel_markers)
    wheel_spec = WheelSpec.parse(request.torch_wheel or "index")
    if wheel_spec.kind == "url":
        return wheel_spec, None, WheelName.parse(wheel_spec.where.rsplit("/", 1)[-1].split("#")[0]).version
    if wheel_spec.kind == "index":
        return wheel_spec, None, request.torch_version or pinned_torch
    if wheel_spec.kind == "file":
        wheel_file = Path(wheel_spec.where)
    else:
        wheel_file = pick_from_folder(Path(wheel_spec.where), arch_name, distribution.python, request.torch_version)
    name = WheelName.parse(wheel_file.name)
    if not name.fits(arch_name, distribution.python):
        raise UsageProblem(f"{wheel_file.name} is not for {arch_name} with Python {distribution.python} ({distribution.name})")
    if request.torch_version and name.version.split("+")[0] != request.torch_version.split("+")[0]:
        raise UsageProblem(f"--torch-version {request.torch_version} but {wheel_file.name} is torch {name.version}")
    check_contents(wheel_file, backend.name, backend.wheel_markers, catalog.components["torch"].wheel_excludes)
    return wheel_spec, wheel_file, torch_version_of(wheel_file)


def _component_plans(
    catalog: Catalog, request: Request, methods: dict[str, str], versions: dict[str, str], ctx: dict[str, object]
) -> tuple[ComponentPlan, ...]:
    """Each component the backend needs, in its order: version, source or alternative, script inputs."""
    for name in request.versions:
        if name not in catalog.components:
            raise _fail_choice("component", name, sorted(catalog.components))
    components: list[ComponentPlan] = []
    for name, method in methods.items():
        component = catalog.components[name]
        version = versions.get(name) or component.default_version
        source = component.source(version) if method == "source" else None
        if method == "source" and source is None:
            pinned = ", ".join(p.version for p in component.versions)
            raise UsageProblem(
                f"{name} {version} has no pinned, checksummed source (torchstack/data/components.yaml); "
                f"pinned: {pinned}" + ("; or use --torch-from wheel" if name == "torch" else "")
            )
        alternative = component.alternatives.get(method)
        prefix = alternative.prefix if alternative and alternative.prefix else component.prefix
        ctx[f"{name}_prefix"] = prefix
        source_build = method == "source"
        components.append(
            ComponentPlan(
                name=name,
                method=method,
                version=version,
                stage=component.stage,
                needed_by=component.needed_by,
                script=component.script,
                prefix=prefix,
                libdir=f"{prefix}/{component.libdir}" if source_build and prefix else None,
                env=_component_env(ctx, component, method, prefix, source, version),
                source=source,
                build_packages=(
                    component.build_packages + (("ccache",) if request.builder == "buildx" else ())
                    if source_build
                    else (alternative.build_packages if alternative else ())
                ),
                runtime_packages=component.runtime_packages if source_build else (alternative.runtime_packages if alternative else ()),
                build_requirements=component.build_requirements if source_build else (),
                runtime_requirements=component.runtime_requirements,
            )
        )
    return tuple(components)


def _stage_plans(
    catalog: Catalog, wanted: str, components: tuple[ComponentPlan, ...], base_image: str, image_name: str
) -> tuple[StagePlan, ...]:
    """The requested stage and everything it needs, in table order."""

    def upstream(stage: Stage) -> frozenset[str]:
        deps = (catalog.stage(d) for d in (stage.parent, *stage.copies_from) if d)
        return frozenset({stage.name}).union(*(upstream(d) for d in deps))

    needed = upstream(catalog.stage(wanted))
    images = {s.name: image_name.format(stage=s.name) for s in catalog.stages}
    return tuple(
        StagePlan(
            name=s.name,
            template=s.template,
            description=s.description,
            image=images[s.name],
            parent_image=images[s.parent] if s.parent else base_image,
            copies={dep: images[dep] for dep in s.copies_from},
            components=tuple(c for c in components if catalog.components[c.name].stage == s.name),
            packages=s.packages,
            size_budget_mib=s.size_budget_mib,
            upstream=upstream(s),
        )
        for s in catalog.stages
        if s.name in needed
    )


def make_plan(catalog: Catalog, request: Request) -> Plan:
    now = request.now or datetime.now(timezone.utc)
    this_host = host.host_arch()
    if request.build_type not in BUILD_TYPES:
        raise _fail_choice("--build-type", request.build_type, list(BUILD_TYPES))
    if request.backend is not None and request.backend not in catalog.backends:
        raise _fail_choice("--backend", request.backend, sorted(catalog.backends))

    arch_name, arch_why = _resolve_arch(catalog, request, this_host)
    arch = catalog.architectures[arch_name]
    backend = catalog.backends[request.backend or arch.default_backend]
    if arch_name not in backend.arches:
        valid = sorted(b.name for b in catalog.backends.values() if arch_name in b.arches)
        raise UsageProblem(
            f"backend {backend.name} builds for {', '.join(backend.arches)}, not {arch_name} ({arch_why}); "
            f"backends for {arch_name}: {', '.join(valid)}"
        )
    target, target_note = _resolve_target(catalog, request, arch_name, this_host)

    distribution_name = request.distribution or catalog.default_distribution
    if distribution_name not in catalog.distributions:
        raise _fail_choice("--distribution", distribution_name, sorted(catalog.distributions))
    distribution = catalog.distributions[distribution_name]
    if _version_tuple(distribution.gcc) < _version_tuple(target.gcc):
        raise UsageProblem(
            f"target {target.name} ({target.flag}) needs GCC {target.gcc} or newer; "
            f"{distribution.name} has GCC {distribution.gcc}: choose another --distribution or target"
        )

    methods = _methods(catalog, request, backend)
    if request.builder not in BUILDERS[1:]:
        raise _fail_choice("--builder", request.builder, list(BUILDERS[1:]))
    if request.runtime not in RUNTIMES:
        raise _fail_choice("--runtime", request.runtime, list(RUNTIMES))
    if request.torch_wheel and methods.get("torch") != "wheel":
        raise UsageProblem("--torch-wheel needs --torch-from wheel")

    wheel_spec, wheel_file, torch_version = _torch_origin(catalog, request, backend, arch_name, distribution)

    release = tags.check_release(request.release or tags.default_release(now))
    repository = tags.check_repository(request.repository)
    variants = _tag_variants(catalog, backend, target, arch_name, methods, request)
    release_tag = tags.check_tag(request.tag) if request.tag else tags.release_tag(release, torch_version, backend.name, variants)

    cpu_count, mem = host.cores(), host.memory_gib()
    jobs = request.jobs or host.default_jobs(GIB_PER_JOB, cpu_count, mem)
    torch_jobs = request.jobs or host.default_jobs(GIB_PER_TORCH_JOB, cpu_count, mem)

    ctx: dict[str, object] = {
        "target": target,
        "backend": backend,
        "jobs": jobs,
        "torch_jobs": torch_jobs,
        "torch_version": torch_version,
        "arch": arch,
        "builder": request.builder,
        "torch_wheel_name": wheel_file.name if wheel_file else "torch.whl",
    }
    components = _component_plans(catalog, request, methods, {**request.versions, "torch": torch_version}, ctx)
    base_image = request.base_image or f"torchstack-os:{distribution.name}-{arch.debian}"
    wanted_stage = BUILD_TYPE_ALIASES.get(request.build_type, request.build_type)
    stages = _stage_plans(catalog, wanted_stage, components, base_image, f"{repository}-{{stage}}:{release_tag}")

    return Plan(
        arch=arch,
        distribution=distribution,
        backend=backend,
        target=target,
        target_note="; ".join(n for n in (target_note, f"architecture {arch_name} from {arch_why}") if n),
        host_arch=this_host,
        release=release,
        torch_version=torch_version,
        release_tag=release_tag,
        repository=repository,
        build_type=wanted_stage,
        jobs=jobs,
        torch_jobs=torch_jobs,
        base_image=base_image,
        base_is_bootstrapped=request.base_image is None,
        builder=request.builder,
        runtime=request.runtime,
        torch_wheel=wheel_spec,
        torch_wheel_file=wheel_file,
        components=components,
        stages=stages,
    )


def env_line(env: dict[str, str]) -> str:
    """KEY=value pairs, shell-quoted, as they appear before a script in a RUN line."""
    return " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
