"""The stack's parts as data: a component's pinned sources with what each version can build, a torch release, a plugin wheel."""

from __future__ import annotations

from datetime import date
from typing import Annotated, Literal

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator, model_validator

# A Python package pinned to one version, as pip reads it: name==version
PinnedPackage = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9][A-Za-z0-9.!+_-]*$")]


# Python packages the stack itself puts into the venv before a component that requires them.
STACK_PACKAGES = {"numpy"}


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Pin(Frozen):
    """One pinned version of a source: its sha256 and where that sha256 was published."""

    version: str
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    sha256_from: str
    url: str | None = None  # where the component's url template does not fit this version
    # The torch release lines ("2.13") upstream builds with this version, and where that is seen;
    # a component whose pins name them is compiled only at the version paired with the image's torch.
    torch: tuple[str, ...] = ()
    torch_from: str | None = None


class Source(Frozen):
    """A component's source at one pinned version."""

    version: str
    url: str
    filename: str
    sha256: str
    sha256_from: str


class Since(Frozen):
    """The first version of a component that accepts a tuning value, and where that is seen."""

    version: str
    seen: str


class HostRun(Frozen):
    """A program a component's build runs on the build host, and what becomes of it on a CPU that
    lacks the target's features (a target this host cannot execute), with where that is read."""

    runs: str
    without_the_target_cpu: str
    seen: str


class OwnTest(Frozen):
    """A part of a component's own test suite, run from the source tree the dev image keeps."""

    file: str  # under the source tree
    select: str | None = None  # pytest's -k
    needs: Literal["mkldnn"] | None = None  # only for a backend whose torch has it
    why: str


class Alternative(Frozen):
    prefix: str | None = None
    requirements: tuple[str, ...] = ()  # what pip installs for it ("{version}": the component's)
    build_packages: tuple[str, ...] = ()
    runtime_packages: tuple[str, ...] = ()
    index: str | None = None  # where prebuilt wheels of it are published (pip's simple index)


# A file pattern under a component's prefix: a folder and a file-name glob (lib/libopenblas*.so*).
ShippedPattern = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.+-]+(/[A-Za-z0-9_.+-]+)*/[A-Za-z0-9_.+*?-]+$")]


class Component(Frozen):
    name: str
    stage: str
    # "always": part of every image of a backend that lists it; "torch-from-source": built only
    # when torch is compiled (a prebuilt torch wheel carries its own copy).
    needed_when: Literal["always", "torch-from-source"] = "always"
    prefix: str | None = None
    # When compiled: the shared libraries the final image ships, as patterns under `prefix`.
    # The final stage copies exactly these, the loader's path gets their folders, and the image
    # checks require every one to resolve.
    ships: tuple[ShippedPattern, ...] = ()
    # What the builds of the components that `use` this one are told about it (torch's
    # OpenBLAS_HOME, ACL_ROOT_DIR, numpy's PKG_CONFIG_PATH), {prefix} being where it was put.
    exports: dict[str, str] = {}
    uses: tuple[str, ...] = ()  # the components whose exports its build reads, when the build has them
    # The part of a build target this component is tuned by (targets.yaml: openblas, acl, zdnn);
    # a target without it cannot have this component compiled for it.
    tuning: Literal["openblas", "acl", "zdnn"] | None = None
    # Tuning values (a target's `tuning` settings) that only newer versions accept: value -> since.
    tuning_since: dict[str, Since] = {}
    # What each tuning setting accepts, per architecture (setting -> arch -> values), and where that
    # list is from: custom targets are held to it (selection.tuning_problem).
    tuning_values: dict[str, dict[str, tuple[str, ...]]] = {}
    tuning_values_from: str | None = None
    # Its own tests, run against what was compiled (the dev stage's checks), with the packages they
    # need pinned (downloaded with the build's, installed only where the checks run them).
    own_tests: tuple[OwnTest, ...] = ()
    own_tests_from: str | None = None
    test_requirements: tuple[PinnedPackage, ...] = ()
    # What its build runs on the build host (configure-time probes, self-tests, code generators),
    # said before a build for a target this host's CPU cannot execute.
    host_runs: tuple[HostRun, ...] = ()
    script: str
    # The versions its script can build (a specifier), and why no other: a pin outside is refused.
    script_builds: str | None = None
    script_builds_why: str | None = None
    build_packages: tuple[str, ...] = ()
    runtime_packages: tuple[str, ...] = ()
    build_requirements: tuple[PinnedPackage, ...] = ()
    # The pip the build installs over the venv's own before anything else, and leaves in place.
    installer: PinnedPackage | None = None
    # The source's own [build-system] requires (pyproject.toml), as published: our pins above must
    # satisfy each (a requirement on another component of the stack, numpy for torch, is met by
    # that component). The build checks it again (pip --check-build-dependencies).
    build_system_requires: tuple[str, ...] = ()
    # What its installed package holds that nothing at run time reads (test programs), as globs under
    # site-packages: left out of the final image.
    unread: tuple[str, ...] = ()
    env: dict[str, str] = {}
    wheel_excludes: tuple[str, ...] = ()
    url: str
    file: str
    versions: tuple[Pin, ...] = Field(min_length=1)
    alternatives: dict[str, Alternative] = {}

    @property
    def methods(self) -> tuple[str, ...]:
        return ("source", *self.alternatives)

    @model_validator(mode="after")
    def _pins_satisfy_the_build_system(self) -> Component:
        pins = {canonicalize_name(p.split("==")[0]): p.split("==")[1] for p in self.build_requirements}
        unmet = []
        for text in self.build_system_requires:
            requirement = Requirement(text)
            name = canonicalize_name(requirement.name)
            if name in pins and not requirement.specifier.contains(pins[name], prereleases=True):
                unmet.append(f"{text} (pinned {pins[name]})")
            elif name not in pins and name not in STACK_PACKAGES:
                unmet.append(f"{text} (not pinned)")
        if unmet:
            raise ValueError(f"build_requirements do not satisfy the source's build-system requires: {', '.join(unmet)}")
        return self

    @model_validator(mode="after")
    def _ships_need_prefix(self) -> Component:
        if self.ships and not self.prefix:
            raise ValueError("ships needs a prefix (the patterns are under it)")
        return self

    def own_tests_for(self, mkldnn: bool) -> tuple[OwnTest, ...]:
        return tuple(t for t in self.own_tests if t.needs is None or (t.needs == "mkldnn" and mkldnn))

    @property
    def default_version(self) -> str:
        return self.versions[0].version

    def refuses(self, version: str, target_values: tuple[str, ...]) -> str | None:
        """Why this version cannot be compiled (for a target whose tuning settings are
        `target_values`), or None: from the data (script_builds, tuning_since), not names in code."""
        if self.script_builds and not SpecifierSet(self.script_builds).contains(version, prereleases=True):
            return f"{self.name} {version}: scripts/{self.script} builds {self.name}{self.script_builds} only ({self.script_builds_why})"
        for value in target_values:
            since = self.tuning_since.get(value)
            if since and Version(version) < Version(since.version):
                able = [p.version for p in self.versions if Version(p.version) >= Version(since.version)]
                return (
                    f"{self.name} {version} cannot build for {value}: that needs {since.version} or newer "
                    f"({since.seen}); pinned versions that can: {', '.join(able) or 'none'}"
                )
        return None

    def paired_with(self, torch_version: str) -> Pin | None:
        """The pin upstream builds `torch_version` with, where the pins say (`torch`)."""
        line = ".".join(torch_version.split("+")[0].split(".")[:2])
        return next((p for p in self.versions if line in p.torch), None)

    @property
    def pairs_with_torch(self) -> bool:
        return any(p.torch for p in self.versions)

    def source(self, version: str | None = None) -> Source | None:
        """The pinned source of `version` (default: the first listed), or None if not pinned."""
        pin = next((p for p in self.versions if p.version == (version or self.default_version)), None)
        if pin is None:
            return None
        return Source(
            version=pin.version,
            url=pin.url or self.url.format(version=pin.version),
            filename=self.file.format(version=pin.version),
            sha256=pin.sha256,
            sha256_from=pin.sha256_from,
        )


