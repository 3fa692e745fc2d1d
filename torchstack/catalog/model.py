"""The catalog's data model: stages, architectures, targets, backends, components, loaded once, cross-checked."""

from __future__ import annotations

import fnmatch
import importlib.resources
import re
from datetime import date
from pathlib import Path
from typing import Literal

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from torchstack.base.errors import DataError
from torchstack.catalog.component import Component, Frozen, Plugin, TorchRelease

PACKAGE = Path(str(importlib.resources.files("torchstack")))
# The toolkit's own files (stages/, templates/, scripts/, patches/, examples/, tests/image/): a
# checkout's folders, or, installed from a wheel (pip, pipx), the copy the wheel carries as the
# package's data under torchstack/files/ (pyproject.toml maps each folder there).
_SHIPPED = PACKAGE / "files"
ROOT = _SHIPPED if _SHIPPED.is_dir() else PACKAGE.parent
CHECKOUT = None if _SHIPPED.is_dir() else PACKAGE.parent  # a clone's root, for its git revision
DATA = PACKAGE / "data"
COMMAND = "./build.py" if CHECKOUT else "torchstack"  # how the user runs the toolkit, as messages name it
TEMPLATES = ROOT / "templates"  # the stages' Dockerfile templates
SCRIPTS = ROOT / "scripts"  # the build scripts the stages copy in
PATCHES = ROOT / "patches"  # patches/<component>/: the patches (and series) applied to its source


class RuntimeSetting(Frozen):
    """An environment variable of the final image, with why it is there."""

    value: str
    why: str
    default: bool = True  # False: documented (banner, build-info) but left unset


class Runtime(Frozen):
    """What the final image runs with: Debian packages and environment defaults."""

    packages: tuple[str, ...] = ()
    env: dict[str, RuntimeSetting] = {}


class Runners(Frozen):
    """CI runner labels of machines of one architecture (native: no emulation in CI)."""

    github: tuple[str, ...] = Field(min_length=1)  # runs-on labels
    gitlab: tuple[str, ...] = Field(min_length=1)  # runner tags


class SelfHostedRunners(Runners):
    """The labels of a self-hosted runner with a target's CPU, for a target whose images the
    architecture's hosted runners cannot run (their checks start the image: the CPU guard refuses)."""

    why: str = Field(min_length=1)  # what the hosted runners lack


# What the final image reports about itself at run time, beyond what its build decided (scripts/probe.py):
#   kleidiai: torch.backends.kleidiai.is_available() (Arm's KleidiAI micro-kernels in torch)
#   nnpa:     libzdnn's zdnn_is_nnpa_installed() (the IBM Z on-chip AI accelerator on this machine)
Probe = Literal["kleidiai", "nnpa"]


class CpuWants(Frozen):
    """CPU features a backend's fast path needs but the image does not require: it runs without
    them, slower, and says so (the banner, `list backends`)."""

    features: tuple[str, ...] = Field(min_length=1)
    why: str


class OnednnKernels(Frozen):
    """What oneDNN's own log (ONEDNN_VERBOSE=1) must name as the implementation of the checks'
    convolution and matmul: proof that the backend's kernels ran, not only that its library is
    in the image. Regular expressions on the implementation field (gemm:acl, brg_conv_fwd:avx2)."""

    pattern: str
    why: str
    # Where oneDNN's "isa:" line (the CPU as oneDNN sees it) matches a key, the implementations
    # it prefers there instead.
    on_isa: dict[str, str] = {}

    def expected(self, isa: str) -> str:
        return next((p for key, p in self.on_isa.items() if re.search(key, isa)), self.pattern)


class Architecture(Frozen):
    name: str
    debian: str
    docker: str
    qemu: str
    # The CPU qemu-user emulates for the image checks (QEMU_CPU); none: qemu's default ("max").
    qemu_cpu: str | None = None
    cpuinfo_features: str
    default_backend: str
    runners: Runners
    torch_env: dict[str, str] = {}
    runtime: Runtime = Runtime()
    probes: tuple[Probe, ...] = ()


