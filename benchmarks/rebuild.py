#!/usr/bin/env python3
"""Benchmark: a cold build of the x86_64 chain against a no-op rebuild, and image sizes, in one run.

    python3 benchmarks/rebuild.py [--wheelhouse DIR] [--skip-cold]

Prints seconds for a build that re-runs every step (--no-cache), for a rebuild with nothing
changed (served from the engine's cache), their ratio, and the size of the final image
against the tools and dev images it was made from. Needs a running Docker engine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def build(*extra: str) -> tuple[float, dict]:
    with tempfile.TemporaryDirectory() as tmp:
        summary = Path(tmp) / "summary.json"
        started = time.monotonic()
        subprocess.run([sys.executable, str(ROOT / "build.py"), *extra, "--quiet", "--json", str(summary)], check=True)
        return time.monotonic() - started, json.loads(summary.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheelhouse", default=os.environ.get("PIP_FIND_LINKS", "/opt/wheels"))
    parser.add_argument("--skip-cold", action="store_true", help="only the warm build and the no-op rebuild")
    args = parser.parse_args()
    chain = ["--torch-from", "wheel", "--torch-wheel", args.wheelhouse, "--openblas-from", "distro", "--no-test"]

    rows = []
    if not args.skip_cold:
        rows.append(("cold build (--no-cache)", *build(*chain, "--no-cache")))
    rows.append(("build (warm engine cache)", *build(*chain)))
    rows.append(("no-op rebuild", *build(*chain)))

    print(f"{'run':<28}{'seconds':>10}  stages cached")
    for name, seconds, summary in rows:
        cached = sum(s["status"] == "cached" for s in summary["stages"])
        print(f"{name:<28}{seconds:>10.1f}  {cached}/{len(summary['stages'])}")
    if not args.skip_cold:
        print(f"cold build / no-op rebuild: {rows[0][1] / rows[-1][1]:.0f}x")

    sizes = {s["stage"]: s["size_bytes"] for s in rows[-1][2]["stages"]}
    for stage in ("base", "tools", "dev", "final"):
        print(f"{stage + ' image':<28}{sizes[stage] / 2**20:>10,.0f} MiB")
    print(f"final / dev image size: {sizes['final'] / sizes['dev']:.2f}")


if __name__ == "__main__":
    main()
