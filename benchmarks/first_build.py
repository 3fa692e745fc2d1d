#!/usr/bin/env python3
"""The README's first build on an empty engine, part by part: what a newcomer waits for.

    sudo .venv/bin/python benchmarks/first_build.py [--json FILE]

Starts a Docker engine of its own (tests/engine/hosts.py's second engine: its own data root,
socket and bridge; the host's engine and its images are not touched) and an empty toolkit cache,
so that nothing is cached, as on a new host. Runs the README's build there once (./build.py
--torch-from wheel --openblas-from distro), and records when each part ended, from the time each line of its output came:

- bootstrap: the Debian OS image made from the archive;
- each stage's build (base, libs, tools with numpy's compile, dev, final), as --json reports it;
- the checks.

The host's set-up (scripts/setup-host.sh) is not in it: run the README's whole first command on a
new host for that. Needs root (it starts dockerd); removes its engine, data and cache afterwards.
The README's first command's goal is 4 minutes on a new host, set-up included (`total_goal_s`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.run import README_ARGS, recorded  # noqa: E402
from tests.engine.hosts import second_engine  # noqa: E402

GOAL_S = 240


def timed_lines(command: list[str], env: dict) -> tuple[int, list[tuple[float, str]]]:
    """Run `command`; its exit status and each line of its output with the seconds since it began."""
    started = time.monotonic()
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = [(round(time.monotonic() - started, 1), line.rstrip("\n")) for line in process.stdout]
    return process.wait(), lines


def first(lines: list[tuple[float, str]], text: str) -> float | None:
    return next((at for at, line in lines if text in line), None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--log", type=Path, help="copy the build's full log here")
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("first_build: run as root (it starts an engine of its own)")
    tempfile.tempdir = "/var/tmp"  # the engine's storage and the cache: on disk, not a tmpfs
    with second_engine() as host, tempfile.TemporaryDirectory(prefix="tsfb-") as tmp:
        summary_file, cache = Path(tmp) / "summary.json", Path(tmp) / "cache"
        env = {**os.environ, "DOCKER_HOST": host, "TORCHSTACK_CACHE": str(cache)}
        command = [sys.executable, "build.py", *README_ARGS, "--json", str(summary_file)]
        status, lines = timed_lines(command, env)
        if args.log:
            for log in (cache / "logs").glob("*.log"):
                shutil.copy2(log, args.log)
        if status != 0:
            raise SystemExit("first_build: the build failed:\n" + "\n".join(line for _, line in lines[-30:]))
        summary = json.loads(summary_file.read_text())
    total = lines[-1][0]
    began = first(lines, "bootstrapping it from the Debian archive")
    made = next(
        (at for at, line in lines if at >= (began or 0) and line.startswith("torchstack: base image ") and "bootstrapping" not in line),
        None,
    )
    bootstrap = made - began if began is not None and made is not None else None
    figures = {
        **recorded("first_build.py"),
        "image": summary["final_image"],
        "bootstrap_s": round(bootstrap, 1) if bootstrap is not None else None,
        "stages_s": {s["stage"]: round(s["seconds"], 1) for s in summary["stages"]},
        "checks_s": summary["checks_seconds"],
        "checks": summary["checks"],
        "build_s": total,
        "total_goal_s": GOAL_S,
    }
    figures["left_for_setup_s"] = round(GOAL_S - total, 1)
    print(json.dumps(figures, indent=2))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