class Distribution(Frozen):
    name: str
    mirror: str  # the release and its -updates suite
    security_mirror: str  # its -security suite
    released: date  # the newest release is the default where a torch wheel does not decide
    python: str
    gcc: str
    glibc: str  # what manylinux wheels the image runs (pip's --platform when resolving for it)
    # What torch.compile (Inductor) needs at run time: a C++ compiler, the Python headers its
    # generated code includes, and openssl (it hashes precompiled headers); "{python}" is `python`.
    compile_packages: tuple[str, ...]
    # What torch.compile runs with at run time (runtime "full" only): environment defaults.
    compile_env: dict[str, RuntimeSetting] = {}
    # What the installer (pip, runtime "full") needs at run time: the system CA store it trusts,
    # where a site adds its own CA (update-ca-certificates) for the images built on ours.
    installer_packages: tuple[str, ...] = ()
    # What its packages in the final image carry that nothing at run time reads (dpkg path-exclude
    # globs): never unpacked there.
    unread_paths: tuple[str, ...] = ()


class OpenBLASTuning(Frozen):
    target: str
    dynamic_arch: bool = False
    # BUILD_BFLOAT16=1: OpenBLAS exports sbgemm_ (bf16 GEMM), which torch then calls for bf16
    # matmuls before oneDNN. Only where OpenBLAS has bf16 kernels for the target (or, on aarch64,
    # as PyTorch's own builds do): elsewhere its generic C kernel is several times slower.
    bf16: bool = False


class ACLTuning(Frozen):
    arch: str
    multi_isa: bool


class ZDNNTuning(Frozen):
    march: str


class NativeMatch(Frozen):
    """How a CPU in /proc/cpuinfo is recognised as a target."""

    implementer: str | None = None
    parts: tuple[str, ...] = ()
    x86_vendor: str | None = None
    features: bool = False  # recognised by having every one of the target's cpu_features
    machine_types: tuple[str, ...] = ()


_TARGET_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")


class Target(Frozen):
    name: str
    arch: str
    aliases: tuple[str, ...] = ()
    flag: str
    gcc: str
    openblas: OpenBLASTuning
    acl: ACLTuning | None = None
    zdnn: ZDNNTuning | None = None
    native: NativeMatch | None = None
    runners: SelfHostedRunners | None = None  # None: the architecture's hosted runners run its images
    # CPU features (as /proc/cpuinfo names them) that code built with `flag` may use: the final
    # image refuses to start on a CPU that lacks one, instead of dying of SIGILL.
    cpu_features: tuple[str, ...] = ()

    @field_validator("name", "aliases")
    @classmethod
    def _a_name_as_tags_spell_it(cls, value: str | tuple[str, ...]) -> str | tuple[str, ...]:
        # A target's name is part of image tags and of the FROM lines that name them.
        for name in (value,) if isinstance(value, str) else value:
            if not _TARGET_NAME.fullmatch(name):
                raise ValueError(
                    f"{name!r} is not a target name: 1-64 lower-case letters, digits and . _ -, starting with a letter or digit"
                )
        return value

    @field_validator("flag")
    @classmethod
    def _one_tuning_flag(cls, flag: str) -> str:
        if not re.fullmatch(r"-m(cpu|arch)=[A-Za-z0-9_.+-]+", flag):
            raise ValueError(f"must be exactly one -mcpu=X or -march=X flag, got {flag!r}")
        return flag


class Backend(Frozen):
    name: str
    description: str
    arches: tuple[str, ...]
    components: tuple[str, ...]
    torch_env: dict[str, str]
    wheel_markers: tuple[str, ...] = ()
    mkldnn: bool
    libraries: tuple[str, ...] = ()
    runtime: Runtime = Runtime()
    targets: tuple[str, ...] = ()  # the build targets it is for (default: every target of its arches)
    plugins: tuple[str, ...] = ()  # vendor plugin wheels (plugins.yaml) every image of it installs
    cpu_wants: CpuWants | None = None
    probes: tuple[Probe, ...] = ()
    onednn_kernels: OnednnKernels | None = None


