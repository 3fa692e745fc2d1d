"""The Docker engine: connecting, streaming one image build, and what came out of it."""

from __future__ import annotations

import re
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import docker
import docker.errors

from torchstack.errors import BuildFailed, EngineUnavailable

_STEP = re.compile(r"^Step (\d+)/(\d+) : (.*)$")


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
    tag: str,
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
                detail = chunk.get("errorDetail", {}).get("message") or chunk["error"]
                last = "\n    ".join(list(progress.tail)[-12:])
                raise BuildFailed(
                    f"stage {stage} failed at step {progress.step}/{progress.steps} ({progress.instruction[:100]}): "
                    f"{detail.strip()}\n  last output:\n    {last}\n  full log: {log_path}"
                )
            if "aux" in chunk and "ID" in chunk["aux"]:
                image_id = chunk["aux"]["ID"]
            text = chunk.get("stream", "")
            for line in text.splitlines():
                log(line)
                stripped = line.strip()
                if not stripped:
                    continue
                match = _STEP.match(stripped)
                if match:
                    progress.step, progress.steps, progress.instruction = int(match[1]), int(match[2]), match[3]
                    if match[3].upper().startswith("FROM"):
                        from_steps += 1
                elif stripped == "---> Using cache":
                    progress.cached_steps += 1
                else:
                    progress.tail.append(stripped)
    finally:
        stream.close()
    if image_id is None:
        image_id = client.images.get(tag).id
    seconds = time.monotonic() - progress.started
    cached = progress.steps > 0 and progress.cached_steps >= progress.steps - from_steps
    return BuildResult(image_id=image_id, seconds=seconds, cached=cached)


def image_size(client: docker.DockerClient, image: str) -> int:
    return int(client.images.get(image).attrs.get("Size", 0))


def image_exists(client: docker.DockerClient, image: str) -> bool:
    try:
        client.images.get(image)
        return True
    except docker.errors.ImageNotFound:
        return False
