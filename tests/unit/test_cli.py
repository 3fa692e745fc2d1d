"""The command line through click's CliRunner: help, plan, render, list, and one-line errors."""

import pytest
from click.testing import CliRunner

from torchstack.cli import make_cli


@pytest.fixture(scope="module")
def cli(catalog):
    return make_cli(catalog)


def invoke(cli, args):
    result = CliRunner().invoke(cli, args)
    return result.exit_code, result.output


def test_help_lists_the_options_users_know(cli):
    code, out = invoke(cli, ["--help"])
    assert code == 0
    for option in (
        "--build-type",
        "--backend",
        "--build-target",
        "--jobs",
        "--torch-version",
        "--release",
        "--repository",
        "--tag",
        "--no-cache",
        "--dry-run",
        "--openblas-from",
        "--torch-from",
    ):
        assert option in out


def test_plan_prints_stages_images_tags_and_flags(cli):
    code, out = invoke(cli, ["plan", "--backend", "onednn-acl", "--build-target", "neoverse-v1", "--release", "r26.11"])
    assert code == 0, out
    assert "release tag   r26.11-torch-2.13.0-onednn-acl-neoverse-v1" in out
    assert "target        neoverse-v1: -mcpu=neoverse-v1" in out
    assert "torchstack-libs:trixie-aarch64-neoverse-v1-openblas-0.3.33-acl-" in out
    assert "OPENBLAS_MAKE_FLAGS='TARGET=NEOVERSEV1" in out and "arch=armv8.2-a" in out


def test_dry_run_is_the_plan(cli):
    code, out = invoke(cli, ["--dry-run", "--backend", "zdnn", "--build-target", "z16", "--release", "r26.11"])
    assert code == 0 and "release tag   r26.11-torch-2.13.0-zdnn-z16" in out and "emulated" in out


def test_render_writes_each_stage(cli, tmp_path):
    code, out = invoke(cli, ["render", "--output", str(tmp_path), "--backend", "openblas", "--arch", "s390x"])
    assert code == 0, out
    for stage in ("base", "libs", "tools", "dev", "final"):
        assert (tmp_path / stage / "Dockerfile").is_file()
    assert (tmp_path / "libs" / "scripts" / "openblas" / "build-openblas.sh").is_file()


def test_list_backends_and_targets(cli):
    code, out = invoke(cli, ["list", "backends"])
    assert code == 0 and "onednn-acl   aarch64" in out and "(default on aarch64)" in out
    code, out = invoke(cli, ["list", "targets"])
    assert code == 0 and "neoverse-v2" in out and "-march=arch14" in out and "native" in out
    lines = {line.split()[0] + " " + line.split()[1]: line for line in out.splitlines()}
    assert lines["neoverse-v2 aarch64"].endswith(" trixie (also: graviton4, grace, axion)"), lines["neoverse-v2 aarch64"]
    assert lines["z16 s390x"].endswith(" bookworm, trixie") and lines["neoverse-v3 aarch64"].endswith(" trixie (also: graviton5)")
    assert "not yet buildable: no Debian release here has GCC 15.1" in lines["z17 s390x"]
    code, out = invoke(cli, ["plan", "--build-target", "z17", "--backend", "zdnn"])
    assert code == 2 and "it is listed, not yet buildable" in out, out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["plan", "--backend", "nope"], "unknown --backend 'nope'; valid: onednn, onednn-acl, openblas, zdnn"),
        (["plan", "--backend", "zdnn", "--build-target", "neoverse-v1"], "backend zdnn builds for s390x, not aarch64"),
        (["plan", "--backend", "onednn-acl", "--build-target", "z16"], "backend onednn-acl builds for aarch64, not s390x"),
        (["plan", "--build-type", "everything"], "Invalid value for '--build-type'"),
        (["plan", "--jobs", "0"], "Invalid value for '--jobs'"),
        (["plan", "--tag", "bad tag"], "--tag 'bad tag': a Docker tag is"),
        (["plan", "--source-version", "openblas"], "expected COMPONENT=VERSION"),
        (["plan", "--openblas-from", "conda"], "Invalid value for '--openblas-from'"),
        (["--frobnicate"], "No such option '--frobnicate'"),
        (["bootstrap", "--arch", "sparc"], "unknown --arch 'sparc'; valid: aarch64, s390x, x86_64"),
        (["plan", "--builder", "kaniko"], "Invalid value for '--builder'"),
        # Options of a build before a command would be ignored by it: refused, naming each one.
        (["--backend", "zdnn", "plan"], "--backend given before the plan command, which would ignore it: put the command first"),
        (["--json", "x.json", "--release", "r26.11", "list", "backends"], "--release, --json given before the list command"),
        (["render", "--output", "/proc/forbidden"], "--output /proc/forbidden: cannot write in /proc/forbidden:"),
        (["--json", "/proc/forbidden/x.json", "--dry-run"], "--json /proc/forbidden/x.json: cannot write in /proc/forbidden:"),
        (["plan", "--debian-snapshot", "last week"], "--debian-snapshot last week: not a time in UTC"),
        (["bootstrap", "--debian-snapshot", "2999-01-01"], "--debian-snapshot 2999-01-01: still to come"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(cli, args, message):
    code, out = invoke(cli, args)
    lines = out.strip().splitlines()
    assert code == 2, out
    assert len(lines) == 1 and lines[0].startswith("torchstack: error: "), out
    assert message in lines[0]


def test_options_a_build_reads_from_the_environment_do_not_count_as_given_before_a_command(cli, monkeypatch):
    monkeypatch.setenv("PIP_CERT", "/etc/ssl/certs/ca-certificates.crt")
    code, out = invoke(cli, ["plan", "--release", "r26.11"])
    assert code == 0 and "release tag   r26.11-" in out, out


def test_no_docker_daemon_is_one_line(cli, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    code, out = invoke(cli, ["test", "some-image"])
    assert code == 1 and out.count("\n") == 1
    assert "no Docker engine answers" in out and "dockerd" in out
