"""--lazy soci: the README's release as the session pushed it (`pushed`: with --lazy soci and --sign)
starts on an empty containerd node with SOCI's snapshotter before its pull ends, with the baked
model's answer; verify says it pulls lazily, and refuses a SOCI index nobody signed."""

from __future__ import annotations

import pytest

from tests.engine.conftest import copy_into
from tests.engine.images import run_build_py
from tests.engine.lazy_node import lazy_node
from torchstack.publishing import lazy

pytestmark = pytest.mark.engine

EXAMPLE = "/opt/torchstack/examples/warm.py"  # the baked model's first answer (benchmarks/warm.py)


def test_the_pushed_release_starts_lazily_on_an_empty_node_and_gives_the_baked_models_answer(pushed, registry, tmp_path):
    summary, output = pushed
    index = summary["lazy"]
    release = summary["pushed"][-1]
    assert index["format"] == "soci" and index["image"] == f"{release['reference'].rpartition(':')[0]}@{release['digest']}"
    assert f"torchstack: pushed the SOCI index of {index['image']} ({index['index']})" in output
    with lazy_node(tmp_path, registry) as node:
        node.rpull(index["image"], index["index"])
        said = node.run(index["image"], ["python3", EXAMPLE], lazily=True)
        mounted = node.lazy_layers()
    assert "baked model" in said, said
    # The layers were mounted, not unpacked: every layer has a zTOC (lazy.MIN_LAYER_SIZE).
    assert mounted >= 3, (mounted, (tmp_path / "soci.log").read_text()[-3000:])


def test_verify_says_the_release_pulls_lazily_and_refuses_an_index_nobody_signed(pushed, registry, cosign_keys):
    summary, _ = pushed
    index, release = summary["lazy"], summary["pushed"][-1]
    public = str(cosign_keys["ours"][1])
    verified = run_build_py("verify", release["reference"], "--key", public)
    assert verified.returncode == 0, verified.stderr[-2000:]
    assert f"torchstack: {release['digest']} pulls lazily: SOCI index {index['index']}, signed" in verified.stderr

    # The signed release with its signature and attestations, in a repository of its own, then
    # given a SOCI index nobody signed (as anyone with push rights can): verify refuses it.
    hexed = release["digest"].removeprefix("sha256:")
    for name in (release["digest"], f"sha256-{hexed}.sig", f"sha256-{hexed}.att"):
        copy_into(registry, "ml/torchstack", "ml/lazy-unsigned", name, name if name.startswith("sha256-") else "copied")
    copied = f"{registry}/ml/lazy-unsigned@{release['digest']}"
    assert run_build_py("verify", copied, "--key", public).returncode == 0
    unsigned = lazy.publish(copied, lambda line: None)
    refused = run_build_py("verify", copied, "--key", public)
    assert refused.returncode == 1 and refused.stdout == "", refused.stderr[-2000:]
    assert f"{registry}/ml/lazy-unsigned@{unsigned}: no signature verifies with this key (it is a SOCI index of" in refused.stderr
