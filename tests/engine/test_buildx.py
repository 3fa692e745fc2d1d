"""BuildKit builds: a ccache cache mount, so that changing one patch recompiles only what it touches."""

from __future__ import annotations

import pytest

from tests.engine.images import BUILDKIT_TAG, ccache_counts, run_build_py

# `buildkit`: builds with BuildKit on the session's engine (images.py: buildkit_first, buildkit_patched).
pytestmark = [pytest.mark.engine, pytest.mark.buildkit]


def test_a_patch_recompiles_only_what_it_touches(client, buildkit_first, buildkit_patched):
    """The first build (numpy compiled in the cache mount) wrote the mount out to a host folder, as
    CI keeps it between runs (--ccache-dir); the second, from a checkout whose patches/numpy holds
    a one-line patch to one numpy file, compiled that file and took every other from the cache."""
    saved = buildkit_first["ccache_dir"]
    cached_objects = [p for p in saved.rglob("*") if p.is_file() and p.name.endswith("R")]  # ccache's result files
    assert len(cached_objects) > 100, f"{len(cached_objects)} compiler results saved to {saved}"

    log = open(buildkit_patched["log"]).read()
    assert "applied 0001-touch-alloc.patch to numpy 2.3.5" in log
    hits, misses = ccache_counts(log)
    print(f"after a one-file patch: {hits} compiler cache hits, {misses} misses")
    assert hits > 100 and misses <= 3, (hits, misses)
    assert f"torchstack-tools:{BUILDKIT_TAG}" in {t for image in client.images.list() for t in image.tags}


def test_a_buildx_builder_that_does_not_exist_is_one_line_before_any_build(client):
    result = run_build_py("--backend", "onednn", "--buildx-builder", "no-such-builder-here", "--no-test")
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    assert result.stderr.strip().splitlines() == [
        "torchstack: error: --buildx-builder no-such-builder-here: no such builder (see `docker buildx ls`)"
    ], result.stderr
