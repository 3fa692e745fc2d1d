"""Logins kept to where they must go: never in a process's arguments or a message, never sent where a
redirect leads elsewhere, never in a file another user can read; downloads held to their hashes; a bad
URL or wheel one line. Loopback servers stand in for indexes; pip is the host's own, its configuration
this test's alone (the host's pip configuration and $PIP_FIND_LINKS are left out)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import socket
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.loopback import Served, serving
from torchstack.base import redact
from torchstack.base.errors import ToolkitError, UsageProblem
from torchstack.catalog import torch_choice
from torchstack.catalog.component import Source
from torchstack.catalog.model import ROOT
from torchstack.catalog.wheels import pip_index_env
from torchstack.cli import make_cli
from torchstack.making import archive, sources
from torchstack.making.render import BuildSecrets, assemble_context
from torchstack.request.plan import AptSources, Suite

SECRET = "s3cret"
WHEEL_NAME = "torch-2.13.0-cp313-cp313-manylinux_2_28_x86_64.whl"


def test_a_password_is_shown_as_pip_shows_it():
    assert redact.url("https://user:s3cret@127.0.0.1:9/simple") == "https://user:****@127.0.0.1:9/simple"
    assert redact.url("https://ghp_token@github.example/x") == "https://****@github.example/x"
    assert redact.url("https://u:p@ss@host/x") == "https://u:****@host/x"  # an @ in the password, unquoted
    assert redact.url("pip: at http://a:b@h/x and https://c@d/e.") == "pip: at http://a:****@h/x and https://****@d/e."
    for kept in ("https://host/simple", "https://host/a@b", "/srv/mirror", "file:///srv/x@y"):
        assert redact.url(kept) == kept
    assert redact.without_login("https://u:p@host:8/simple#sha256=00") == "https://host:8/simple#sha256=00"


@contextlib.contextmanager
def listener():
    """A loopback TCP port that takes connections and closes them (pip's TLS handshake fails there):
    the port, and how many connections came."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    came = []
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            with contextlib.suppress(OSError):
                connection, _ = server.accept()
                came.append(1)
                connection.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1], came
    finally:
        stop.set()
        thread.join()
        server.close()


