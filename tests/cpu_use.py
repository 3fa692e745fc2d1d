"""Where a test session's CPU time went, by program: the host is CPU-bound through a cold run, so
the run's length is the CPU its work needs, and this says which work that is.

A thread reads each process's CPU time (/proc/PID/stat) every few seconds and adds what it used
since the last look to its program: the executable it runs (/proc/PID/exe), so that a program run
under qemu's emulation counts as emulation; for Python, the script or module it runs (build.py,
pytest). A process that starts and ends between two looks (a short compile) is not seen: the report
says how much of the machine's busy time was seen at all.
"""

from __future__ import annotations

import collections
import os
import threading
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")


def process_ticks(stat: str) -> tuple[int, int]:
    """(start time, user + system CPU) of a /proc/PID/stat line, in clock ticks. The name in
    parentheses may hold spaces and parentheses itself: the fields are read after its last ')'."""
    fields = stat.rsplit(")", 1)[1].split()
    return int(fields[19]), int(fields[11]) + int(fields[12])


def program_of(exe: str, argv: list[str]) -> str:
    """The program a process runs, as the report names it: Python by its script or module, qemu by
    what it emulates, anything else by its executable."""
    name = os.path.basename(exe.removesuffix(" (deleted)"))
    args = [a for a in argv[1:] if a]
    if name.startswith("python"):
        if args[:1] == ["-m"] and len(args) > 1:
            return f"python -m {args[1]}"
        if args[:1] == ["-c"]:
            return "python -c"
        script = next((a for a in args if not a.startswith("-")), "")
        return f"python {os.path.basename(script)}" if script else "python"
    if name.startswith("qemu-") and args:
        return f"{name} ({os.path.basename(args[0])})"
    return name


def machine_ticks() -> tuple[int, int]:
    """(busy, all) CPU ticks of the whole machine since boot (/proc/stat), iowait counted as idle."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    return sum(values) - idle, sum(values)


class CpuUse:
    """The sampler: start(), then report() at any time."""

    def __init__(self, interval: float = 3.0):
        self.interval = interval
        self.by_program: collections.Counter[str] = collections.Counter()
        self._last: dict[int, tuple[int, int]] = {}  # pid -> (start time, CPU ticks when last seen)
        self._stopped = threading.Event()
        self._begun: tuple[int, int] | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._begun = machine_ticks()
        self._look(count=False)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        while not self._stopped.wait(self.interval):
            self._look(count=True)

    def _look(self, count: bool) -> None:
        seen = {}
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            try:
                started, ticks = process_ticks(Path(f"/proc/{pid}/stat").read_text())
            except (OSError, IndexError, ValueError):  # gone meanwhile
                continue
            before, seen[pid] = self._last.get(pid), (started, ticks)
            used = ticks - before[1] if before and before[0] == started else ticks
            if count and used > 0:
                try:
                    argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
                    name = program_of(os.readlink(f"/proc/{pid}/exe"), argv)
                except OSError:  # gone meanwhile, or a kernel thread (no executable)
                    name = "(kernel or gone)"
                self.by_program[name] += used
        self._last = seen

    def report(self, limit: int = 15) -> list[str]:
        """The programs that used the most CPU, in CPU-minutes, and how much of the busy time was seen."""
        if self._begun is None:
            return []
        busy, total = (now - then for now, then in zip(machine_ticks(), self._begun, strict=True))
        seen = sum(self.by_program.values())
        lines = [
            f"{'machine busy':<40} {busy / TICKS / 60:7.1f} CPU-min of {total / TICKS / 60:.1f} ({100 * busy / max(total, 1):.0f}%)",
            f"{'seen by program':<40} {seen / TICKS / 60:7.1f} CPU-min",
        ]
        lines += [f"{name[:40]:<40} {ticks / TICKS / 60:7.1f}" for name, ticks in self.by_program.most_common(limit)]
        return lines
