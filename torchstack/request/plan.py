"""The plan's types: the request, each component's part, each stage's part, what ships, the plan itself."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from torchstack.base.errors import UsageProblem
from torchstack.base.layout import SOURCES_DIR
from torchstack.catalog.component import HostRun, Source
from torchstack.catalog.model import Architecture, Backend, Distribution, RuntimeSetting, Target
from torchstack.catalog.plugins import PluginChoice
from torchstack.catalog.wheels import WheelSpec
from torchstack.engines.connection import mounts_in_steps

RELEASE_STAGE = "final"  # the stage whose image gets the release tag


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
    source_date_epoch: int | None = None  # the image's dates (default: reproducible.source_date_epoch)
    memory_gib: float | None = None  # the build host's memory (default: this machine's)
    plugin_wheels: tuple[str, ...] = ()  # --plugin-wheel, as given
    libraries: tuple[str, ...] = ()  # --with: domain libraries (plugins.yaml, library: true)
    plugin_cache: Path | None = None  # where earlier downloads of plugin pins are
    requirements: Path | None = None  # --requirements: a team's packages for the final image
    debian_mirror: str | None = None  # --debian-mirror: the release and its -updates suite
    security_mirror: str | None = None  # --security-mirror: the -security suite
    security_updates: bool = True  # False with --no-security-updates: the release suite alone
    archive_keyring: Path | None = None  # --archive-keyring: a site's key for its mirrors
    debian_snapshot: str | None = None  # --debian-snapshot: a past state of Debian's archive, by its time
    snapshot_archive: str | None = None  # --snapshot-archive: who serves it (default: Debian's snapshot archive)


@dataclass(frozen=True)
class Suite:
    """One suite of the Debian archive: where it is, its name, what it holds."""

    url: str
    name: str  # bookworm, bookworm-updates, bookworm-security
    kind: str  # release | updates | security
    frozen: bool = False  # a past state (a snapshot): the date its Release file is valid until has passed

    @property
    def line(self) -> str:
        """The suite as a line of apt's sources.list."""
        return f"deb {'[check-valid-until=no] ' if self.frozen else ''}{self.url} {self.name} main"