class Stage(Frozen):
    name: str
    parent: str | None = None
    copies_from: tuple[str, ...] = ()
    template: str
    description: str
    packages: tuple[str, ...] = ()
    size_budget_mib: int | None = None


class Catalog(Frozen):
    """Everything the toolkit knows, cross-checked."""

    architectures: dict[str, Architecture]
    distributions: dict[str, Distribution]
    default_distribution: str
    targets: tuple[Target, ...]
    backends: dict[str, Backend]
    components: dict[str, Component]
    plugins: dict[str, Plugin] = {}
    torch_releases: dict[str, TorchRelease] = {}  # newest first
    stages: tuple[Stage, ...]

    @model_validator(mode="after")
    def _cross_references(self) -> Catalog:
        problems: list[str] = []
        if self.default_distribution not in self.distributions:
            problems.append(f"default_distribution {self.default_distribution!r} is not a distribution")
        for arch in self.architectures.values():
            if arch.default_backend not in self.backends:
                problems.append(f"architecture {arch.name}: default_backend {arch.default_backend!r} unknown")
        seen: set[tuple[str, str]] = set()
        for target in self.targets:
            if target.arch not in self.architectures:
                problems.append(f"target {target.name}: unknown arch {target.arch!r}")
            for name in (target.name, *target.aliases):
                if (name, target.arch) in seen:
                    problems.append(f"target {name} is defined twice for {target.arch}")
                seen.add((name, target.arch))
        for arch in self.architectures:
            if ("generic", arch) not in seen:
                problems.append(f"architecture {arch} has no generic target")
        for backend in self.backends.values():
            problems += [f"backend {backend.name}: unknown arch {a!r}" for a in backend.arches if a not in self.architectures]
            problems += [f"backend {backend.name}: unknown component {c!r}" for c in backend.components if c not in self.components]
            problems += [f"backend {backend.name}: unknown plugin {p!r}" for p in backend.plugins if p not in self.plugins]
            problems += [
                f"backend {backend.name}: unknown target {t!r}"
                for t in backend.targets
                if not any(t == x.name and x.arch in backend.arches for x in self.targets)
            ]
            problems += [
                f"backend {backend.name}: plugin {p} has no pinned versions to install it by name"
                for p in backend.plugins
                if p in self.plugins and not self.plugins[p].versions
            ]
            shipped = [p.rsplit("/", 1)[1] for c in backend.components if c in self.components for p in self.components[c].ships]
            problems += [
                f"backend {backend.name}: library {lib} is in libraries but no component of it ships it (ships:)"
                for lib in backend.libraries
                if not any(fnmatch.fnmatchcase(f"{lib}.so", pattern) for pattern in shipped)
            ]
        if "torch" in self.components:
            problems += [
                f"torch {p.version}: a pinned source of a release torch.yaml lacks"
                for p in self.components["torch"].versions
                if p.version not in self.torch_releases
            ]
        stage_names = [s.name for s in self.stages]
        for component in self.components.values():
            problems += [f"component {component.name}: uses unknown {u!r}" for u in component.uses if u not in self.components]
            if component.stage not in stage_names:
                problems.append(f"component {component.name}: unknown stage {component.stage!r}")
        for i, stage in enumerate(self.stages):
            earlier = stage_names[:i]
            for dep in (stage.parent, *stage.copies_from):
                if dep is not None and dep not in earlier:
                    problems.append(f"stage {stage.name}: {dep!r} must be a stage listed before it")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def stage(self, name: str) -> Stage:
        return next(s for s in self.stages if s.name == name)

    def targets_for(self, arch: str) -> list[Target]:
        return [t for t in self.targets if t.arch == arch]

    def target_names(self, arch: str | None = None) -> list[str]:
        names = {n for t in self.targets if arch in (None, t.arch) for n in (t.name, *t.aliases)}
        return sorted(names)

    def find_target(self, name: str, arch: str) -> Target | None:
        return next((t for t in self.targets_for(arch) if name in (t.name, *t.aliases)), None)

    def arches_of_target(self, name: str) -> list[str]:
        return sorted({t.arch for t in self.targets if name in (t.name, *t.aliases)})


