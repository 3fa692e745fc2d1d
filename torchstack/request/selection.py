"""Which combinations of backend, architecture, target, distribution, method, builder may be built."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from torchstack.base.errors import UsageProblem
from torchstack.catalog import torch_choice
from torchstack.catalog.component import TorchRelease
from torchstack.catalog.model import Architecture, Backend, Catalog, Distribution, Target, _read_yaml, parse_target
from torchstack.catalog.plugins import PluginChoice, choose
from torchstack.catalog.wheels import WheelName, WheelSpec, check_contents, pick_from_folder, torch_version_of
from torchstack.request import host
from torchstack.request.plan import Request

BUILD_TYPES = ("base", "libs", "tools", "dev", "final", "full", "pytorch")
BUILD_TYPE_ALIASES = {"full": "final", "pytorch": "final"}
BUILDERS = ("auto", "docker", "buildx")
# The final image's runtime: "full" ships what torch.compile needs at run time (a C++ compiler,
# the Python headers, openssl) and an installer for images built on it (pip, held by the image's
# pins); "slim" leaves both out, for sites that forbid compilers and installs at run time.
RUNTIMES = ("full", "slim")


@dataclass(frozen=True)
class Selection:
    """A combination the rules allow, with how each part was chosen."""

    arch: Architecture
    backend: Backend
    target: Target
    target_note: str
    distribution: Distribution
    distribution_note: str  # which Debian release, and why
    methods: dict[str, str]  # component -> source | distro | wheel, in the backend's order
    stage: str  # the stage to build up to
    builder: str
    runtime: str
    torch_version: str
    torch_note: str  # which release, and why
    torch_wheel: WheelSpec | None = None
    torch_wheel_file: Path | None = None
    plugins: tuple[PluginChoice, ...] = ()


def _libraries(catalog: Catalog, request: Request, torch_method: str | None) -> list[str]:
    """The domain libraries --with names, each one plugins.yaml knows as a library. Their wheels
    are built against PyTorch's own torch build: beside a torch compiled here they are refused
    (compiling them against ours, in the dev stage, is not done yet)."""
    known = sorted(name for name, p in catalog.plugins.items() if p.library)
    for name in request.libraries:
        if name not in known:
            raise _fail_choice("--with", name, known)
    if request.libraries and torch_method == "source":
        raise UsageProblem(
            f"--with {','.join(request.libraries)}: its wheels are built against PyTorch's own torch, not one compiled "
            "here, and compiling them against ours is not done yet: use --torch-from wheel"
        )
    return list(request.libraries)


def refusal(
    catalog: Catalog, backend: Backend, arch: str, target: Target, distribution: Distribution, methods: dict[str, str]
) -> str | None:
    """Why this combination cannot be built, or None. The one set of rules: the planner refuses
    with it before computing anything, and every enumeration of builds (tests, matrices) uses it."""
    if arch not in backend.arches:
        return f"backend {backend.name} builds for {', '.join(backend.arches)}, not {arch}"
    if target.arch != arch:
        return f"target {target.name} is for {target.arch}, not {arch}"
    if backend.targets and target.name not in backend.targets:
        return f"backend {backend.name} is for the targets {', '.join(backend.targets)}, not {target.name}"
    if _version_tuple(distribution.gcc) < _version_tuple(target.gcc):
        if not distributions_for(catalog, target):
            has = ", ".join(f"{d.name} {d.gcc}" for d in catalog.distributions.values())
            return (
                f"target {target.name} ({target.flag}) needs GCC {target.gcc} or newer, which no Debian release "
                f"the toolkit builds on has yet (GCC: {has}): it is listed, not yet buildable; choose another target"
            )
        able = " or ".join(f"--distribution {d.name} (GCC {d.gcc})" for d in distributions_for(catalog, target))
        return (
            f"target {target.name} ({target.flag}) needs GCC {target.gcc} or newer; "
            f"{distribution.name} has GCC {distribution.gcc}: build it with {able}, or choose another target"
        )
    for name, method in methods.items():
        component = catalog.components[name]
        if method == "source" and component.tuning and getattr(target, component.tuning) is None:
            return f"target {target.name} has no {component.tuning}: settings, which compiling {name} for backend {backend.name} needs"
    if methods.get("torch") == "wheel" and not backend.wheel_markers:
        return (
            f"backend {backend.name} needs torch built from source (--torch-from source): no prebuilt wheel is known to be built that way"
        )
    return None


def distributions_for(catalog: Catalog, target: Target) -> list[Distribution]:
    """The Debian releases whose GCC knows the target's flag: where it can be built."""
    return [d for d in catalog.distributions.values() if _version_tuple(d.gcc) >= _version_tuple(target.gcc)]


def combinations(catalog: Catalog, torch_method: str = "source") -> Iterator[tuple[Backend, Target, Distribution]]:
    """Every backend x target x distribution the rules allow, with the backend's other components
    compiled and torch obtained by `torch_method`."""
    for backend in catalog.backends.values():
        methods = default_methods(catalog, backend, {"torch": torch_method})
        for target in catalog.targets:
            for distribution in catalog.distributions.values():
                if refusal(catalog, backend, target.arch, target, distribution, methods) is None:
                    yield backend, target, distribution


