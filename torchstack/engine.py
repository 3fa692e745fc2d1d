"""The Docker engine as builds use it: one streamed image build at a time, with its outcome."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import docker
import docker.errors

from torchstack.errors import BuildFailed, EngineUnavailable

_STEP = re.compile(r"^Step (\d+)/(\d+) : (.*)$")
# BuildKit's plain progress: "#7 [build 3/9] RUN ..." and "#7 CACHED".
_BUILDKIT_STEP = re.compile(r"^#(\d+) \[([^\]]*?)\s*(\d+)/(\d+)\] (.*)$")
_BUILDKIT_CACHED = re.compile(r"^#(\d+) CACHED$")


def connect() -> docker.DockerClient:
    """A client for the engine DOCKER_HOST names (default: the local socket), or one clear error."""
    try:
        client = docker.from_env(timeout=600)
        client.ping()
    except (docker.errors.DockerException, OSError) as exc:
        reason = str(exc).split("(")[0].strip() or type(exc).__name__
        raise EngineUnavailable(
            f"no Docker engine answers ({reason}); start one with `sudo dockerd &` or `sudo systemctl start docker`, "
            "or run scripts/setup-host.sh"
        ) from None
    return client


@dataclass
class BuildProgress:
    """What a running build has said so far; the live view reads it."""

    step: int = 0
    steps: int = 0
    instruction: str = ""
    cached_steps: int = 0
    started: float = field(default_factory=time.monotonic)
    tail: deque = field(default_factory=lambda: deque(maxlen=25))


@dataclass(frozen=True)
class BuildResult:
    image_id: str
    seconds: float
    cached: bool


def build_image(
    client: docker.DockerClient,
    context: Path,
    tag: str | None,
    platform: str,
    labels: dict[str, str],
    nocache: bool,
    log: Callable[[str], None],
    progress: BuildProgress,
    stage: str,
    log_path: Path,
) -> BuildResult:
    """Build one image with the engine's streaming (legacy) builder; tag it only if it succeeds.

    The engine applies `tag` after the last step, so a failed or interrupted build leaves no
    tag behind, and every finished step stays in the engine's cache for the next run.
    """
    stream = client.api.build(
        path=str(context),
        tag=tag,
        platform=platform,
        labels=labels,
        nocache=nocache,
        rm=True,
        forcerm=True,
        pull=False,
        network_mode="host",
        decode=True,
    )
    image_id = None
    from_steps = 0
    try:
        for chunk in stream:
            if "error" in chunk:
                raise _failure(stage, progress, chunk.get("errorDetail", {}).get("message") or chunk["error"], log_path)
            if "aux" in chunk and "ID" in chunk["aux"]:
                image_id = chunk["aux"]["ID"]
            text = chunk.get("stream", "")
            for line in text.splitlines():
                stripped = line.strip()
                match = _STEP.match(stripped)
                if match:
                    progress.step, progress.steps, progress.instruction = int(match[1]), int(match[2]), match[3]
                    if match[3].upper().startswith("FROM"):
                        from_steps += 1
                elif stripped == "---> Using cache":
                    progress.cached_steps += 1
                elif stripped:
                    progress.tail.append(stripped)
                log(line)  # after the progress, so that a new step is shown as it starts
    finally:
        stream.close()
    if image_id is None:
        image_id = client.images.get(tag).id
    seconds = time.monotonic() - progress.started
    cached = progress.steps > 0 and progress.cached_steps >= progress.steps - from_steps
    return BuildResult(image_id=image_id, seconds=seconds, cached=cached)


def _failure(stage: str, progress: BuildProgress, detail: str, log_path: Path) -> BuildFailed:
    last = "\n    ".join(list(progress.tail)[-12:])
    return BuildFailed(
        f"stage {stage} failed at step {progress.step}/{progress.steps} ({progress.instruction[:100]}): "
        f"{detail.strip()}\n  last output:\n    {last}\n  full log: {log_path}"
    )


def buildx_available() -> bool:
    docker_cli = shutil.which("docker")
    return docker_cli is not None and subprocess.run([docker_cli, "buildx", "version"], capture_output=True).returncode == 0


def build_image_buildx(
    context: Path,
    tag: str,
    platform: str,
    labels: dict[str, str],
    nocache: bool,
    secrets: dict[str, Path],
    log: Callable[[str], None],
    progress: BuildProgress,
    stage: str,
    log_path: Path,
    builder: str | None = None,
) -> BuildResult:
    """Build one image with BuildKit (`docker buildx build --load`): cache mounts and secrets.
    `builder` names a builder made with `docker buildx create` (remote, Kubernetes, ...); the
    image comes back into this engine either way (--load), where the checks run.

    BuildKit names the image only once it is complete, so a failed or interrupted build
    leaves no tag; finished steps stay in BuildKit's cache.
    """
    command = buildx_command(context, tag, platform, labels, nocache, secrets, builder)
    steps: dict[str, str] = {}
    cached: set[str] = set()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, bufsize=1)
    try:
        for line in process.stderr:
            line = line.rstrip("\n")
            match = _BUILDKIT_STEP.match(line)
            if match:
                steps[match[1]] = match[5]
                progress.step, progress.steps, progress.instruction = int(match[3]), int(match[4]), match[5]
            elif _BUILDKIT_CACHED.match(line):
                cached.add(line.split()[0][1:])
            elif line.strip():
                progress.tail.append(line.strip())
            log(line)  # after the progress, so that a new step is shown as it starts
        process.wait()
    except BaseException:
        process.terminate()
        process.wait()
        raise
    if process.returncode != 0:
        errors = [line for line in progress.tail if "ERROR" in line] or ["docker buildx build failed"]
        raise _failure(stage, progress, errors[-1], log_path)
    run_steps = {k for k, v in steps.items() if not v.upper().startswith("FROM")}
    progress.cached_steps = len(cached & run_steps)
    image_id = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{.Id}}", tag], capture_output=True, text=True
    ).stdout.strip()
    return BuildResult(image_id=image_id, seconds=time.monotonic() - progress.started, cached=run_steps <= cached)


def buildx_command(context: Path, tag: str, platform: str, labels: dict[str, str], nocache: bool,
                   secrets: dict[str, Path], builder: str | None = None) -> list[str]:  # fmt: skip
    """The `docker buildx build` command line for one stage."""
    command = ["docker", "buildx", "build", "--progress=plain", "--load", "--tag", tag,
               "--platform", platform, "--network", "host"]  # fmt: skip
    if builder:
        command += ["--builder", builder]
    if nocache:
        command.append("--no-cache")
    command += [arg for key, path in secrets.items() for arg in ("--secret", f"id={key},src={path}")]
    command += [arg for key, value in labels.items() for arg in ("--label", f"{key}={value}")]
    return [*command, str(context)]


def buildx_builder_exists(name: str) -> bool:
    return subprocess.run(["docker", "buildx", "inspect", name], capture_output=True).returncode == 0


def image_size(client: docker.DockerClient, image: str) -> int:
    return int(client.images.get(image).attrs.get("Size", 0))


def image_exists(client: docker.DockerClient, image: str) -> bool:
    try:
        client.images.get(image)
        return True
    except docker.errors.ImageNotFound:
        return False
