"""An engine as the toolkit holds it: what it does, what it says it is, what its kind does differently, the builder it builds with."""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from torchstack.base import redact
from torchstack.base.errors import ToolkitError, UsageProblem
from torchstack.engines.buildjob import BuildJob, BuildResult

SETUP = "scripts/setup-host.sh"


class NoSuchImage(ToolkitError):
    """The engine has no image of that name or ID."""


class EngineRefused(ToolkitError):
    """The engine refused an operation; the message is its words, in one line."""


class CommandFailed(ToolkitError):
    """A command in a container of the image ended with a non-zero exit status; `stderr` is what it said."""

    def __init__(self, image: str, command: list[str], exit_status: int, stderr: bytes):
        said = " ".join(stderr.decode(errors="replace").split())[:300]
        super().__init__(f"{' '.join(command)[:120]} in {image} exited {exit_status}: {said}")
        self.exit_status, self.stderr = exit_status, stderr


@dataclass(frozen=True)
class Image:
    """An image as the engine's store holds it."""

    id: str  # the store's ID: the configuration's digest, or on Docker's containerd store the manifest's
    tags: tuple[str, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    size: int = 0  # as the engine counts it (Engine.sizes)
    architecture: str = ""  # amd64, arm64, s390x
    created: str = ""  # its configuration's `created`, RFC 3339
    config: Mapping[str, object] = field(default_factory=dict)  # its configuration's `config`: Env, Labels, Entrypoint, ...


@dataclass(frozen=True)
class Engine:
    """An engine as chosen, then (connection.connect) as it says it is: its release, API versions, image
    store. Each kind (docker_engine.py, podman_engine.py) answers the same questions in its own way:
    which builder it builds with, what a refused login or TLS failure tells the user to do, what
    the checks need to reach it, what it cannot do. Callers ask those, never which kind it is."""

    kind: str  # docker | podman: what the summary and the provenance record
    url: str  # what the Docker SDK connects to: the engine's API socket
    why: str  # how it was chosen, for the plan and the summary
    version: str = ""  # its release, as /version says (empty until connected)
    api_version: str = ""  # the newest API it speaks
    min_api_version: str = ""  # the oldest API it accepts (Docker 29: 1.44)
    store: str = ""  # where it keeps images: containerd (Docker's containerd image store), overlay2, ... (podman: its storage driver)
    sdk: object = field(default=None, repr=False, compare=False, kw_only=True)  # its kind's client, once connected (connection.connect)

    cli: ClassVar[str] = ""  # its command, as messages name it
    takes_stages_by_name: ClassVar[bool] = False  # an earlier stage here (or pulled) under its content name is taken as it is
    push_streams_layers: ClassVar[bool] = True  # its push API reports each layer as it goes (Podman's says only the digest)
    refusals: ClassVar[Mapping[str, str]] = {}  # option -> why this kind cannot carry it out (refuse)
    default_url: ClassVar[str] = ""  # where it answers when --engine names it and DOCKER_HOST does not

    @classmethod
    def names_itself(cls, version: dict) -> bool:
        """Whether the engine's answer to /version says it is of this kind."""
        return False

    @property
    def containerd_store(self) -> bool:
        """Docker's containerd image store (Docker 29's default on a new install): an image's ID is
        the digest of its manifest (or index), its size the compressed content's."""
        return False

    @property
    def buildkit_default(self) -> bool:
        """Whether it builds with BuildKit by default: Docker 23 and later."""
        return False

    @property
    def sizes(self) -> str:
        """What its image sizes count, in the summary's words."""
        return "compressed" if self.containerd_store else "unpacked"

    def describe(self) -> str:
        said = f"{self.kind.capitalize()} {self.version}, {self.store} image store, " if self.version else ""
        return f"{self.kind} at {self.url} ({said}{self.why})"

    def release(self) -> dict:
        """Its kind, release and image store, as the summary and the provenance record them."""
        return {"kind": self.kind, "version": self.version, "store": self.store}

    def layers_made_by(self) -> dict:
        """What decides the layers a step makes: the kind and the image store (Docker's overlay2 store
        writes whiteouts and lock files its containerd store does not). The release image's build-info
        records it, so a rebuild runs where the layers come out the same; not the release, which would
        make every engine update a new image."""
        return {"kind": self.kind, "store": self.store}

    # What the toolkit asks the engine to do (docker_api.DockerApi does it over Docker's API).

    def image(self, name: str) -> Image:
        """The image `name` (or ID) names here; NoSuchImage where there is none."""
        raise NotImplementedError

    def has_image(self, name: str) -> bool:
        try:
            self.image(name)
        except NoSuchImage:
            return False
        return True

    def pull(self, reference: str, platform: str | None = None) -> str | None:
        """Pull `reference`; None when it came, else why not (one line)."""
        raise NotImplementedError

    def tag(self, image: str, name: str) -> None:
        """Give the image `image` (a name or ID) the name REPOSITORY:TAG `name` too."""
        raise NotImplementedError

    def remove_image(self, name: str, prune: bool = False) -> bool:
        """Remove the name `name` (with `prune`, the layers only it held too); whether it was removed."""
        raise NotImplementedError

    def images_named(self, repository: str) -> list[Image]:
        """The images of `repository` (their ID, tags, labels)."""
        raise NotImplementedError

    def save(self, image: str) -> Iterator[bytes]:
        """The image exported as `docker save` writes it (an archive of its manifest, configuration, layers)."""
        raise NotImplementedError

    def push(self, repository: str, tag: str) -> Iterator[dict]:
        """Push REPOSITORY:TAG, as the engine streams its progress: Docker's push events (`status`, `id`;
        `error` where the registry refused; a `digest: sha256:...` status at the end)."""
        raise NotImplementedError

    def output_of(self, image: str, command: list[str], stderr: bool = False, **options) -> bytes:
        """What `command` prints (stdout; with `stderr`, both) in a new container of `image`, which carries
        this run's owner (sharing.labels) and is removed after; CommandFailed on a non-zero exit.
        `options`: entrypoint, platform, network_mode, environment, volumes, user."""
        raise NotImplementedError

    def files_of(self, image: str, paths: list[str]) -> dict[str, list[bytes]]:
        """The files at `paths` in `image`, read without running it: each path's regular files' contents
        (one for a file, each of a folder's); a path the image lacks is left out."""
        raise NotImplementedError

    def containers_labelled(self, label: str) -> list[tuple[str, Mapping[str, str]]]:
        """Each container (running or not) that carries `label` (NAME or NAME=VALUE): its ID, its labels."""
        raise NotImplementedError

    def remove_container(self, container_id: str) -> None:
        """Remove the container, running or not; one already gone is no error."""
        raise NotImplementedError

    # What each kind answers in its own way.

    def builder_word(self, compiles_torch: bool, buildx_installed: Callable[[], bool], released: Callable[[], Engine]) -> str:
        """--builder auto settled on this engine, in --builder's words (docker | buildx). What it asks,
        it asks when it needs it: whether buildx is installed, the engine with its release."""
        raise NotImplementedError

    def builder(self, wanted: str, buildx_builder: str | None = None) -> Builder:
        """The builder a plan's `wanted` (--builder's word, settled) means on this engine."""
        raise NotImplementedError

    def builder_name(self, wanted: str) -> str:
        """The name (buildkit, legacy, buildah: the summary's) of the builder `wanted` means here."""
        return self.builder(wanted).name

    def login_hint(self, host: str) -> str:
        """What a registry's refused login tells the user to do."""
        raise NotImplementedError

    def tls_hint(self, host: str) -> str:
        """What a push that failed on TLS tells the user to do."""
        raise NotImplementedError

    def reached_by(self) -> dict[str, str]:
        """The environment through which the checks (the SDK, testinfra's CLI) reach this engine."""
        return {"DOCKER_HOST": self.url}

    def too_old_to_build(self) -> str | None:
        """Why the connected engine cannot build the toolkit's images; None where it can."""
        return None

    def cli_refused(self, environ: Mapping[str, str] | None = None) -> str | None:
        """Why the engine's command here cannot drive it (buildx builds, the checks' `exec`); None where it can."""
        return None

    def unreachable(self, exc: Exception) -> str:
        """What to start or install when nothing answers at its URL."""
        raise NotImplementedError

    def refuse(self, options: Mapping[str, object]) -> None:
        """One line, before any work, for an option this engine cannot carry out."""
        for option, why in self.refusals.items():
            value = options.get(option)
            if value and not (option == "builder" and value != "buildx"):
                raise UsageProblem(why)

    def refuse_index_login(self, wanted: str, index_url: str | None) -> None:
        """One line, before any work, for a package index whose URL carries a login (a user, a token) where the
        builder `wanted` (--builder's word, settled) means here has no secret mounts: pip's configuration
        would go into the build context, and from there into a layer the engine's build cache keeps."""
        if not index_url or urllib.parse.urlsplit(index_url).username is None or self.builder(wanted).mounts_secrets:
            return
        raise UsageProblem(
            f"--pip-index-url {redact.url(index_url)} carries a login, which the {self.builder_name(wanted)} builder would "
            "leave in the engine's build cache (it has no secret mounts): build with BuildKit (--builder buildx; "
            f"Docker 23 and later have it, {SETUP} installs docker-buildx for older ones) or with Podman (--engine podman), "
            "or give an index without a login"
        )


@dataclass(frozen=True)
class Builder:
    """A way of building on an engine. Each kind says, in one place, its name in the summary, how it
    builds one image (BuildJob), whether a step may start FROM an image ID, and why its images cannot
    be made again bit for bit (None where they can)."""

    client: object  # the engine's SDK client (Engine.sdk), which builds through it; None where nothing is built
    engine: Engine
    name = ""  # buildkit | legacy | buildah: its name in the plan and the summary
    builds_from_ids = True  # BuildKit reads `FROM sha256:...` as a registry's name
    reads_cache_from_images = True  # --cache-from: images here, pulled first
    reads_cache_from_registry = False  # --cache-from: the registry's, asked by the builder itself
    drives_the_cli = False  # it builds through the engine's command (buildx), not the API alone
    mounts_secrets = False  # it hands the build's secrets to the steps that name them (RUN --mount=type=secret), never to a layer
    # Its steps mount (RUN --mount) the build's secrets and the compiler cache; else the context holds the secrets.
    mounts_in_steps = False

    def build(self, job: BuildJob) -> BuildResult:
        raise NotImplementedError

    def why_not_reproducible(self) -> str | None:
        return None


@dataclass(frozen=True)
class BuildRun:
    """A running build as the modules that build, check and push take it: the engine's builder (and so
    the client and the engine as it says it is), this run's build contexts, its log."""

    builder: Builder
    contexts: Path  # this run's private folder (sharing.private_folder): a context per image it builds
    log_path: Path
    note: Callable[[str], None]  # a line for the person watching (progress.BuildView.note)

    @property
    def engine(self) -> Engine:
        return self.builder.engine


def reason(exc: Exception) -> str:
    """What an engine's failure to answer says, in a few words."""
    return str(exc).split("(")[0].strip() or type(exc).__name__


def numbers(version: str) -> tuple[int, ...]:
    """A release or API version as numbers to compare: "1.44" -> (1, 44)."""
    return tuple(int(part) for part in version.split(".") if part.isdigit())