def default_methods(catalog: Catalog, backend: Backend, chosen: dict[str, str]) -> dict[str, str]:
    """How each component of the backend is obtained: its pinned source unless chosen otherwise;
    components needed only to compile torch are left out when torch comes prebuilt."""
    torch_prebuilt = chosen.get("torch", "source") != "source"
    return {
        name: chosen.get(name, "source")
        for name in backend.components
        if not (catalog.components[name].needed_when == "torch-from-source" and torch_prebuilt)
    }


def _check_names(catalog: Catalog, request: Request) -> None:
    """Every name the request gives is one the catalog knows."""
    if request.build_type not in BUILD_TYPES:
        raise _fail_choice("--build-type", request.build_type, list(BUILD_TYPES))
    if request.backend is not None and request.backend not in catalog.backends:
        raise _fail_choice("--backend", request.backend, sorted(catalog.backends))
    if request.builder not in BUILDERS[1:]:
        raise _fail_choice("--builder", request.builder, list(BUILDERS[1:]))
    if request.runtime not in RUNTIMES:
        raise _fail_choice("--runtime", request.runtime, list(RUNTIMES))
    for name, method in request.methods.items():
        if name not in catalog.components:
            raise _fail_choice("component", name, sorted(catalog.components))
        if method not in catalog.components[name].methods:
            raise UsageProblem(f"--{name}-from {method}: valid for {name}: {', '.join(catalog.components[name].methods)}")
    for name in request.versions:
        if name not in catalog.components:
            raise _fail_choice("component", name, sorted(catalog.components))


def select(catalog: Catalog, request: Request, host_arch: str) -> Selection:
    """The request checked against the catalog and the rules, every choice resolved."""
    _check_names(catalog, request)
    arch_name, arch_why = _resolve_arch(catalog, request, host_arch)
    arch = catalog.architectures[arch_name]
    backend = catalog.backends[request.backend or arch.default_backend]
    if arch_name not in backend.arches:
        valid = sorted(b.name for b in catalog.backends.values() if arch_name in b.arches)
        raise UsageProblem(
            f"backend {backend.name} builds for {', '.join(backend.arches)}, not {arch_name} ({arch_why}); "
            f"backends for {arch_name}: {', '.join(valid)}"
        )
    target, target_note = _resolve_target(catalog, request, arch_name, host_arch)
    methods = default_methods(catalog, backend, request.methods)
    if request.torch_wheel is not None and methods.get("torch") != "wheel":
        raise UsageProblem("--torch-wheel needs --torch-from wheel")
    torch = _torch(catalog, request, backend, arch_name, methods)
    distribution, distribution_note = torch.distribution, torch.distribution_note
    problem = refusal(catalog, backend, arch_name, target, distribution, methods)
    if problem:
        raise UsageProblem(problem)
    wheel_spec, wheel_file, torch_version = _torch_origin(catalog, request, backend, arch_name, distribution, torch.release)
    stage = BUILD_TYPE_ALIASES.get(request.build_type, request.build_type)
    plugins = ()
    if stage == "final":
        named = {
            **{p: f"backend {backend.name}" for p in backend.plugins},
            **{lib: "--with" for lib in _libraries(catalog, request, methods.get("torch"))},
        }
        plugins = choose(catalog, request.plugin_wheels, named, arch_name, distribution.python, torch_version, request.plugin_cache)
    elif request.plugin_wheels or request.libraries:
        option = "--plugin-wheel" if request.plugin_wheels else "--with"
        raise UsageProblem(f"{option} installs into the final image; --build-type {request.build_type} stops before it")
    return Selection(
        arch=arch,
        backend=backend,
        target=target,
        target_note="; ".join(n for n in (target_note, f"architecture {arch_name} from {arch_why}") if n),
        distribution=distribution,
        distribution_note=distribution_note,
        methods=methods,
        stage=stage,
        builder=request.builder,
        runtime=request.runtime,
        torch_version=torch_version,
        torch_note=torch.note,
        torch_wheel=wheel_spec,
        torch_wheel_file=wheel_file,
        plugins=plugins,
    )


def _fail_choice(what: str, value: str, valid: list[str], extra: str = "") -> UsageProblem:
    return UsageProblem(f"unknown {what} {value!r}{extra}; valid: {', '.join(valid)}")


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


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


