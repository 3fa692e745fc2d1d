"""The final stage's OS packages built ahead, beside the stages before it: when, and what it builds."""

import pytest

from torchstack import building
from torchstack.building import AHEAD_TARGET, Ahead
from torchstack.connection import Engine
from torchstack.render import render_dockerfile
from torchstack.run_options import RunOptions

DOCKER = Engine("docker", "unix:///var/run/docker.sock", "test")
PODMAN = Engine("podman", "unix:///run/podman/podman.sock", "test")
README = {"methods": {"torch": "wheel", "openblas": "distro"}}


@pytest.fixture(autouse=True)
def docker_cli(monkeypatch):
    monkeypatch.setattr(building.shutil, "which", lambda name: f"/usr/bin/{name}")


def test_the_readme_build_on_docker_builds_the_final_stages_packages_ahead(plan_for):
    plan = plan_for(**README)
    assert Ahead.wanted(DOCKER, plan, RunOptions()) is plan.stages[-1]


@pytest.mark.parametrize(
    ("engine", "fields", "run", "why"),
    [
        (PODMAN, {}, RunOptions(), "Podman's builder"),
        (DOCKER, {"builder": "buildx"}, RunOptions(), "BuildKit builds the final's parts side by side itself"),
        (DOCKER, {}, RunOptions(no_cache=True), "--no-cache takes nothing from the cache"),
        (DOCKER, {}, RunOptions(cache_from="localhost:5000/ml"), "given --cache-from, the legacy builder reuses only its images' steps"),
        (DOCKER, {"build_type": "tools"}, RunOptions(), "no final stage"),
    ],
)
def test_nothing_is_built_ahead_where_it_would_not_be_taken(plan_for, engine, fields, run, why):
    assert Ahead.wanted(engine, plan_for(**README, **fields), run) is None, why


def test_without_the_engines_cli_nothing_is_built_ahead(plan_for, monkeypatch):
    monkeypatch.setattr(building.shutil, "which", lambda name: None)
    assert Ahead.wanted(DOCKER, plan_for(**README), RunOptions()) is None


@pytest.mark.parametrize("fields", [README, {"backend": "onednn-acl", "build_target": "neoverse-v1"}, {"backend": "zdnn"}])
def test_the_part_built_ahead_needs_only_the_base_stage_and_holds_the_final_images_packages(plan_for, fields):
    plan = plan_for(**fields)
    final = plan.stages[-1]
    dockerfile = render_dockerfile(plan, final)
    starts = [i for i, line in enumerate(dockerfile.splitlines()) if line.startswith("FROM ")]
    first = "\n".join(dockerfile.splitlines()[starts[0] : starts[1]])
    assert first.startswith(f"FROM {final.parent_image} AS {AHEAD_TARGET}\n"), first
    assert "COPY" not in first and "--from" not in first, first
    for package in plan.payload.packages:
        assert f" {package}" in first, (package, first)
    assert f"\nFROM {AHEAD_TARGET}\n" in dockerfile


class _View:
    def __init__(self):
        self.notes, self.records = [], []

    def note(self, text):
        self.notes.append(text)

    def record(self, text):
        self.records.append(text)


@pytest.mark.parametrize(("command", "why"), [(["false"], "exit status 1"), (["/nonexistent/docker"], "No such file or directory")])
def test_a_part_that_fails_ahead_is_one_line_and_left_to_the_final_stage(plan_for, tmp_path, monkeypatch, command, why):
    monkeypatch.setenv("TORCHSTACK_CACHE", str(tmp_path / "cache"))
    plan = plan_for(**README)
    ahead = Ahead(DOCKER, plan, plan.stages[-1], tmp_path / "ahead", building.BuildSecrets())
    ahead.command = command
    view = _View()
    ahead.start(view)
    ahead.wait(view)
    ahead.stop()
    assert view.notes[-1] == f"torchstack: the final stage's OS packages were not built ahead ({why}); the final stage builds them"
    assert (tmp_path / "ahead" / "Dockerfile").read_text() == render_dockerfile(plan, plan.stages[-1])
