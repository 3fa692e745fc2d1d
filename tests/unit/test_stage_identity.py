"""A stage image is named by what it holds: its identity changes with what goes into it and
with nothing else, so that two builds whose earlier stages are the same share them."""

from __future__ import annotations

import json

from torchstack.request.metadata import stage_labels
from torchstack.request.plan import RELEASE_STAGE

LOWER = ("base", "libs", "tools", "dev")
# A torch both backends take (no zentorch pairs with 2.15.0: zendnn's default is older than onednn's).
X86_WHEEL = {"methods": {"torch": "wheel", "openblas": "distro"}, "torch_wheel": "index", "torch_version": "2.14.0"}


def images(plan) -> dict[str, str]:
    return {s.name: s.image for s in plan.stages}


def test_zendnn_shares_every_earlier_stage_of_onednn(plan_for):
    onednn, zendnn = plan_for(backend="onednn", **X86_WHEEL), plan_for(backend="zendnn", **X86_WHEEL)
    assert [images(onednn)[s] for s in LOWER] == [images(zendnn)[s] for s in LOWER]
    assert onednn.final_image != zendnn.final_image


def test_release_tag_and_plugins_stay_out_of_earlier_stages(plan_for):
    first = plan_for(backend="onednn", **X86_WHEEL)
    later = plan_for(backend="onednn", release="r27.01", tag="mine", **X86_WHEEL)
    assert [images(first)[s] for s in LOWER] == [images(later)[s] for s in LOWER]
    for stage in LOWER:
        labels = stage_labels(first, first.stage(stage))
        assert "io.torchstack.backend" not in labels and "io.torchstack.release" not in labels
        info = json.loads(labels["io.torchstack.build-info"])
        assert not {"backend", "release", "release_tag", "plugins", "toolkit"} & set(info), info


def test_a_stage_and_every_stage_built_from_it_change_with_what_goes_in(plan_for):
    """Another target changes the stages that compile for it (libs with OpenBLAS, and every one
    after it); the base stage, which compiles nothing, stays the same."""
    generic = plan_for(backend="onednn", build_target="generic")
    v3 = plan_for(backend="onednn", build_target="x86-64-v3")
    assert images(generic)["base"] == images(v3)["base"]
    for stage in ("libs", "tools", "dev"):
        assert images(generic)[stage] != images(v3)[stage], stage
    assert v3.stage("libs").image.startswith("torchstack-libs:trixie-x86_64-x86-64-v3-openblas-0.3.33-")


def test_another_component_version_renames_its_stage_and_those_after_it(plan_for):
    pinned = plan_for(backend="openblas", arch="aarch64")
    older = plan_for(backend="openblas", arch="aarch64", versions={"openblas": "0.3.28"})
    assert images(pinned)["base"] == images(older)["base"]
    assert all(images(pinned)[s] != images(older)[s] for s in ("libs", "tools", "dev"))


def test_a_child_is_built_from_its_parent_by_the_parents_content_name(plan_for):
    plan = plan_for()
    for stage in plan.stages:
        if stage.name not in ("base", RELEASE_STAGE):
            parent = {"libs": "base", "tools": "libs", "dev": "tools"}[stage.name]
            assert stage.parent_image == plan.stage(parent).image
    assert plan.stage(RELEASE_STAGE).image == f"torchstack-final:{plan.release_tag}"


def test_a_build_that_stops_early_also_names_its_top_stage_by_the_release(plan_for):
    plan = plan_for(build_type="libs", tag="mine")
    assert plan.top_image == "torchstack-libs:mine" and plan.stages[-1].image != plan.top_image


def test_each_builder_names_its_own_images(plan_for):
    """BuildKit and the legacy builder make different images of one Dockerfile: sharing a name,
    each build would replace the other's image and cost the next one of the other kind its cache."""
    legacy, buildkit = plan_for(builder="docker", **X86_WHEEL), plan_for(builder="buildx", **X86_WHEEL)
    assert all(images(legacy)[s] != images(buildkit)[s] for s in LOWER)


def test_a_patch_renames_the_stage_that_applies_it_and_those_after_it(plan_for, monkeypatch, tmp_path):
    """Two checkouts that differ in a patch to numpy build different tools images: one name for
    both would let one replace the other, and a registry's image of that name hold the wrong one."""
    import torchstack.request.metadata

    unpatched = plan_for(backend="onednn")
    (tmp_path / "numpy").mkdir()
    (tmp_path / "numpy" / "series").write_text("0001-fix.patch\n")
    (tmp_path / "numpy" / "0001-fix.patch").write_text("--- a/x\n+++ b/x\n")
    monkeypatch.setattr(torchstack.request.metadata, "PATCHES", tmp_path)
    patched = plan_for(backend="onednn")
    assert images(patched)["libs"] == images(unpatched)["libs"]
    assert images(patched)["tools"] != images(unpatched)["tools"] and images(patched)["dev"] != images(unpatched)["dev"]
    (tmp_path / "numpy" / "0001-fix.patch").write_text("--- a/x\n+++ b/x\n@@ another @@\n")
    assert images(plan_for(backend="onednn"))["tools"] != images(patched)["tools"]