class TorchRelease(Frozen):
    """A torch release the catalog knows (data/torch.yaml): its wheels' Pythons, what it pulls in, pinned."""

    name: str  # the release, e.g. 2.15.0
    released: date
    pythons: tuple[str, ...] = Field(min_length=1)
    requires_dist: tuple[str, ...] = ()  # as PyPI's wheel declares it, CUDA's packages left out
    requires_dist_from: str
    runtime_requirements: tuple[PinnedPackage, ...] = Field(min_length=1)
    resolved: str

    def has_wheel_for(self, python: str) -> bool:
        return python in self.pythons


class Plugin(Frozen):
    """A wheel built on torch that the toolkit knows (plugins.yaml): a vendor plugin, or a domain
    library (`--with`)."""

    name: str
    vendor: str
    description: str
    library: bool = False  # a domain library, installed with --with NAME
    module: str | None = None
    versions: tuple[str, ...] = ()
    torch_pairing: Literal["version-prefix", "table"] | None = None
    torch_lines: dict[str, tuple[str, ...]] = {}  # table: each version's torch release lines ("2.13")
    pairing_from: str | None = None  # where the pairing is published
    compile_backends: tuple[str, ...] = ()
    devices: tuple[str, ...] = ()
    requirements: tuple[PinnedPackage, ...] = ()
    checks: tuple[str, ...] = ()  # files of tests/image/final/ the final checks run in the image
    on_pypi: bool = True

    @field_validator("torch_lines", mode="before")
    @classmethod
    def _one_line_or_many(cls, value: object) -> object:
        return {k: (v,) if isinstance(v, str) else v for k, v in value.items()} if isinstance(value, dict) else value

    @model_validator(mode="after")
    def _every_version_paired(self) -> Plugin:
        unpaired = [v for v in self.versions if self.torch_pairing == "table" and v not in self.torch_lines]
        if unpaired:
            raise ValueError(f"torch_pairing table: no torch_lines entry for {', '.join(unpaired)}")
        return self

    @property
    def import_name(self) -> str:
        return self.module or self.name.replace("-", "_")

    def version_for(self, torch_version: str) -> str | None:
        """The pinned version that pairs with `torch_version` (its release, local label dropped)."""
        return next((v for v in self.versions if self.pairs(v, torch_version)), None)

    def torch_lines_of(self, version: str) -> tuple[str, ...] | None:
        """The torch releases (lines, "2.14") `version` is built for; None where the pairing does not say."""
        if self.torch_pairing == "version-prefix":
            return (version.rsplit(".", 1)[0],)
        return self.torch_lines.get(version) if self.torch_pairing == "table" else None

    def pairs(self, version: str, torch_version: str) -> bool:
        lines, release = self.torch_lines_of(version), torch_version.split("+")[0]
        return lines is None or any(release == line or release.startswith(line + ".") for line in lines)

    def pairings(self) -> str:
        """Each pinned version with the torch it pairs with, e.g. "2.14.0.1 for torch 2.14.0"."""
        return ", ".join(f"{v} for torch {' or '.join(self.torch_lines_of(v) or ('any',))}" for v in self.versions)
