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
    """One image to build from a context folder, whichever builder builds it (engine.Builder), in
    words no builder owns: each takes what it can of them (Docker's legacy builder stamps the clock
    whatever it is given, and takes secrets from the context alone).

    Its dates: `image_date`, the image's date (SOURCE_DATE_EPOCH) for a builder that dates the image
    apart from its files (BuildKit: each step's file times are clamped by the Dockerfile's own SHELL);
    `file_date`, the one time a builder that stamps the image and every file it writes alike gives
    both (Podman's buildah, whose steps run with reproducible.STEP_ENVIRONMENT). `secrets`: id -> host
    file, handed to the steps that name them by a builder that mounts secrets (Builder.mounts_secrets).
    `inline_cache`: the image carries its cache record, for another host's --cache-from, where the
    builder writes one (BuildKit).

    `tag` is applied only when the build succeeds (None: the image stays untagged). `cache_from`:
    images whose steps may be reused, as the builder reads them (Builder.reads_cache_from_images:
    images here; reads_cache_from_registry: registry references)."""

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
    image_date: int | None = None
    file_date: int | None = None
    secrets: Mapping[str, Path] = field(default_factory=dict)
    inline_cache: bool = False

    def failure(self, detail: str) -> BuildFailed:
        progress = self.progress
        last = "\n    ".join(list(progress.tail)[-12:])
        return BuildFailed(
            f"stage {self.stage} failed at step {progress.step}/{progress.steps} ({progress.instruction[:100]}): "
            f"{detail.strip()}\n  last output:\n    {last}\n  full log: {self.log_path}"
        )