def tuning_problem(catalog: Catalog, target: Target) -> str | None:
    """The first tuning setting of `target` its component does not accept (components.yaml
    tuning_values), as "KEY: VALUE is not ...; one of ..."; None when all are accepted."""
    for component in catalog.components.values():
        settings = getattr(target, component.tuning) if component.tuning else None
        for key, per_arch in component.tuning_values.items() if settings else ():
            value, allowed = str(getattr(settings, key)), per_arch.get(target.arch, ())
            if value not in allowed:
                return (
                    f"{component.tuning}.{key}: {value!r} is not a {key} {component.name} accepts for {target.arch} "
                    f"({component.tuning_values_from}); one of {', '.join(allowed)}"
                )
    return None


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
        if problem := tuning_problem(catalog, target):
            raise UsageProblem(f"{request.custom_target}: {problem}")
        return target, f"custom target {target.name} from {request.custom_target}"
    target = catalog.find_target(name, arch)
    if target is None:
        valid = catalog.target_names(arch) + ["native", "custom"]
        elsewhere = catalog.arches_of_target(name)
        if elsewhere:
            raise UsageProblem(f"--build-target {name} is for {', '.join(elsewhere)}, not {arch}; targets for {arch}: {', '.join(valid)}")
        raise _fail_choice("--build-target", name, sorted(set(catalog.target_names())) + ["native", "custom"])
    note = f"{name} is an alias of {target.name}" if name != target.name else ""
    return target, note


def _distributions(catalog: Catalog, request: Request) -> list[Distribution]:
    """The Debian releases an image may be built on, newest first: the --distribution given, else every one."""
    if request.distribution:
        if request.distribution not in catalog.distributions:
            raise _fail_choice("--distribution", request.distribution, sorted(catalog.distributions))
        return [catalog.distributions[request.distribution]]
    return sorted(catalog.distributions.values(), key=lambda d: d.released, reverse=True)


def _torch(catalog: Catalog, request: Request, backend: Backend, arch: str, methods: dict[str, str]) -> torch_choice.Choice:
    """The torch release and the Debian release the image gets, with why: from an index, the newest
    catalogued release it offers; from a wheel named, that wheel's; compiled here, the newest pinned source."""
    dists = _distributions(catalog, request)
    spec = WheelSpec.parse(request.torch_wheel) if methods.get("torch") == "wheel" else None
    if spec is not None and spec.kind == "index":
        index = spec.where or catalog.components["torch"].alternatives["wheel"].index
        named = tuple(p for p in (*backend.plugins, *request.libraries) if p in catalog.plugins)
        return torch_choice.choose(catalog, arch, index, dists, request.torch_version, named)
    distribution, distribution_note = _resolve_distribution(catalog, request, arch, dists)
    if spec is not None:
        return torch_choice.Choice(None, distribution, "the wheel --torch-wheel names", distribution_note)
    version = request.torch_version or catalog.components["torch"].default_version
    why = "--torch-version" if request.torch_version else "the newest release with a pinned source (torch compiled here)"
    return torch_choice.Choice(torch_choice.catalogued(catalog, version), distribution, why, distribution_note)


def _resolve_distribution(catalog: Catalog, request: Request, arch: str, dists: list[Distribution]) -> tuple[Distribution, str]:
    """The --distribution given; else, for a torch wheel whose name is known (a file, a folder's
    wheels, a URL), the newest Debian release whose Python it is built for; else the newest release."""
    if request.distribution:
        return dists[0], torch_choice.distribution_note(dists[0], dists, "")
    default = catalog.distributions[catalog.default_distribution]
    names = _wheel_names(request) if request.methods.get("torch") == "wheel" else None
    if names is None:
        return default, f"{default.name} (Python {default.python}): the default Debian release (torch compiled here)"
    for distribution in dists:
        fitting = [
            n
            for n in names
            if n.fits(arch, distribution.python)
            and (request.torch_version is None or n.version.split("+")[0] == request.torch_version.split("+")[0])
        ]
        if fitting:
            return distribution, torch_choice.distribution_note(distribution, dists, fitting[0].python)
    return default, f"{default.name} (Python {default.python}): the default Debian release"


def _wheel_names(request: Request) -> list[WheelName] | None:
    """The names of the torch wheels a file, a folder or a URL --torch-wheel names offers."""
    spec = WheelSpec.parse(request.torch_wheel)
    if spec.kind == "file":
        return [WheelName.parse(Path(spec.where).name)]
    if spec.kind == "url":
        return [WheelName.parse(spec.where.rsplit("/", 1)[-1].split("#")[0])]
    if spec.kind == "dir":
        return [WheelName.parse(p.name) for p in Path(spec.where).glob("torch-*.whl")]
    return None


def _torch_origin(
    catalog: Catalog, request: Request, backend: Backend, arch_name: str, distribution: Distribution, release: TorchRelease | None
) -> tuple[WheelSpec | None, Path | None, str]:
    """Where torch comes from, and so the version in the tag: its pinned source, an index, or a wheel
    named (whose release the catalog must know)."""
    if release is not None:  # compiled here, or from an index: the version as asked (2.13.0+cpu stays so)
        spec = WheelSpec.parse(request.torch_wheel) if request.methods.get("torch", "source") == "wheel" else None
        return spec, None, request.torch_version or release.name
    wheel_spec = WheelSpec.parse(request.torch_wheel)
    if wheel_spec.kind == "url":
        version = WheelName.parse(wheel_spec.where.rsplit("/", 1)[-1].split("#")[0]).version
        torch_choice.catalogued(catalog, version)
        return wheel_spec, None, version
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
    torch_choice.catalogued(catalog, name.version)
    return wheel_spec, wheel_file, torch_version_of(wheel_file)
