"""The benchmark produces its figures (its short mode, on the chain the session built); no timing is asserted."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.engine.images import x86_wheelhouse
from torchstack.catalog.model import ROOT

pytestmark = pytest.mark.engine


def test_the_benchmark_prints_and_writes_every_figure(x86_build, tmp_path):
    figures_file = tmp_path / "figures.json"
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "run.py"), "--short", "--wheelhouse", x86_wheelhouse(), "--json", str(figures_file)],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    figures = json.loads(figures_file.read_text())
    print(result.stdout)
    assert figures["images"]["ours"] == x86_build["final_image"]
    inference = figures["inference"]
    cores = os.cpu_count()
    for row in inference["workloads"].values():
        assert row["ours_s"] > 0 and row["plain_s"] > 0 and row["ratio"] > 0 and row["flipped_ratio"] > 0
        assert cores < 2 or row["ours_limited_s"] > 0 and row["plain_limited_s"] > 0 and row["limited_ratio"] > 0
    # The deployment case, a CPU limit of half the host's cores (--cpus=1 of 2 here): our image's
    # threads follow the limit, the plain image's (torch alone) stay what they are
    # without it (the host's cores; physical ones on an SMT host).
    # (A one-core host has no limit below its cores: the case is left out.)
    assert inference["cpu_limit"] == (str(cores // 2) if cores >= 2 else ""), inference["cpu_limit"]
    if cores >= 2:
        assert inference["threads"]["ours_limited"] == cores // 2, inference["threads"]
        assert inference["threads"]["plain_limited"] == inference["threads"]["plain"], inference["threads"]
    assert inference["compile"]["speedup"] > 0
    assert inference["compile"]["plain_image"].startswith("fails:"), "the plain image has no compiler"
    noop = figures["overhead"]["noop"]
    assert noop["toolkit_s"] > 0 and noop["docker_build_s"] > 0
    assert noop["same_images"], "the engine's build of the rendered contexts must reach the toolkit's very images"
    assert figures["overhead"]["matrix"]["jobs"] > 0
    size = figures["size"]
    assert size["venv"] > 0 and size["payload"] > size["os_image"] and size["final"] > 0 and size["plain"] > 0
    assert set(figures["goals"]) >= {"eager_median_ratio", "limited_median_ratio", "compile_speedup", "noop_overhead", "final_over_payload"}
    for line in ("1. inference", "2. toolkit overhead", "3. size"):
        assert line in result.stdout
