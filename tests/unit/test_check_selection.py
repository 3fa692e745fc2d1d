"""Which image-check folders run for a stage: its own and its ancestors', from the stage table."""

import pytest

from tests.memory_engine import memory_engine
from torchstack.base.errors import UsageProblem
from torchstack.engines.connection import engine_of
from torchstack.engines.engine import Image
from torchstack.verify import checks
from torchstack.verify.checks import CHECKS, stage_lineage


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


DOCKER = engine_of("docker", "unix:///var/run/docker.sock", "the default")


def selection_tree(tmp_path, monkeypatch):
    """A checks tree of two final-stage checks (one fails) and an image the engine would report:
    run_checks runs real pytest on it."""
    tree = tmp_path / "image"
    (tree / "final").mkdir(parents=True)
    (tree / "conftest.py").write_text(
        "def pytest_addoption(parser):\n    for name in ('--image', '--stage', '--backend', '--engine'):\n        parser.addoption(name)\n"
    )
    (tree / "final" / "test_final.py").write_text("def test_passes(): pass\n\ndef test_fails(): assert False\n")
    monkeypatch.setattr(checks, "ROOT", tmp_path)
    monkeypatch.setattr(checks, "CHECKS", tree)
    monkeypatch.setattr(checks, "CHECK_INPUTS", (tree,))
    monkeypatch.setenv("TORCHSTACK_CACHE", str(tmp_path / "cache"))
    # An engine with the image and no container of this run left: run_checks asks for them as it ends.
    engine = memory_engine()
    engine.held.images["sha256:aa"] = Image("sha256:aa", labels={"io.torchstack.stage": "final"})
    engine.held.names["any"] = "sha256:aa"
    return engine


def test_a_selection_runs_only_the_named_checks_and_records_no_pass(catalog, tmp_path, monkeypatch):
    client = selection_tree(tmp_path, monkeypatch)
    selected = checks.run_checks(client, catalog, "any", select="passes")
    assert selected.passed and selected.summary == "1 passed, 1 deselected", selected
    assert not (tmp_path / "cache" / "checks").exists(), "a selection vouches for the selected checks only"
    assert not checks.run_checks(client, catalog, "any", select="fails").passed
    # Nor does a selection take an earlier pass of the whole set for its own.
    checks.remember_pass("sha256:aa", checks.checks_fingerprint("final", None), "2 passed")
    assert not checks.run_checks(client, catalog, "any", reuse=True, select="fails").passed


def test_a_selection_of_nothing_or_no_expression_is_a_usage_error(catalog, tmp_path, monkeypatch):
    client = selection_tree(tmp_path, monkeypatch)
    with pytest.raises(UsageProblem, match="-k 'no_such_check' selects none of the checks of a final image"):
        checks.run_checks(client, catalog, "any", select="no_such_check")
    with pytest.raises(UsageProblem, match=r"^-k 'passes and \(': "):
        checks.run_checks(client, catalog, "any", select="passes and (")
