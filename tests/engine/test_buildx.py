"""BuildKit builds: a ccache cache mount, so that changing one patch recompiles only what it touches."""

from __future__ import annotations

import difflib
import re
import tarfile

import pytest

from tests.engine.conftest import BUILDKIT_TOOLS, run_build_py
from torchstack.sources import cache_dir

pytestmark = pytest.mark.engine

TOUCHED = "numpy/_core/src/multiarray/alloc.c"


def ccache_counts(stderr: str) -> tuple[int, int]:
    """Hits and misses that the last `ccache --show-stats` of the build's log reported."""
    log = open(stderr.split("full build output goes to")[1].split()[0]).read()
    stats = log.rsplit("Cacheable calls:", 1)[1]
    hits = int(re.search(r"Hits:\s+(\d+)", stats)[1])
    misses = int(re.search(r"Misses:\s+(\d+)", stats)[1])
    return hits, misses


def test_a_patch_recompiles_only_what_it_touches(client, repo_copy, unique_tag, tmp_path):
    args = [*BUILDKIT_TOOLS[:-1], unique_tag]  # the reuse test's request, under a tag of this test's own
    # --ccache-dir: the cache mount is also written out to a host folder, as CI keeps it between runs.
    saved = tmp_path / "ccache"
    # --no-test: this very image is checked where the BuildKit reuse test pushes it (test_reuse).
    first = run_build_py(*args, "--no-test", "--ccache-dir", str(saved), cwd=repo_copy)
    assert first.returncode == 0, first.stderr[-3000:]
    cached_objects = [p for p in saved.rglob("*") if p.is_file() and p.name.endswith("R")]  # ccache's result files
    assert len(cached_objects) > 100, f"{len(cached_objects)} compiler results saved to {saved}"

    with tarfile.open(cache_dir() / "numpy-2.3.5.tar.gz") as sdist:
        original = sdist.extractfile(f"numpy-2.3.5/{TOUCHED}").read().decode().splitlines(keepends=True)
    # The comment is unique to this run: BuildKit keeps the patched step's layer from any
    # earlier run with the same patch, and then the step (and ccache) would not run at all.
    # ccache still hits on this file, because the preprocessor drops comments.
    changed = original + [f"/* torchstack test {unique_tag}: a one-line patch */\n"]
    patch = "Why: proves the compiler cache. Upstream: none.\n" + "".join(
        difflib.unified_diff(original, changed, f"a/{TOUCHED}", f"b/{TOUCHED}")
    )
    patches = repo_copy / "patches" / "numpy"
    patches.mkdir(parents=True, exist_ok=True)
    (patches / "0001-touch-alloc.patch").write_text(patch)
    (patches / "series").write_text("0001-touch-alloc.patch\n")

    second = run_build_py(*args, "--no-test", cwd=repo_copy)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "applied 0001-touch-alloc.patch to numpy 2.3.5" in open(
        second.stderr.split("full build output goes to")[1].split()[0]
    ).read()
    hits, misses = ccache_counts(second.stderr)
    print(f"after a one-file patch: {hits} compiler cache hits, {misses} misses")
    assert hits > 100 and misses <= 3, (hits, misses)
    assert f"torchstack-tools:{unique_tag}" in {t for image in client.images.list() for t in image.tags}


def test_a_buildx_builder_that_does_not_exist_is_one_line_before_any_build(client):
    result = run_build_py("--backend", "onednn", "--buildx-builder", "no-such-builder-here", "--no-test")
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    assert result.stderr.strip().splitlines() == [
        "torchstack: error: --buildx-builder no-such-builder-here: no such builder (see `docker buildx ls`)"
    ], result.stderr
