"""Which image-check folders run for a stage: its own and its ancestors', from the stage table."""

from torchstack import checks
from torchstack.checks import CHECKS, stage_lineage


def test_checks_of_a_parent_run_against_its_children(catalog):
    assert stage_lineage(catalog, "base") == ["base"]
    assert stage_lineage(catalog, "tools") == ["base", "libs", "tools"]
    assert stage_lineage(catalog, "final") == ["base", "final"]


def test_every_stage_with_checks_has_a_folder(catalog):
    folders = {p.name for p in CHECKS.iterdir() if p.is_dir() and not p.name.startswith("__")}
    assert folders <= {s.name for s in catalog.stages}
    assert {"base", "final"} <= folders


def test_a_recorded_pass_stands_only_for_the_same_image_id_and_check_inputs(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHSTACK_CACHE", str(tmp_path / "cache"))
    checks_tree = tmp_path / "image-checks"
    checks_tree.mkdir()
    (checks_tree / "test_x.py").write_text("def test_x(): pass\n")
    monkeypatch.setattr(checks, "ROOT", tmp_path)
    monkeypatch.setattr(checks, "CHECK_INPUTS", (checks_tree,))
    before = checks.checks_fingerprint("final", "onednn")
    assert checks.earlier_pass("sha256:aa", before) is None
    checks.remember_pass("sha256:aa", before, "26 passed, 3 skipped")
    assert checks.earlier_pass("sha256:aa", before) == "26 passed, 3 skipped"
    assert checks.earlier_pass("sha256:bb", before) is None  # another image
    assert checks.earlier_pass("sha256:aa", checks.checks_fingerprint("final", "openblas")) is None  # another backend
    (checks_tree / "test_x.py").write_text("def test_x(): assert False\n")
    assert checks.earlier_pass("sha256:aa", checks.checks_fingerprint("final", "onednn")) is None  # a check changed


def test_a_torn_record_counts_as_no_pass(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHSTACK_CACHE", str(tmp_path))
    (tmp_path / "checks").mkdir()
    (tmp_path / "checks" / "aa.json").write_text('{"abc": "26 pass')
    assert checks.earlier_pass("sha256:aa", "abc") is None
    checks.remember_pass("sha256:aa", "abc", "1 passed")
    assert checks.earlier_pass("sha256:aa", "abc") == "1 passed"
    assert [p.name for p in (tmp_path / "checks").iterdir()] == ["aa.json"]
