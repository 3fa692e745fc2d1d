"""Logins in mirror URLs: an apt mirror's refused in one line before any work (apt's sources in every stage,
layers of the images, would hold it), a source mirror's sent to that mirror alone, every suite URL printed
redacted."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.loopback import Served, serving
from torchstack.base.errors import UsageProblem
from torchstack.catalog.component import Source
from torchstack.cli import make_cli
from torchstack.making import sources
from torchstack.reports.build_report import Published, ReleaseOutcome, say_first, summary
from torchstack.reports.reports import format_plan

SECRET = "s3cret"
TARBALL = b"the pinned source"


@pytest.fixture(scope="module")
def cli(catalog):
    return make_cli(catalog)


@pytest.mark.parametrize(
    "arguments",
    [
        ["plan", "--security-mirror", f"https://ci:{SECRET}@mirror.example/debian-security"],
        ["plan", "--debian-mirror", f"http://ci:{SECRET}@mirror.example/debian"],
        ["plan", "--debian-snapshot", "2026-11-01", "--snapshot-archive", f"https://{SECRET}@snapshot.example"],
        ["--dry-run", "--debian-mirror", f"https://ci:{SECRET}@mirror.example/debian"],
        ["bootstrap", "--security-mirror", f"https://ci:{SECRET}@mirror.example/debian-security"],
    ],
)
def test_a_login_in_an_apt_mirror_is_refused_in_one_line_before_any_work(cli, arguments):
    result = CliRunner().invoke(cli, arguments)
    assert result.exit_code == 2, result.output
    assert result.output.count("\n") == 1 and "Traceback" not in result.output, result.output
    assert SECRET not in result.output
    assert "would be written into the image's apt sources" in result.output and "without one" in result.output
    assert "****@" in result.output and arguments[-2] in result.output


def test_an_apt_mirror_over_plain_http_without_a_login_plans(cli):
    """Plain http is apt's usual transport: every suite's InRelease is signed, and checked."""
    result = CliRunner().invoke(cli, ["plan", "--debian-mirror", "http://mirror.example/debian", "--openblas-from", "distro"])
    assert result.exit_code == 0, result.output
    assert "(http://mirror.example/debian)" in result.output


def _with_login(plan_for):
    return plan_for(
        methods={"openblas": "distro"},
        debian_mirror=f"https://ci:{SECRET}@mirror.example/debian",
        security_mirror=f"https://{SECRET}@mirror.example/debian-security",
    )


def test_the_plan_prints_each_suite_url_redacted(plan_for):
    shown = format_plan(_with_login(plan_for), "buildkit")
    assert SECRET not in shown
    assert "(https://ci:****@mirror.example/debian)" in shown and "(https://****@mirror.example/debian-security)" in shown


class _Engine:
    url = f"tcp://ci:{SECRET}@engine.example:2376"
    why = "DOCKER_HOST"
    sizes = "uncompressed"

    def describe(self) -> str:
        return "docker"

    def release(self) -> dict:
        return {"kind": "docker"}


class _View:
    def __init__(self):
        self.lines: list[str] = []

    def note(self, line: str) -> None:
        self.lines.append(line)


def test_a_builds_first_lines_and_its_summary_hold_no_password(plan_for, tmp_path):
    plan, view = _with_login(plan_for), _View()
    say_first(view, plan, None, _Engine(), [], False, None)
    suites = next(line for line in view.lines if line.startswith("torchstack: Debian suites"))
    assert SECRET not in suites and "https://ci:****@mirror.example/debian" in suites
    made = summary(plan, _Engine(), ReleaseOutcome("sha256:00", "passed"), Published(), 1.0, tmp_path / "log", {})
    assert SECRET not in repr(made)
    assert made["security_updates"]["suites"][0].startswith("deb https://ci:****@mirror.example/debian ")
    assert made["engine"]["url"] == "tcp://ci:****@engine.example:2376"


def _source() -> Source:
    return Source(
        version="1",
        url="https://upstream.invalid/x.tar.gz",
        filename="x.tar.gz",
        sha256=hashlib.sha256(TARBALL).hexdigest(),
        sha256_from="test",
    )


def test_a_source_mirrors_login_goes_to_it_as_basic_auth_and_not_where_it_redirects(tmp_path: Path):
    basic = "Basic " + base64.b64encode(f"ci:{SECRET}".encode()).decode()
    with serving(Served(files={"*": TARBALL})) as mirror:
        got = sources.fetch_source("x", _source(), mirror.url.replace("//", f"//ci:{SECRET}@") + "/m", cache=tmp_path / "a")
    assert got.read_bytes() == TARBALL and mirror.seen == [("/m/x.tar.gz", basic)]
    with serving(Served(files={"*": TARBALL})) as elsewhere:
        with serving(Served(redirect=lambda path: f"{elsewhere.url}{path}")) as mirror:
            sources.fetch_source("x", _source(), mirror.url.replace("//", f"//ci:{SECRET}@") + "/m", cache=tmp_path / "b")
    assert mirror.seen == [("/m/x.tar.gz", basic)] and elsewhere.seen == [("/m/x.tar.gz", None)]


def test_a_source_mirrors_login_over_plain_http_to_another_host_is_refused():
    for fine in ("https://ci:pw@mirror.example/m", "http://mirror.example/m", "http://ci:pw@127.0.0.1:8/m", "/srv/mirror", None):
        sources.check_mirror(fine)
    with pytest.raises(UsageProblem) as refused:
        sources.check_mirror(f"http://ci:{SECRET}@203.0.113.9/m")
    assert SECRET not in str(refused.value) and "http://ci:****@203.0.113.9/m" in str(refused.value) and "https" in str(refused.value)
