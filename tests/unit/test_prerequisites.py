"""A host that lacks a tool the build needs is told, in one line, what is missing and how to install it."""

import dataclasses

import pytest
from click.testing import CliRunner

from torchstack.cli import make_cli
from torchstack.request import prerequisites

ENABLED_F = "enabled\ninterpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P\nflags: POCF\noffset 0\nmagic 7f454c46\n"


@pytest.fixture
def host(monkeypatch, tmp_path):
    """A host with every tool and a qemu-aarch64 binfmt entry; each test takes away what it names."""
    tools = {"mmdebstrap", "arch-test"}
    monkeypatch.setattr(prerequisites.shutil, "which", lambda name: f"/usr/bin/{name}" if name in tools else None)
    monkeypatch.setattr(prerequisites.buildkit, "available", lambda: "buildx" in tools)
    monkeypatch.setattr(prerequisites, "BINFMT", tmp_path)
    (tmp_path / "qemu-aarch64").write_text(ENABLED_F)
    tools.add("buildx")
    return tools


@pytest.fixture
def arm64_on_x86(plan_for):
    """An arm64 plan as this x86_64 host sees it, whatever machine runs the tests."""
    return lambda **fields: dataclasses.replace(plan_for(arch="aarch64", **fields), host_arch="x86_64")


def test_a_set_up_host_lacks_nothing(host, arm64_on_x86):
    assert prerequisites.missing_for(arm64_on_x86(builder="buildx"), bootstrap=True) == []


def test_a_foreign_bootstrap_without_arch_test_names_it(host, arm64_on_x86):
    host.discard("arch-test")
    plan = arm64_on_x86()
    (missing,) = prerequisites.missing_for(plan, bootstrap=True)
    assert missing.what.startswith("arch-test") and missing.install == "apt-get install arch-test"
    # The image exists already: nothing is bootstrapped, so arch-test is not needed.
    assert prerequisites.missing_for(plan, bootstrap=False) == []


def test_a_native_bootstrap_needs_mmdebstrap_but_not_arch_test(host, plan_for):
    host.discard("arch-test")
    host.discard("mmdebstrap")
    plan = dataclasses.replace(plan_for(arch="x86_64"), host_arch="x86_64")
    (missing,) = prerequisites.missing_for(plan, bootstrap=True)
    assert missing.install == "apt-get install mmdebstrap"


@pytest.mark.parametrize(
    "entry",
    [None, ENABLED_F.replace("enabled", "disabled"), ENABLED_F.replace("POCF", "POC")],
    ids=["absent", "disabled", "without-flag-F"],
)
def test_emulation_needs_an_enabled_binfmt_entry_with_flag_f(host, arm64_on_x86, entry):
    binfmt = prerequisites.BINFMT / "qemu-aarch64"
    if entry is None:
        binfmt.unlink()
    else:
        binfmt.write_text(entry)
    (missing,) = prerequisites.missing_for(arm64_on_x86(), bootstrap=False)
    assert "qemu emulation of aarch64" in missing.what and "scripts/setup-host.sh" in missing.install


def test_buildx_asked_for_but_not_installed(host, plan_for):
    host.discard("buildx")
    (missing,) = prerequisites.missing_for(plan_for(builder="buildx"), bootstrap=False)
    assert "docker buildx" in missing.what and "apt-get install docker-buildx" in missing.install
    assert prerequisites.missing_for(plan_for(builder="docker"), bootstrap=False) == []


def test_the_bootstrap_command_stops_in_one_line_with_exit_2(host, catalog, monkeypatch):
    host.discard("arch-test")
    monkeypatch.setattr("torchstack.request.host.host_arch", lambda: "x86_64")
    result = CliRunner().invoke(make_cli(catalog), ["bootstrap", "--arch", "aarch64"])
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2, result.output
    assert len(lines) == 1 and lines[0].startswith("torchstack: error: this host is not set up for this build: "), lines
    assert "missing arch-test" in lines[0] and "apt-get install arch-test" in lines[0]
    assert "scripts/setup-host.sh" in lines[0]


CPUINFO = prerequisites.Path(__file__).parent / "cpuinfo"


def x86_plan(plan_for, **fields):
    """An x86_64 plan as an x86_64 host sees it, whatever machine runs the tests."""
    return dataclasses.replace(plan_for(arch="x86_64", **fields), host_arch="x86_64")


def test_a_checked_build_for_a_cpu_this_host_lacks_is_refused_before_any_work(plan_for):
    plan = x86_plan(plan_for, build_target="x86-64-v4", methods={"torch": "wheel"}, torch_wheel="index")
    avx2_host = (CPUINFO / "x86-avx2.txt").read_text()
    with pytest.raises(prerequisites.UsageProblem, match=r"lacks avx512f, avx512bw.*build with --no-test and check it where it runs"):
        prerequisites.require_cpu_for_checks(plan, checks=True, cpuinfo=avx2_host)
    notes = prerequisites.require_cpu_for_checks(plan, checks=False, cpuinfo=avx2_host)
    assert notes[0] == (
        "torchstack: note: this host's CPU lacks avx512f, avx512bw, avx512cd, avx512dq, avx512vl, which "
        "x86-64-v4 code (-march=x86-64-v4) may use; the build compiles for it without running it"
    )
    # Then, per compiled component, what its build runs here (components.yaml host_runs): OpenBLAS's and numpy's.
    assert [n.split("'s build runs ")[0] for n in notes[1:]] == ["torchstack: note: openblas"] * 2 + ["torchstack: note: numpy"]
    assert "may die of SIGILL and stop the tools stage" in notes[3]
    assert prerequisites.require_cpu_for_checks(plan, checks=True, cpuinfo=(CPUINFO / "x86-avx512-amd.txt").read_text()) == []


def test_a_torch_source_build_for_a_cpu_this_host_lacks_is_warned_about(plan_for):
    plan = x86_plan(plan_for, build_target="x86-64-v4", build_type="dev")
    notes = prerequisites.require_cpu_for_checks(plan, checks=True, cpuinfo=(CPUINFO / "x86-avx2.txt").read_text())
    torch = [n for n in notes if n.startswith("torchstack: note: torch's build runs ")]
    assert len(torch) == 2 and "patches/torch/0001 sets BLAS_USE_CBLAS_DOT" in torch[0] and "SIGILL" in torch[1]


def test_libs_only_and_emulated_builds_are_not_held_to_this_cpu(plan_for, arm64_on_x86):
    libs = x86_plan(plan_for, build_target="x86-64-v4", build_type="libs")
    # the libs stage alone: OpenBLAS's two, not numpy's nor torch's
    assert len(prerequisites.require_cpu_for_checks(libs, checks=True, cpuinfo=(CPUINFO / "x86-avx2.txt").read_text())) == 3
    emulated = arm64_on_x86(build_target="neoverse-v1")
    assert prerequisites.require_cpu_for_checks(emulated, checks=True, cpuinfo=(CPUINFO / "x86-avx2.txt").read_text()) == []
