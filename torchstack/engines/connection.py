"""Which container engine the toolkit talks to, Docker's or Podman's, settled before any work.

Where it answers, what kind it says it is, what it cannot do (refused in one line), and what to
start or install when none answers."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import docker
import docker.errors

from torchstack.base.errors import EngineUnavailable, UsageProblem

ENGINES = ("auto", "docker", "podman")
DOCKER_SOCKET = Path("/var/run/docker.sock")
PODMAN_ROOT_SOCKET = Path("/run/podman/podman.sock")  # `podman system service` as root, podman.socket's path
SETUP = "scripts/setup-host.sh"


@dataclass(frozen=True)
class Engine:
    """An engine as chosen, then (connect) as it says it is: its release, API versions, image store."""

    kind: str  # docker | podman
    url: str  # what the Docker SDK connects to: the engine's API socket
    why: str  # how it was chosen, for the plan and the summary
    version: str = ""  # its release, as /version says (empty until connected)
    api_version: str = ""  # the newest API it speaks
    min_api_version: str = ""  # the oldest API it accepts (Docker 29: 1.44)
    store: str = ""  # where it keeps images: containerd (Docker's containerd image store), overlay2, ... (podman: its storage driver)

    @property
    def containerd_store(self) -> bool:
        """Docker's containerd image store (Docker 29's default on a new install): an image's ID is
        the digest of its manifest (or index), its size the compressed content's."""
        return self.kind == "docker" and self.store == "containerd"

    @property
    def buildkit_default(self) -> bool:
        """Whether it builds with BuildKit by default: Docker 23 and later."""
        major = self.version.split(".")[0]
        return self.kind == "docker" and major.isdigit() and int(major) >= 23

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


def podman_socket(environ: Mapping[str, str], uid: int) -> Path:
    """Where `podman system service` (or systemd's podman.socket) listens: root's, or a rootless
    user's under $XDG_RUNTIME_DIR."""
    if uid == 0:
        return PODMAN_ROOT_SOCKET
    runtime = environ.get("XDG_RUNTIME_DIR") or f"/run/user/{uid}"
    return Path(runtime) / "podman" / "podman.sock"


def choose(wanted: str, environ: Mapping[str, str] | None = None, uid: int | None = None) -> Engine:
    """The engine `--engine` asks for; with auto, DOCKER_HOST's engine, else Podman's CONTAINER_HOST,
    else Docker's socket if present, else Podman's, else Docker's (which then says how to start one).
    The kind is confirmed when the engine answers (connect)."""
    environ = os.environ if environ is None else environ
    uid = os.getuid() if uid is None else uid
    docker_host, container_host = environ.get("DOCKER_HOST"), environ.get("CONTAINER_HOST")
    podman_url = f"unix://{podman_socket(environ, uid)}"
    if wanted not in ENGINES:
        raise UsageProblem(f"--engine {wanted!r}: valid: {', '.join(ENGINES)}")
    if wanted == "docker":
        return Engine("docker", docker_host or f"unix://{DOCKER_SOCKET}", "--engine docker" + (", DOCKER_HOST" if docker_host else ""))
    if wanted == "podman":
        if container_host:
            return Engine("podman", container_host, "--engine podman, CONTAINER_HOST")
        if docker_host:
            return Engine("podman", docker_host, "--engine podman, DOCKER_HOST")
        return Engine("podman", podman_url, "--engine podman")
    if docker_host:
        return Engine("podman" if "podman" in docker_host else "docker", docker_host, "DOCKER_HOST")
    if container_host:
        return Engine("podman", container_host, "CONTAINER_HOST")
    docker_here = DOCKER_SOCKET.exists()
    if docker_here or not podman_socket(environ, uid).exists():
        return Engine("docker", f"unix://{DOCKER_SOCKET}", "its socket is here" if docker_here else "the default")
    return Engine("podman", podman_url, "its socket is here, Docker's is not")


def kind_of(version: dict) -> str:
    """podman or docker, from the engine's answer to /version (Podman names itself in Components)."""
    names = [str(c.get("Name", "")) for c in version.get("Components") or []]
    return "podman" if any("podman" in name.lower() for name in names) else "docker"


def connect(chosen: Engine) -> tuple[docker.DockerClient, Engine]:
    """A client for the chosen engine, and the engine as it says it is; or one clear error naming
    what to start or install."""
    try:
        client = docker.DockerClient(base_url=chosen.url, timeout=600)
        version = client.version()
    except (docker.errors.DockerException, OSError) as exc:
        raise EngineUnavailable(unreachable(chosen, exc)) from None
    kind = kind_of(version)
    if kind != chosen.kind:
        if chosen.why.startswith("--engine"):
            raise UsageProblem(
                f"--engine {chosen.kind}, but the engine at {chosen.url} is {kind.capitalize()} "
                f"{version.get('Version', '')}: point DOCKER_HOST at a {chosen.kind} engine, or drop --engine"
            )
        chosen = replace(chosen, kind=kind, why=f"{chosen.why}; the engine says it is {kind.capitalize()}")
    try:
        info = client.info()
    except (docker.errors.DockerException, OSError) as exc:
        raise EngineUnavailable(f"the engine at {chosen.url} answers /version but not /info: {str(exc)[:200]}") from None
    return client, described(chosen, version, info)