@contextlib.contextmanager
def watching_cmdlines():
    """Every process's command line, read from /proc every few ms while the block runs: those seen."""
    seen: set[str] = set()
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            for entry in Path("/proc").iterdir():
                if entry.name.isdigit():
                    with contextlib.suppress(OSError):
                        seen.add((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
            time.sleep(0.002)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        stop.set()
        thread.join()


def pip_alone_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """This environment without any pip setting of the host's, pip failing fast, the toolkit's state in `tmp_path`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_RETRIES="0", PIP_DEFAULT_TIMEOUT="3", TORCHSTACK_CACHE=str(tmp_path / "cache"))
    env.update(extra)
    return env


@pytest.mark.parametrize("how", ["requirements", "plugin", "torch-index"])
def test_an_index_login_is_in_no_command_line_and_no_output(tmp_path, how):
    (tmp_path / "req.txt").write_text("torchstack-test-nowhere==1.0\n")
    with listener() as (port, came):
        index = f"https://user:{SECRET}@127.0.0.1:{port}/simple"
        # With Podman (whose builds take the index as a secret, as BuildKit's do, whatever this host's Docker
        # builds with): Docker's legacy builder would refuse an index login before pip ran (test_index_login_in_builds).
        secret_mounts = ["--engine", "podman"]
        args, env = {
            "requirements": ([*secret_mounts, "--requirements", str(tmp_path / "req.txt")], {"PIP_INDEX_URL": index}),
            "plugin": ([*secret_mounts, "--plugin-wheel", "torchstack-test-nowhere==1.0"], {"PIP_INDEX_URL": index}),
            "torch-index": (["--torch-from", "wheel", "--torch-version", "2.13.0", "--torch-wheel", index], {}),
        }[how]
        with watching_cmdlines() as seen:
            command = [sys.executable, str(ROOT / "build.py"), "--dry-run", *args]
            with subprocess.Popen(
                command, cwd=ROOT, env=pip_alone_env(tmp_path, **env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            ) as run:
                stdout, stderr = run.communicate(timeout=120)
    # What the user typed (--torch-wheel) is the user's own: its line, under its pid or a child's before that execs
    others = [line for line in seen if line != " ".join(command) + " "]
    assert [line for line in others if " -m pip " in line and (" install " in line or " download " in line)], "no pip run seen"
    assert came, "pip did not ask the index given"
    assert not [line for line in others if SECRET in line]
    assert run.returncode != 0 and SECRET not in stdout + stderr
    assert stderr.count("\n") == 1 and "Traceback" not in stderr, stderr
    if how == "torch-index":
        assert f"https://user:****@127.0.0.1:{port}/simple" in stderr


def test_pip_on_the_host_keeps_its_environment_with_the_index_added(monkeypatch):
    monkeypatch.setenv("PIP_TRUSTED_HOST", "mirror.example")
    monkeypatch.setenv("TORCHSTACK_SOME", "1")
    assert pip_index_env(None) == dict(os.environ)
    env = pip_index_env("http://127.0.0.1:8080/simple")
    assert env == {**os.environ, "PIP_INDEX_URL": "http://127.0.0.1:8080/simple", "PIP_TRUSTED_HOST": "mirror.example 127.0.0.1:8080"}
    assert pip_index_env("https://u:p@pypi.example/simple")["PIP_TRUSTED_HOST"] == "mirror.example"


def test_plain_http_to_another_host_is_refused_in_one_line(catalog, tmp_path):
    runner, cli = CliRunner(), make_cli(catalog)
    env = pip_alone_env(tmp_path)
    for args in (
        ["--pip-index-url", f"http://user:{SECRET}@203.0.113.9/simple"],
        ["--torch-from", "wheel", "--torch-wheel", f"http://203.0.113.9/{WHEEL_NAME}"],
    ):
        done = runner.invoke(cli, ["--dry-run", *args], env=env)
        assert done.exit_code == 2, done.output
        assert "plain http to another host; use https" in done.output and SECRET not in done.output


def test_a_redirect_to_another_host_or_port_carries_no_login():
    listed = f'<a href="/files/{WHEEL_NAME}">{WHEEL_NAME}</a>'.encode()
    target: list[str] = []
    first = Served(files={"*": listed}, redirect=lambda path: target[0] if path == "/simple/torch/" else None)
    with serving(Served(files={"*": listed})) as elsewhere, serving(first):
        port = elsewhere.url.rpartition(":")[2]
        for where in (f"http://localhost:{port}/x/torch/", f"http://127.0.0.1:{port}/x/torch/"):
            target[:] = [where]
            found = torch_choice.listing(f"http://ci:{SECRET}@{first.url.removeprefix('http://')}/simple")
            assert [w.filename for w in found] == [WHEEL_NAME]
            assert first.seen[-1][1] is not None  # the index itself was sent the login
            assert elsewhere.seen[-1] == ("/x/torch/", None)
        target[:] = [f"{first.url}/mirror/torch/"]  # the same origin: the login goes with it
        torch_choice.listing(f"http://ci:{SECRET}@{first.url.removeprefix('http://')}/simple")
        assert first.seen[-1][0] == "/mirror/torch/" and first.seen[-1][1] is not None


def zipped(folder: Path, text: str) -> bytes:
    path = folder / "made.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr("torch/version.py", f"__version__ = '{text}'\n")
    return path.read_bytes()


@pytest.fixture
def wheel_server():
    """Loopback http serving bytes by path: `files` to fill, the base URL."""
    with serving() as served:
        yield served.files, served.url


def wheels_kept(tmp_path: Path) -> list[Path]:
    return sorted(p for p in (tmp_path / "cache" / "wheels").rglob("*.whl"))


def test_a_wheel_url_is_held_to_its_sha256_and_kept_by_its_url(catalog, tmp_path, wheel_server):
    files, base = wheel_server
    env, cli = pip_alone_env(tmp_path), make_cli(catalog)
    good, other = zipped(tmp_path, "2.13.0"), zipped(tmp_path, "2.13.0+other")
    files[f"/a/{WHEEL_NAME}"], files[f"/b/{WHEEL_NAME}"] = good, other

    wrong = f"{base}/a/{WHEEL_NAME}#sha256={'0' * 64}"
    done = CliRunner().invoke(cli, ["--dry-run", "--torch-from", "wheel", "--torch-wheel", wrong], env=env)
    assert done.exit_code == 2 and done.output.count("\n") == 1, done.output
    assert f"has sha256 {hashlib.sha256(good).hexdigest()}, not the one the URL names; nothing was kept" in done.output
    assert wheels_kept(tmp_path) == []

    right = f"{base}/a/{WHEEL_NAME}#sha256={hashlib.sha256(good).hexdigest()}"
    CliRunner().invoke(cli, ["--dry-run", "--torch-from", "wheel", "--torch-wheel", right], env=env)
    CliRunner().invoke(cli, ["--dry-run", "--torch-from", "wheel", "--torch-wheel", f"{base}/b/{WHEEL_NAME}"], env=env)
    kept = wheels_kept(tmp_path)
    assert [p.name for p in kept] == [WHEEL_NAME, WHEEL_NAME]  # one file name, two URLs: two files
    assert sorted(p.read_bytes() for p in kept) == sorted([good, other])


def test_a_corrupt_torch_wheel_is_one_line(tmp_path, wheel_server):
    files, base = wheel_server
    files[f"/{WHEEL_NAME}"] = b"not a zip archive"
    (tmp_path / WHEEL_NAME).write_bytes(b"not a zip archive")
    env = pip_alone_env(tmp_path)
    for given in (str(tmp_path / WHEEL_NAME), f"{base}/{WHEEL_NAME}"):
        done = subprocess.run(
            [sys.executable, str(ROOT / "build.py"), "--dry-run", "--torch-from", "wheel", "--torch-wheel", given],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 2 and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
        assert "not a wheel that can be read" in done.stderr or "no wheel (not a zip archive)" in done.stderr
    assert wheels_kept(tmp_path) == []


def test_a_mirror_url_with_a_space_or_a_login_is_one_line_without_the_password(tmp_path):
    with pytest.raises(UsageProblem) as refused:
        archive.require_suites(AptSources((Suite("http://127.0.0.1:9/deb ian", "trixie", "release"),)))
    assert "not a URL that can be fetched" in str(refused.value) and "\n" not in str(refused.value)
    with pytest.raises(UsageProblem) as refused:
        archive.require_suites(AptSources((Suite(f"http://ci:{SECRET}@127.0.0.1:9/debian", "trixie", "release"),)))
    assert "http://ci:****@127.0.0.1:9/debian" in str(refused.value) and SECRET not in str(refused.value)

    source = Source(version="1", url="https://upstream.invalid/x.tar.gz", filename="x.tar.gz", sha256="0" * 64, sha256_from="test")
    started = time.monotonic()
    with pytest.raises(ToolkitError, match="not a URL that can be fetched") as refused:
        sources.fetch_source("x", source, f"http://ci:{SECRET}@127.0.0.1:9/my mirror", cache=tmp_path)
    assert time.monotonic() - started < 1, "a URL no attempt can mend was tried again"
    assert SECRET not in str(refused.value)


def test_a_legacy_build_context_holds_the_index_login_for_this_user_alone(plan_for, tmp_path):
    plan = plan_for(methods={"openblas": "distro"}, builder="docker")
    conf = tmp_path / "pip.conf"
    conf.write_text(f"[global]\nindex-url = https://ci:{SECRET}@pypi.example/simple\n")
    assemble_context(plan, plan.stage("final"), tmp_path / "final", {}, BuildSecrets(pip_conf=conf))
    copied = tmp_path / "final" / "pip.conf"
    assert copied.read_text() == conf.read_text()
    assert copied.stat().st_mode & 0o777 == 0o600 and (tmp_path / "final").stat().st_mode & 0o777 == 0o700