def _read_yaml(path: Path) -> object:
    try:
        return yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise DataError(f"{path}: file not found") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise DataError(f"{path}:{where} not valid YAML ({getattr(exc, 'problem', exc)})") from None


def _validation_message(path: Path, exc: ValidationError) -> str:
    first = exc.errors()[0]
    loc = ".".join(str(part) for part in first["loc"]) or "(top level)"
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{path}: {loc}: {first['msg']}{more}"


def _named(path: Path, raw: object) -> dict[str, dict]:
    if not isinstance(raw, dict):
        raise DataError(f"{path}: expected a mapping of names to entries")
    return {name: {"name": name, **(entry or {})} for name, entry in raw.items()}


def parse_target(path: Path, raw: object) -> Target:
    """A single target entry, as in targets.yaml or a user's custom target file."""
    try:
        return Target.model_validate(raw)
    except ValidationError as exc:
        raise DataError(_validation_message(path, exc)) from None


def load_catalog(data_dir: Path = DATA, stages_file: Path = ROOT / "stages" / "stages.yaml") -> Catalog:
    files = {
        "platforms": data_dir / "platforms.yaml",
        "targets": data_dir / "targets.yaml",
        "backends": data_dir / "backends.yaml",
        "components": data_dir / "components.yaml",
        "plugins": data_dir / "plugins.yaml",
        "torch_releases": data_dir / "torch.yaml",
        "stages": stages_file,
    }
    raw = {key: _read_yaml(path) for key, path in files.items()}
    platforms = raw["platforms"]
    if not isinstance(platforms, dict):
        raise DataError(f"{files['platforms']}: expected a mapping")
    sections = {
        "architectures": (files["platforms"], _named(files["platforms"], platforms.get("architectures"))),
        "distributions": (files["platforms"], _named(files["platforms"], platforms.get("distributions"))),
        "backends": (files["backends"], _named(files["backends"], raw["backends"])),
        "components": (files["components"], _named(files["components"], raw["components"])),
        "plugins": (files["plugins"], _named(files["plugins"], raw["plugins"])),
        "torch_releases": (files["torch_releases"], _named(files["torch_releases"], (raw["torch_releases"] or {}).get("releases"))),
    }
    models = {"architectures": Architecture, "distributions": Distribution, "backends": Backend, "components": Component}
    models |= {"plugins": Plugin, "torch_releases": TorchRelease}
    values: dict[str, object] = {}
    for key, (path, entries) in sections.items():
        values[key] = {}
        for name, entry in entries.items():
            try:
                values[key][name] = models[key].model_validate(entry)
            except ValidationError as exc:
                raise DataError(_validation_message(path, exc).replace(f"{path}: ", f"{path}: {name}.", 1)) from None
    for key in ("targets", "stages"):
        if not isinstance(raw[key], list):
            raise DataError(f"{files[key]}: expected a list of entries")
    values["targets"] = tuple(parse_target(Path(f"{files['targets']}: entry {i}"), entry) for i, entry in enumerate(raw["targets"]))
    try:
        values["stages"] = tuple(Stage.model_validate(entry) for entry in raw["stages"])
    except ValidationError as exc:
        raise DataError(_validation_message(files["stages"], exc)) from None
    values["default_distribution"] = platforms.get("default_distribution")
    try:
        return Catalog.model_validate(values)
    except ValidationError as exc:
        raise DataError(f"{data_dir}: {exc.errors()[0]['msg']}") from None