@dataclass(frozen=True)
class Snapshot:
    """A state of Debian's archive by its time, as Debian's snapshot archive (or a site's copy of it) serves it."""

    timestamp: str  # 20261101T000000Z, the snapshot archive's form
    archive: str  # http://snapshot.debian.org, or a site's copy

    @staticmethod
    def timestamp_of(given: str, now: datetime) -> str:
        """--debian-snapshot in the snapshot archive's form (20261101T000000Z), from that form or an
        ISO 8601 date or time in UTC (2026-11-01, 2026-11-01T12:00:00Z); never one still to come."""
        text = given.strip().removesuffix("Z").removesuffix("+00:00")
        for form in ("%Y%m%dT%H%M%S", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d", "%Y%m%d"):
            try:
                when = datetime.strptime(text, form).replace(tzinfo=timezone.utc)
                break
            except ValueError:
                continue
        else:
            raise UsageProblem(f"--debian-snapshot {given}: not a time in UTC (20261101T000000Z or 2026-11-01)")
        if when > now:
            raise UsageProblem(f"--debian-snapshot {given}: still to come, so the archive's state could change under it")
        return f"{when:%Y%m%dT%H%M%S}Z"

    def url(self, kind: str) -> str:
        """Where the suites of `kind` were at that time: Debian's main archive, or its security archive."""
        return f"{self.archive}/archive/{'debian-security' if kind == 'security' else 'debian'}/{self.timestamp}"


@dataclass(frozen=True)
class AptSources:
    """The suites every stage's apt takes packages from, and the key a site signs its mirrors with."""

    suites: tuple[Suite, ...]
    keyring: Path | None = None
    snapshot: Snapshot | None = None  # --debian-snapshot: the suites are its
    kept: tuple[Suite, ...] = ()  # the live suites a snapshot's release image names instead (Debian's own images do)

    @property
    def security(self) -> tuple[Suite, ...]:
        return tuple(s for s in self.suites if s.kind == "security")

    @property
    def keyring_name(self) -> str | None:
        """The site's key as the images trust it, in /etc/apt/trusted.gpg.d (apt reads ASCII armour by its .asc)."""
        if not self.keyring:
            return None
        return f"torchstack-archive{'.asc' if self.keyring.read_bytes().lstrip().startswith(b'-----BEGIN') else '.gpg'}"

    @property
    def updates(self) -> bool:
        """Whether the build takes the -updates and -security suites (not with --no-security-updates)."""
        return bool(self.security)

    def sources_list(self) -> str:
        return "".join(f"{s.line}\n" for s in self.suites)

    def kept_sources_list(self) -> str:
        """What the release image's apt sources name where its suites were a snapshot's: the live
        suites, so that an image built on it takes the fixes published since; the snapshot in comments."""
        built = "".join(f"# {s.line}\n" for s in self.suites)
        return f"# Built from Debian's archive as it was at {self.snapshot.timestamp}:\n{built}" + "".join(f"{s.line}\n" for s in self.kept)


@dataclass(frozen=True)
class AppRequirements:
    """--requirements as given, and what pip resolved it to for the image."""

    path: Path
    sha256: str
    requested: tuple[str, ...] = ()  # NAME==VERSION of what the file names, as resolved
    resolved: tuple[str, ...] = ()  # NAME==VERSION of everything it adds to the image

    @classmethod
    def read(cls, path: Path) -> AppRequirements:
        try:
            return cls(path, hashlib.sha256(path.read_bytes()).hexdigest())
        except OSError as exc:
            raise UsageProblem(f"--requirements {path}: {exc.strerror or exc}") from None

    @property
    def tag_variant(self) -> str:
        """What the release tag says of it: the image holds more than the stack (the file's hash)."""
        return f"requirements.{self.sha256[:8]}"

    def record(self) -> dict:
        """How the build-info records it."""
        return {"file": self.path.name, "sha256": self.sha256, "requested": list(self.requested), "resolved": list(self.resolved)}


@dataclass(frozen=True)
class ShippedLibraries:
    """Shared libraries a compiled component puts into the final image: one folder, some globs."""

    component: str
    directory: str  # the same path in the image that builds them and in the final image
    patterns: tuple[str, ...]  # file-name globs in `directory`


@dataclass(frozen=True)
class ComponentPlan:
    name: str
    stage: str  # the stage that builds or installs it
    method: str  # source | distro | wheel
    version: str
    script: str
    prefix: str | None
    env: dict[str, str]  # its script's inputs (recipes.py)
    source: Source | None
    build_packages: tuple[str, ...]
    runtime_packages: tuple[str, ...]
    build_requirements: tuple[str, ...]
    runtime_requirements: tuple[str, ...] = ()  # pip constraints for the packages it pulls in
    unread: tuple[str, ...] = ()  # what its installed package holds that nothing at run time reads (globs under site-packages)
    downloads: tuple[str, ...] = ()  # what its stage's fetch step downloads for it (recipes.pip_requirements)
    ships: tuple[ShippedLibraries, ...] = ()
    host_runs: tuple[HostRun, ...] = ()  # what its build runs on the build host, when compiled

    @property
    def source_path(self) -> str | None:
        return f"{SOURCES_DIR}/{self.source.filename}" if self.source else None


@dataclass(frozen=True)
class Payload:
    """Everything the final image carries besides the base: the one list the final template, the
    loader's path, the image checks and the size report all read."""

    libraries: tuple[ShippedLibraries, ...]  # compiled components' shared libraries
    packages: tuple[str, ...]  # Debian packages
    python_constraints: tuple[str, ...]  # name==version pins torch, its dependencies and the plugins install at
    settings: dict[str, RuntimeSetting]  # environment settings, default or documented
    installer: bool = True  # pip stays, held by the image's pins (layout.PINS); runtime "slim": none
    torch_constraints: tuple[str, ...] = ()  # those of python_constraints that torch's own install reads
    unread_files: tuple[str, ...] = ()  # the components' files nothing at run time reads (globs under site-packages)
    unread_packages: tuple[str, ...] = ()  # what the packages carry that nothing at run time reads: dpkg never unpacks it

    @property
    def library_dirs(self) -> list[str]:
        """The folders the final image's loader path (layout.LD_SO_CONF) lists, in order."""
        return list(dict.fromkeys(lib.directory for lib in self.libraries))

    @property
    def env(self) -> dict[str, str]:
        """What the final image sets by default (each one a user can turn off with -e VAR=)."""
        return {name: s.value for name, s in self.settings.items() if s.default}


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
    distribution_note: str  # which Debian release, and why (selection.Selection)
    backend: Backend
    target: Target
    target_note: str
    host_arch: str
    release: str
    torch_version: str
    torch_note: str  # which torch release, and why (torch_choice)
    release_tag: str
    repository: str
    build_type: str
    jobs: int
    torch_jobs: int
    jobs_note: str  # what memory took off --jobs, if anything
    base_image: str
    base_is_bootstrapped: bool
    builder: str  # --builder's word, settled: docker | buildx
    runtime: str
    torch_wheel: WheelSpec | None
    torch_wheel_file: Path | None
    components: tuple[ComponentPlan, ...]
    stages: tuple[StagePlan, ...]
    payload: Payload
    plugins: tuple[PluginChoice, ...] = ()  # vendor plugin wheels the final image installs
    requirements: AppRequirements | None = None  # --requirements (resolved when the build starts)
    apt: AptSources = AptSources(())  # the Debian suites, for the OS image, every stage and the release gate
    source_date_epoch: int = 0  # every date in the images (reproducible.py), never the clock
    epoch_origin: str = ""  # where source_date_epoch comes from, in words

    @property
    def step_mounts(self) -> bool:
        """Whether its builder runs steps with mounts: secrets and the compiler cache (BuildKit's)."""
        return mounts_in_steps(self.builder)

    @property
    def probes(self) -> tuple[str, ...]:
        """What the final image reports at run time (scripts/probe.py), architecture's then backend's."""
        return tuple(dict.fromkeys((*self.arch.probes, *self.backend.probes)))

    @property
    def probe_args(self) -> tuple[str, ...]:
        """The probes as scripts/probe.py takes them (nnpa names the libzdnn the image ships)."""
        zdnn = next((lib.directory for lib in self.payload.libraries if lib.component == "zdnn"), None)
        return tuple(f"nnpa={zdnn}/libzdnn.so" if p == "nnpa" and zdnn else p for p in self.probes)

    @property
    def emulated(self) -> bool:
        return self.arch.name != self.host_arch

    @property
    def final_image(self) -> str:
        return f"{self.repository}:{self.release_tag}"

    @property
    def top_image(self) -> str:
        """The name the build's top image gets once its checks pass: the release image, or for a
        build that stops earlier, `<repository>-<stage>:<release tag>` (besides its content name)."""
        top = self.stages[-1]
        return self.final_image if top.name == RELEASE_STAGE else f"{self.repository}-{top.name}:{self.release_tag}"

    @property
    def platform(self) -> str:
        return self.arch.docker

    @property
    def cflags(self) -> str:
        """What numpy's and torch's compiles are given; their build types bring -O3."""
        return self.target.flag

    def component(self, name: str) -> ComponentPlan | None:
        return next((c for c in self.components if c.name == name), None)

    def stage(self, name: str) -> StagePlan:
        return next(s for s in self.stages if s.name == name)
