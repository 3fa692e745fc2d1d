"""The CI matrix holds exactly the builds the planner accepts, each on a native runner of its
architecture, in the forms GitHub and GitLab read."""

import itertools
import json

import pytest
import yaml
from click.testing import CliRunner

from tests.conftest import NOW
from torchstack.base.errors import UsageProblem
from torchstack.cli import make_cli
from torchstack.request.matrix import jobs, render
from torchstack.request.plan import Request
from torchstack.request.planner import make_plan

NO_FILTER = {"arch": None, "backend": None, "target": None, "distribution": None}


def accepted(catalog, **only):
    """Every backend x target x distribution the planner itself accepts (a target under each of
    its names counts once), as the matrix should list them."""
    found = set()
    for backend, target, distribution in itertools.product(catalog.backends, catalog.targets, catalog.distributions):
        if any(
            v is not None and v != {"backend": backend, "arch": target.arch, "distribution": distribution}.get(k, v)
            for k, v in only.items()
        ):
            continue
        if only.get("target") not in (None, target.name, *target.aliases):
            continue
        try:
            make_plan(catalog, Request(backend=backend, arch=target.arch, build_target=target.name, distribution=distribution, now=NOW))
        except UsageProblem:
            continue
        found.add((backend, target.name, distribution))
    return found


@pytest.mark.parametrize(
    "only",
    [
        {},
        {"arch": "aarch64"},
        {"backend": "zdnn"},
        {"target": "neoverse"},
        {"distribution": "bookworm"},
        {"arch": "x86_64", "distribution": "trixie"},
        {"backend": "onednn-acl", "target": "neoverse-v2"},
    ],
)
def test_each_filter_yields_exactly_what_the_planner_accepts(catalog, only):
    found = {(j.backend, j.target, j.distribution) for j in jobs(catalog, {**NO_FILTER, **only}, now=NOW)}
    assert found == accepted(catalog, **only)


def test_a_repeated_filter_yields_the_builds_of_each_value(catalog):
    """`--arch x86_64 --arch aarch64`: what a workflow on GitHub-hosted runners builds."""
    found = {(j.backend, j.target, j.distribution) for j in jobs(catalog, {**NO_FILTER, "arch": ("x86_64", "aarch64")}, now=NOW)}
    assert found == accepted(catalog, arch="x86_64") | accepted(catalog, arch="aarch64")
    assert not any(target.startswith("z1") for _, target, _ in found)


def test_each_job_runs_on_its_architectures_native_runner_and_names_its_tag(catalog):
    for job in jobs(catalog, NO_FILTER, release="r26.11", now=NOW):
        target = catalog.find_target(job.target, job.arch)
        assert job.runs_on == list((target.runners or catalog.architectures[job.arch].runners).github)
        plan = make_plan(
            catalog,
            Request(backend=job.backend, arch=job.arch, build_target=job.target, distribution=job.distribution, release="r26.11", now=NOW),
        )
        assert job.tag == plan.release_tag
        assert f"--backend {job.backend} --build-target {job.target} --distribution {job.distribution}" == job.args


def test_a_target_the_hosted_runners_cannot_start_gets_a_self_hosted_runner_and_hosted_leaves_it_out(catalog):
    """A job's checks start its image, and the CPU guard refuses a CPU without the target's features:
    GitHub's and GitLab.com's x86_64 runners cannot be counted on for AVX-512 and have no AMX."""
    everything = jobs(catalog, {**NO_FILTER, "arch": "x86_64"}, now=NOW)
    own = {j.target for j in everything if j.runner != "hosted"}
    assert own == {"x86-64-v4", "znver4", "znver5", "sapphirerapids", "graniterapids"}, own
    spr = next(j for j in everything if j.target == "sapphirerapids")
    assert spr.runs_on == ["self-hosted", "linux", "x64", "sapphirerapids"] and spr.gitlab_tags == ["sapphirerapids"]
    assert spr.runner.startswith("self-hosted: ") and "no AMX" in spr.runner
    hosted = jobs(catalog, {**NO_FILTER, "arch": "x86_64"}, now=NOW, hosted=True)
    assert hosted == [j for j in everything if j.runner == "hosted"] and hosted
    assert all(j.runs_on == ["ubuntu-24.04"] for j in hosted)
    assert {j.target for j in jobs(catalog, {**NO_FILTER, "arch": "aarch64"}, now=NOW, hosted=True)} >= {"neoverse-v3", "ampere1b"}
    shown = CliRunner().invoke(make_cli(catalog), ["matrix", "--hosted", "--build-target", "znver5"])
    assert shown.exit_code == 2 and "no allowed build matches --build-target znver5 --hosted" in shown.output, shown.output


def test_github_reads_an_include_list_and_gitlab_a_parallel_matrix(catalog):
    found = jobs(catalog, {**NO_FILTER, "backend": "onednn-acl"}, now=NOW)
    github = json.loads(render(found, "github"))
    assert [entry["target"] for entry in github["include"]] == [j.target for j in found]
    assert github["include"][0]["runs_on"] == ["ubuntu-24.04-arm"]
    gitlab = yaml.safe_load(render(found, "gitlab"))
    assert len(gitlab["parallel"]["matrix"]) == len(found) <= 200  # GitLab's limit per job
    assert all(set(e) == {"ARCH", "BACKEND", "TARGET", "DISTRIBUTION", "BUILD_ARGS", "RUNNER", "TAG"} for e in gitlab["parallel"]["matrix"])


def test_wheel_builds_only_for_backends_a_wheel_can_carry(catalog):
    found = jobs(catalog, NO_FILTER, torch_from="wheel", now=NOW)
    assert {j.backend for j in found} == {b.name for b in catalog.backends.values() if b.wheel_markers}
    assert all("--torch-from wheel" in j.args for j in found)


def test_torch_from_repeats_and_each_jobs_name_says_its_way(catalog):
    source, wheel = jobs(catalog, NO_FILTER, now=NOW), jobs(catalog, NO_FILTER, torch_from="wheel", now=NOW)
    both = jobs(catalog, NO_FILTER, torch_from=("source", "wheel"), now=NOW)
    assert [j.args for j in both] == [j.args for j in source + wheel]
    assert [j.name for j in both] == [f"{j.name} torch-source" for j in source] + [f"{j.name} torch-wheel" for j in wheel]
    shown = CliRunner().invoke(make_cli(catalog), ["matrix", "--torch-from", "wheel", "--torch-from", "source"])
    assert shown.exit_code == 0, shown.output
    assert {j["args"] for j in json.loads(shown.output)} == {j.args for j in both}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--backend", "zdnn", "--arch", "x86_64"], "no allowed build matches --backend zdnn --arch x86_64"),
        (["--build-target", "zen9"], "unknown --build-target 'zen9'; valid:"),
        (["--format", "xml"], "Invalid value for '--format'"),
    ],
)
def test_a_matrix_that_cannot_be_is_one_line_and_exit_2(catalog, args, message):
    result = CliRunner().invoke(make_cli(catalog), ["matrix", *args])
    assert result.exit_code == 2 and message in result.output, result.output
