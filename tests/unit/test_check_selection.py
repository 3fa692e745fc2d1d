"""Which image-check folders run for a stage: its own and its ancestors', from the stage table."""

from torchstack.checks import CHECKS, stage_lineage


def test_checks_of_a_parent_run_against_its_children(catalog):
    assert stage_lineage(catalog, "base") == ["base"]
    assert stage_lineage(catalog, "tools") == ["base", "libs", "tools"]
    assert stage_lineage(catalog, "final") == ["base", "final"]


def test_every_stage_with_checks_has_a_folder(catalog):
    folders = {p.name for p in CHECKS.iterdir() if p.is_dir() and not p.name.startswith("__")}
    assert folders <= {s.name for s in catalog.stages}
    assert {"base", "final"} <= folders