def described(chosen: Engine, version: dict, info: dict) -> Engine:
    """`chosen` with what the engine says of itself (/version, /info)."""
    drivers = dict(tuple(pair) for pair in info.get("DriverStatus") or () if len(pair) == 2)
    store = "containerd" if "containerd.snapshotter" in str(drivers.get("driver-type", "")) else str(info.get("Driver") or "")
    return replace(
        chosen,
        version=str(version.get("Version") or ""),
        api_version=str(version.get("ApiVersion") or ""),
        min_api_version=str(version.get("MinAPIVersion") or ""),
        store=store,
    )


def _api(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".") if part.isdigit())


# The oldest Podman builds are tried with (Debian 12's): its own build endpoint with every date given
# (oci_build.py) and the Docker-compatible API the toolkit drives. RHEL 8 and 9 ship newer ones.
PODMAN_OLDEST = (4, 3)


def too_old_to_build(chosen: Engine) -> str | None:
    """Why the connected engine cannot build the toolkit's images; None where it can."""
    if chosen.kind != "podman" or _api(chosen.version.split("-")[0]) >= PODMAN_OLDEST:
        return None
    oldest = ".".join(map(str, PODMAN_OLDEST))
    return f"Podman {chosen.version} at {chosen.url} is older than {oldest}, the oldest the toolkit builds with: upgrade Podman"


def cli_refused(chosen: Engine, environ: Mapping[str, str] | None = None) -> str | None:
    """Why the `docker` command here cannot drive the engine (buildx builds, the checks' `docker exec`):
    its API is older than the oldest the engine accepts (Debian 12's docker.io 20.10 speaks 1.41,
    Docker 29 accepts 1.44 and later); None where it can, or where there is no such floor."""
    if chosen.kind != "docker" or not chosen.min_api_version:
        return None
    cli = shutil.which("docker")
    if cli is None:
        return None  # prerequisites names what is missing
    said = subprocess.run(
        [cli, "version", "--format", "{{.Client.APIVersion}}"],
        capture_output=True,
        text=True,
        env={**(os.environ if environ is None else environ), "DOCKER_HOST": chosen.url},
    ).stdout.strip()
    if said and _api(said) < _api(chosen.min_api_version):
        return (
            f"the docker command here ({cli}) speaks API {said}, and the engine at {chosen.url} (Docker {chosen.version}) "
            f"accepts {chosen.min_api_version} and later: install the Docker CLI of the engine's release "
            "(docker-cli, docker-ce-cli) or put it first on PATH"
        )
    return None


def unreachable(chosen: Engine, exc: Exception) -> str:
    reason = str(exc).split("(")[0].strip() or type(exc).__name__
    if chosen.kind == "podman":
        return (
            f"no Podman engine answers at {chosen.url} ({reason}); start its API service with "
            f"`podman system service --time=0 {chosen.url} &` or `systemctl start podman.socket` "
            f"(apt-get install podman, dnf install podman), or run {SETUP} --engine podman"
        )
    return (
        f"no Docker engine answers at {chosen.url} ({reason}); start one with `sudo dockerd &` or "
        f"`sudo systemctl start docker` (apt-get install docker.io), or run {SETUP}; "
        "on a host with Podman, use --engine podman"
    )


# What needs BuildKit or Docker's builder, which Podman's build API (buildah behind Docker's
# legacy endpoint) does not have: refused before any work.
PODMAN_REFUSES = {
    "builder": "--builder buildx needs BuildKit, which Podman does not have; with Podman every stage "
    "builds on its legacy-API builder (buildah): drop --builder buildx",
    "buildx_builder": "--buildx-builder names a BuildKit builder, which Podman does not have: drop it",
    "zstd": "--compression zstd copies the release image from Docker's engine with skopeo: with Podman, push gzip layers (the default)",
    "ccache_dir": "--ccache-dir moves BuildKit's compiler cache mount, which Podman's builder does not have: "
    "drop it (Podman reuses unchanged steps from its own cache, as Docker's legacy builder does)",
}


def refuse_for(kind: str, options: Mapping[str, object]) -> None:
    """One line, before any work, for an option the engine cannot carry out."""
    if kind != "podman":
        return
    for option, why in PODMAN_REFUSES.items():
        value = options.get(option)
        if value and not (option == "builder" and value != "buildx"):
            raise UsageProblem(why)
