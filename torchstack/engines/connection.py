"""Which container engine the toolkit talks to, settled before any work: where it answers, what it is, which builder it takes."""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import docker
import docker.errors

from torchstack.base.errors import EngineUnavailable, UsageProblem
from torchstack.engines import buildkit, docker_api
from torchstack.engines.docker_engine import BUILDKIT, DockerEngine
from torchstack.engines.engine import Engine
from torchstack.engines.podman_engine import PodmanEngine

DOCKER_SOCKET = Path("/var/run/docker.sock")
PODMAN_ROOT_SOCKET = Path("/run/podman/podman.sock")  # `podman system service` as root, podman.socket's path


# What the SDK raises when an engine fails, for the command line's last word (one line, no traceback).
FAILURES = docker_api.FAILURES

# Each kind of engine the toolkit drives, by the name `--engine` and the summary give it: a new
# Docker-API-compatible engine is one module (its Engine) and one line here.
KINDS: dict[str, type[Engine]] = {"docker": DockerEngine, "podman": PodmanEngine}
ENGINES = ("auto", *KINDS)  # what --engine takes


def engine_of(kind: str, url: str, why: str, *said: str, **named: str) -> Engine:
    """An engine of `kind` at `url`, chosen for `why`; then what it says of itself once connected
    (release, API versions, image store: Engine's fields)."""
    return KINDS[kind](kind, url, why, *said, **named)


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
    if wanted != "auto" and wanted not in KINDS:
        raise UsageProblem(f"--engine {wanted!r}: valid: {', '.join(('auto', *KINDS))}")
    if wanted == "docker":
        return engine_of("docker", docker_host or f"unix://{DOCKER_SOCKET}", "--engine docker" + (", DOCKER_HOST" if docker_host else ""))
    if wanted not in ("auto", "docker", "podman"):  # a kind found only when asked for: DOCKER_HOST's, else its own socket
        return engine_of(wanted, docker_host or KINDS[wanted].default_url, f"--engine {wanted}" + (", DOCKER_HOST" if docker_host else ""))
    if wanted == "podman":
        if container_host:
            return engine_of("podman", container_host, "--engine podman, CONTAINER_HOST")
        if docker_host:
            return engine_of("podman", docker_host, "--engine podman, DOCKER_HOST")
        return engine_of("podman", podman_url, "--engine podman")
    if docker_host:
        return engine_of("podman" if "podman" in docker_host else "docker", docker_host, "DOCKER_HOST")
    if container_host:
        return engine_of("podman", container_host, "CONTAINER_HOST")
    docker_here = DOCKER_SOCKET.exists()
    if docker_here or not podman_socket(environ, uid).exists():
        return engine_of("docker", f"unix://{DOCKER_SOCKET}", "its socket is here" if docker_here else "the default")
    return engine_of("podman", podman_url, "its socket is here, Docker's is not")


def kind_of(version: dict) -> str:
    """The kind the engine's answer to /version names (Podman names itself in Components); Docker's
    where none does: anything else that speaks its API is driven as Docker is."""
    return next((kind for kind, engine in KINDS.items() if engine.names_itself(version)), "docker")


def connect(chosen: Engine) -> Engine:
    """The chosen engine as it says it is, with its client: what the toolkit holds to have it work;
    or one clear error naming what to start or install."""
    try:
        client = docker.DockerClient(base_url=chosen.url, timeout=600)
        version = client.version()
    except (docker.errors.DockerException, OSError) as exc:
        raise EngineUnavailable(chosen.unreachable(exc)) from None
    kind = kind_of(version)
    if kind != chosen.kind:
        if chosen.why.startswith("--engine"):
            raise UsageProblem(
                f"--engine {chosen.kind}, but the engine at {chosen.url} is {kind.capitalize()} "
                f"{version.get('Version', '')}: point DOCKER_HOST at a {chosen.kind} engine, or drop --engine"
            )
        chosen = engine_of(kind, chosen.url, f"{chosen.why}; the engine says it is {kind.capitalize()}")
    try:
        info = client.info()
    except (docker.errors.DockerException, OSError) as exc:
        raise EngineUnavailable(f"the engine at {chosen.url} answers /version but not /info: {str(exc)[:200]}") from None
    return replace(described(chosen, version, info), sdk=client)


def builder_asked(word: str, options: Mapping[str, object]) -> str:
    """--builder's `word` with what the other options need of it: --buildx-builder and --ccache-dir are
    BuildKit's (auto then means it); with another builder, refused in one line."""
    for option, why in (("buildx_builder", "names a BuildKit builder"), ("ccache_dir", "moves BuildKit's compiler cache")):
        if options.get(option):
            if word not in ("auto", BUILDKIT):
                raise UsageProblem(f"--{option.replace('_', '-')} {why}: use it with --builder buildx (or auto)")
            word = BUILDKIT
    return word


def mounts_in_steps(word: str) -> bool:
    """Whether the builder --builder's settled `word` means runs its steps with mounts (Builder.mounts_in_steps),
    as Docker's engine means the word: Podman refuses the one word whose builder mounts (--builder buildx)."""
    return engine_of("docker", DockerEngine.default_url, "--builder's word").builder(word).mounts_in_steps


def another_kind(chosen: Engine, connected: Engine) -> bool:
    """Whether the engine that answered (connect) is of another kind than the one chosen (DOCKER_HOST
    naming a Podman socket, say): what the request was settled for is then to be asked of it again."""
    return connected.kind != chosen.kind


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


def settle_builder(choice: str, compiles_torch: bool, chosen: Engine) -> str:
    """--builder auto settled on `chosen` (connected or not: its release is asked for where the choice needs it), in
    --builder's words: BuildKit wherever the engine has it as its default and buildx is installed,
    and for a PyTorch compile on any Docker engine; the legacy builder where the engine offers
    nothing else (Docker 20.10 without buildx, Podman's API)."""
    if choice != "auto":
        return choice
    return chosen.builder_word(compiles_torch, buildkit.available, functools.partial(with_release, chosen))


def why_not_reproducible(chosen: Engine, wanted: str) -> str | None:
    """The verdict of the builder `wanted` means on `chosen` (connected or not: its release is asked for)."""
    return with_release(chosen).builder(wanted).why_not_reproducible()


def with_release(chosen: Engine) -> Engine:
    """`chosen` with its release, where it answers; as it is where it does not (the build then says why)."""
    if chosen.version:
        return chosen
    try:
        version = docker.DockerClient(base_url=chosen.url, timeout=10).version()
    except (docker.errors.DockerException, OSError):
        return chosen
    return replace(chosen, version=str(version.get("Version") or ""))
