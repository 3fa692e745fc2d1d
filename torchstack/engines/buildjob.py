"""One image build as a value: what to build, what it has said so far, what it made."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from torchstack.base.errors import BuildFailed


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
    ran: tuple[str, ...] = ()  # the steps the engine ran, not took from its cache (FROM aside)


def _quiet(line: str) -> None:
    """Where a build's lines go when nobody reads them."""


@dataclass(frozen=True)
class BuildJob:
    """One image to build from a context folder, whichever builder builds it (engine.Builder).

    `tag` is applied only when the build succeeds (None: the image stays untagged). `epoch` is the
    image's date where the builder takes SOURCE_DATE_EPOCH (BuildKit); `timestamp` the date and every
    file's time where the builder stamps both (Podman), its steps run with `step_environment`; Docker's
    legacy builder stamps the clock whatever is given. `cache_from`: images whose steps may be reused
    (the legacy builder: images here; BuildKit: registry references). `secrets`: BuildKit's secret
    mounts, id -> host file. `inline_cache`: the image carries BuildKit's cache record for another
    host's --cache-from."""

    context: Path
    tag: str | None
    platform: str
    labels: Mapping[str, str]
    stage: str  # the name errors give it: a stage, "os", "refresh", "sbom"
    log_path: Path  # named in a failure's message
    log: Callable[[str], None] = _quiet
    progress: BuildProgress = field(default_factory=BuildProgress)
    nocache: bool = False
    cache_from: tuple[str, ...] = ()
    epoch: int | None = None
    timestamp: int | None = None
    step_environment: Mapping[str, str] = field(default_factory=dict)
    secrets: Mapping[str, Path] = field(default_factory=dict)
    inline_cache: bool = False

    def failure(self, detail: str) -> BuildFailed:
        progress = self.progress
        last = "\n    ".join(list(progress.tail)[-12:])
        return BuildFailed(
            f"stage {self.stage} failed at step {progress.step}/{progress.steps} ({progress.instruction[:100]}): "
            f"{detail.strip()}\n  last output:\n    {last}\n  full log: {self.log_path}"
        )
