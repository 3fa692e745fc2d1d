#!/usr/bin/env python3
"""One check run of the README image: the `test` command's own figure, against a goal of 40 s.

    .venv/bin/python benchmarks/checks.py --image IMAGE [--runs 3] [--json FILE]

Runs `./build.py test IMAGE` RUNS times, one after another (the command never stands on an earlier
pass), and records the seconds each run reports ("N passed ... in S s") and the CPU-seconds the host
spent meanwhile, all cores together: the slow checks' runs go side by side, so on a small host the
CPU is what bounds a check run. Goal: the median run within 40 s.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.run import emit, recorded, timed  # noqa: E402

GOAL_S = 40


def host_cpu_seconds() -> float:
    """CPU-seconds the host has spent since it started, all cores, from /proc/stat (user, nice,
    system, irq, softirq)."""
    with open("/proc/stat", encoding="utf-8") as stat:
        fields = [int(value) for value in stat.readline().split()[1:8]]
    return (fields[0] + fields[1] + fields[2] + fields[5] + fields[6]) / os.sysconf("SC_CLK_TCK")


def one_run(image: str) -> dict:
    """One `./build.py test IMAGE`: the seconds it reports, its whole time and the host's CPU-seconds."""
    before = host_cpu_seconds()
    seconds, result = timed([str(ROOT / "build.py"), "test", image], cwd=ROOT)
    spent = host_cpu_seconds() - before
    reported = re.search(rf"^{re.escape(image)}: (.*) in (\d+) s$", result.stdout, re.M)
    if reported is None:
        raise SystemExit(f"checks: no summary line for {image} in the test command's output:\n{result.stdout[-1500:]}")
    return {"reported_s": int(reported[2]), "summary": reported[1], "command_s": round(seconds, 1), "host_cpu_s": round(spent, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", required=True, help="the image to check (the README's release image)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    runs = [one_run(args.image) for _ in range(args.runs)]
    median = statistics.median(run["reported_s"] for run in runs)
    result = {
        **recorded("checks.py"),
        "image": args.image,
        "runs": runs,
        "check_run_median_s": median,
        "goal": f"<= {GOAL_S} s",
        "goal_met": median <= GOAL_S,
    }
    emit(result, args.json)


if __name__ == "__main__":
    main()
