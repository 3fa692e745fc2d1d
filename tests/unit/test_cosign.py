"""Which cosign the host has and what it is told: its major release read once (from its version, or from
its options where a distribution's build says "devel"), the forms each makes, refusals in one line."""

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from torchstack.base.errors import HostNotReady, UsageProblem
from torchstack.cli import make_cli
from torchstack.publishing import cosign

# The tests' cosign 3 (scripts/setup-host.sh --tests), beside the host's own.
COSIGN3 = Path("/usr/local/lib/torchstack/cosign3/cosign")


def a_cosign(folder: Path, version: str, sign_help: str) -> Path:
    """An executable named cosign in `folder` that answers `version --json` and `sign --help` as a
    release of cosign does (what the detection reads), and nothing else."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "cosign"
    script.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = version ]; then echo \'{{"gitVersion": "{version}"}}\'; exit 0; fi\n'
        f'if [ "$1" = sign ]; then printf "%s\\n" "{sign_help}"; exit 0; fi\n'
        "exit 1\n"
    )
    script.chmod(0o755)
    return folder


@pytest.fixture
def on_path(monkeypatch):
    """Put a folder first on PATH for cosign's detection, which is read afresh."""

    def put(folder: Path) -> None:
        monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
        cosign._installed.cache_clear()

    yield put
    cosign._installed.cache_clear()


@pytest.mark.parametrize(
    ("version", "sign_help", "major"),
    [
        ("v3.1.2", "", 3),
        ("v2.6.4", "", 2),
        ("devel", "  --use-signing-config=true:\n  --registry-referrers-mode=:", 3),  # Debian forky's 3.1.1
        ("devel", "  --tlog-upload=true:\n  --registry-referrers-mode=:", 2),  # Debian trixie's 2.5.0
    ],
)
def test_the_major_release_comes_from_the_version_or_else_from_the_options_of_sign(tmp_path, on_path, version, sign_help, major):
    on_path(a_cosign(tmp_path, version, sign_help))
    found = cosign.found("--sign")
    assert found.major == major and found.path == str(tmp_path / "cosign")
    assert found.forms("both") == cosign.MAKES[major]


@pytest.mark.parametrize(("version", "sign_help"), [("v4.0.0", ""), ("v1.13.1", ""), ("devel", "usage: something else")])
def test_a_cosign_it_cannot_drive_is_refused_in_one_line(tmp_path, on_path, version, sign_help):
    on_path(a_cosign(tmp_path, version, sign_help))
    with pytest.raises(HostNotReady) as refused:
        cosign.found("--sign")
    said = str(refused.value)
    assert "\n" not in said and "cosign 2 or 3" in said and "for --sign" in said, said


def test_each_major_release_is_told_the_options_it_takes_for_each_form():
    two, three = cosign.Cosign("cosign", 2, "2.5.0"), cosign.Cosign("cosign", 3, "3.1.1")
    assert two.sign_options(cosign.LEGACY) == ("--tlog-upload=false", "--yes")
    assert three.sign_options(cosign.BUNDLE) == ("--use-signing-config=false", "--tlog-upload=false", "--yes")
    assert "--new-bundle-format=false" in three.sign_options(cosign.LEGACY)
    assert "--new-bundle-format=false" in three.verify_options(cosign.LEGACY)
    assert "--new-bundle-format=false" not in three.verify_options(cosign.BUNDLE) + two.verify_options(cosign.LEGACY)
    assert three.forms("legacy") == (cosign.LEGACY,) and three.forms("bundle") == (cosign.BUNDLE,)
    with pytest.raises(UsageProblem, match="cosign 2.5.0 makes only the legacy form"):
        two.forms("bundle")


@pytest.mark.skipif(not COSIGN3.exists(), reason="the tests' cosign 3 is installed by scripts/setup-host.sh --tests")
def test_the_tests_cosign_3_is_read_as_cosign_3(on_path):
    on_path(COSIGN3.parent)
    assert cosign.found("--sign").major == 3


def test_a_build_asking_for_a_form_the_hosts_cosign_cannot_make_is_refused_before_any_work(catalog, tmp_path, on_path, monkeypatch):
    key = tmp_path / "cosign.key"
    monkeypatch.setenv("COSIGN_PASSWORD", "")
    # A cosign 2 that loads any key: what is refused is the form, before the build.
    on_path(a_cosign(tmp_path / "two", "v2.5.0", ""))
    key.write_text("a key file")
    (tmp_path / "two" / "cosign").write_text(
        (tmp_path / "two" / "cosign").read_text().replace("exit 1\n", 'if [ "$1" = public-key ]; then exit 0; fi\nexit 1\n')
    )
    args = ["--torch-from", "wheel", "--openblas-from", "distro", "--dry-run", "--push", "--registry", "127.0.0.1:9/ml"]
    result = CliRunner().invoke(make_cli(catalog), [*args, "--sign", str(key), "--signature-format", "bundle"])
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert "--signature-format bundle: cosign 2.5.0 makes only the legacy form" in line, line
