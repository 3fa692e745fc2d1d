"""What a person sees while an hour-long build runs: a live view, a log file, a summary."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rich.console import Console
from rich.live import Live
from rich.table import Table

from torchstack.base.errors import ToolkitError
from torchstack.engines.buildjob import BuildProgress


@dataclass
class StageReport:
    stage: str
    image: str
    tags: list[str]
    size_bytes: int | None = None
    seconds: float | None = None
    cached: bool | None = None
    status: str = "waiting"  # waiting | building | built | cached | pulled | failed | interrupted
    ran: list[str] = field(default_factory=list)  # steps the engine ran rather than took from its cache
    builder: str | None = None  # what built it: buildkit | legacy (Docker's) | buildah (Podman's); None when pulled
    image_id: str | None = None  # the image's ID: one request from the same inputs gives the same (reproducible.py)


def _elapsed(seconds: float | None) -> str:
    if seconds is None:
        return ""
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{seconds:.1f}s"


def _size(size: int | None) -> str:
    return "" if size is None else f"{size / 2**20:,.0f} MiB"


class BuildView:
    """A live table on a terminal, one line per step elsewhere (CI logs), nothing with --quiet."""

    def __init__(self, reports: list[StageReport], log_path: Path, quiet: bool) -> None:
        self.reports = reports
        self.log_path = log_path
        self.quiet = quiet
        # On a terminal, its width; in CI logs, wide enough to keep tables and long tags whole.
        self.console = Console(stderr=True, soft_wrap=True, width=None if sys.stderr.isatty() else 200)
        self.progress: dict[str, BuildProgress] = {}
        self._live: Live | None = None
        self._log = log_path.open("a", encoding="utf-8")
        self._last_step: tuple[str, int] | None = None

    def __enter__(self) -> BuildView:
        if not self.quiet:
            self.console.print(f"torchstack: full build output goes to {self.log_path}")
            if self.console.is_terminal:
                self._live = Live(self._table(), console=self.console, refresh_per_second=4, get_renderable=self._table)
                self._live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._live is not None:
            self._live.__exit__(*exc)
        self._log.close()

    def start(self, report: StageReport) -> BuildProgress:
        report.status = "building"
        progress = BuildProgress()
        self.progress[report.stage] = progress
        self._log.write(f"\n===== stage {report.stage}: {report.image} =====\n")
        return progress

    def line(self, stage: str, text: str) -> None:
        """One line of build output: into the log; on a plain console, each new step."""
        self._log.write(text + "\n")
        self._log.flush()
        progress = self.progress[stage]
        if self._live is None and not self.quiet and (stage, progress.step) != self._last_step and progress.step:
            self._last_step = (stage, progress.step)
            # Not markup: rich took "[final]" for a style and dropped it, and an instruction's own
            # brackets (`RUN [ -f x ]`, a JSON-form CMD) are the Dockerfile's.
            self.console.print(
                f"[{stage}] step {progress.step}/{progress.steps}: {progress.instruction[:110]}", highlight=False, markup=False
            )

    def note(self, text: str) -> None:
        self._log.write(text + "\n")
        if not self.quiet:
            self.console.print(text, highlight=False, markup=False)

    def _table(self) -> Table:
        table = Table(title="torchstack build", title_justify="left")
        for column in ("stage", "status", "step", "current instruction", "elapsed"):
            table.add_column(column)
        for r in self.reports:
            p = self.progress.get(r.stage)
            step = f"{p.step}/{p.steps}" if p and p.steps else ""
            instruction = p.instruction[:70] if p and r.status == "building" else ""
            elapsed = r.seconds if r.seconds is not None else (time.monotonic() - p.started if p else None)
            table.add_row(r.stage, r.status, step, instruction, _elapsed(elapsed))
        return table


def summary_table(reports: list[StageReport], sizes: str = "unpacked") -> Table:
    """The stages as a table; `sizes` says what the engine's sizes count (engine.Engine.sizes:
    Docker's containerd image store reports the compressed content's)."""
    table = Table(title="torchstack summary", title_justify="left")
    for column in ("stage", "image and tags", f"size ({sizes})", "time", "result", "builder"):
        table.add_column(column)
    for r in reports:
        table.add_row(r.stage, "\n".join(r.tags), _size(r.size_bytes), _elapsed(r.seconds), r.status, r.builder or "")
    return table


def write_json(path: Path, summary: dict, reports: list[StageReport]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({**summary, "stages": [asdict(r) for r in reports]}, indent=2) + "\n")
    except OSError as exc:
        raise ToolkitError(f"--json {path}: the build is done, but its summary could not be written: {exc.strerror or exc}") from None
