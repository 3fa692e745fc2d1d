"""A --push registry is asked before any work: one that does not answer, or that refuses this host's
login, is one line (exit 2); one that takes it, or needs none, passes. Against a real HTTP server on
loopback that answers as registries do (Basic, or a Bearer token service)."""

import base64
import http.server
import json
import os
import socket
import threading
from pathlib import Path

import pytest

from torchstack.base.errors import UsageProblem
from torchstack.registries import logins, registry

LOGIN = ("ci", "s3cret")


class FakeRegistry(http.server.BaseHTTPRequestHandler):
    mode = "open"  # open | basic | bearer

    def log_message(self, *args):
        pass

    def _answer(self, code: int, headers: dict | None = None) -> None:
        self.send_response(code)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def do_GET(self):
        given = self.headers.get("Authorization", "")
        wanted = "Basic " + base64.b64encode(":".join(LOGIN).encode()).decode()
        if self.path.startswith("/token"):
            self.server.asked.append(self.path)
            return self._answer(200 if given == wanted else 401)
        if self.mode == "open" or (self.mode == "basic" and given == wanted):
            return self._answer(200)
        port = self.server.server_address[1]
        challenge = f'Bearer realm="http://127.0.0.1:{port}/token",service="test"' if self.mode == "bearer" else 'Basic realm="test"'
        return self._answer(401, {"WWW-Authenticate": challenge})


@pytest.fixture
def serve(monkeypatch, tmp_path):
    """A registry answering on loopback in `mode`; `login` stored in an auth file of the test's own, or none."""
    servers = []

    def start(mode: str, login: tuple[str, str] | None) -> tuple[str, list]:
        handler = type("Handler", (FakeRegistry,), {"mode": mode})
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        server.asked = []
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        host = f"127.0.0.1:{server.server_address[1]}"
        auths = {host: {"auth": base64.b64encode(":".join(login).encode()).decode()}} if login else {}
        (tmp_path / "auth.json").write_text(json.dumps({"auths": auths}))
        monkeypatch.setenv("REGISTRY_AUTH_FILE", str(tmp_path / "auth.json"))
        monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "no-docker-config"))
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "no-runtime"))
        return f"{host}/ml/torchstack:r26.11", server.asked

    yield start
    for server in servers:
        server.shutdown()


@pytest.mark.parametrize(("mode", "login"), [("open", None), ("basic", LOGIN), ("bearer", LOGIN)])
def test_a_registry_that_takes_the_push_passes(serve, mode, login):
    remote, asked = serve(mode, login)
    registry.check_push_access(remote)
    if mode == "bearer":
        assert asked and "scope=repository%3Aml%2Ftorchstack%3Apush%2Cpull" in asked[0], asked


@pytest.mark.parametrize(
    ("mode", "login", "said"),
    [
        ("basic", None, "asks for a login and this host stored none: log in with `docker login {host}` or `podman login {host}`"),
        ("basic", ("ci", "wrong"), "refuses the login from {auth_file} (401 for /v2/): log in with `docker login {host}`"),
        ("bearer", ("ci", "wrong"), "refuses the login from {auth_file} (no token: 401): log in with `docker login {host}`"),
    ],
)
def test_a_registry_that_refuses_the_login_is_one_line(serve, mode, login, said, tmp_path):
    remote, _ = serve(mode, login)
    host = remote.split("/")[0]
    with pytest.raises(UsageProblem) as refused:
        registry.check_push_access(remote)
    assert said.format(host=host, auth_file=tmp_path / "auth.json") in str(refused.value) and "\n" not in str(refused.value)


def test_a_registry_that_does_not_answer_is_one_line():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(UsageProblem) as refused:
        registry.check_push_access(f"127.0.0.1:{port}/ml/torchstack:r26.11")
    assert str(refused.value) == (
        f"--push: the registry 127.0.0.1:{port} does not answer (connection refused): check --registry, or start the registry"
    )


# A credential helper as Docker's protocol has it: `get` reads the registry's host on stdin and
# answers {"ServerURL", "Username", "Secret"}, or says "credentials not found" and exits 1.
HELPER = """#!/bin/sh
[ "$1" = get ] || exit 2
read -r host
if [ "$host" = "$WANTED_HOST" ]; then
    printf '{"ServerURL": "%s", "Username": "ci", "Secret": "%s"}' "$host" "$HELPER_SECRET"
else
    echo "credentials not found in native keychain"; exit 1
fi
"""


@pytest.fixture
def helper(monkeypatch, tmp_path):
    """docker-credential-test on PATH, keeping one login (its secret in HELPER_SECRET)."""
    folder = tmp_path / "bin"
    folder.mkdir()
    (folder / "docker-credential-test").write_text(HELPER)
    (folder / "docker-credential-test").chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}:{os.environ['PATH']}")
    return monkeypatch


@pytest.mark.parametrize("kept", ["credsStore", "credHelpers"])
def test_a_login_kept_by_a_credential_helper_is_asked_of_the_helper(serve, helper, tmp_path, kept):
    """docker login with a credential helper keeps no password in the config: the helper is asked,
    as the engines ask it, and its answer is the login the registry is asked to take."""
    remote, _ = serve("basic", None)
    host = remote.split("/")[0]
    config = {"auths": {host: {}}, **({"credsStore": "test"} if kept == "credsStore" else {"credHelpers": {host: "test"}})}
    (tmp_path / "auth.json").write_text(json.dumps(config))
    helper.setenv("WANTED_HOST", host)
    helper.setenv("HELPER_SECRET", LOGIN[1])
    registry.check_push_access(remote)
    assert logins.login_for(host).source == f"{tmp_path / 'auth.json'}'s credential helper docker-credential-test"
    helper.setenv("HELPER_SECRET", "wrong")
    with pytest.raises(UsageProblem) as refused:
        registry.check_push_access(remote)
    assert "credential helper docker-credential-test (401 for /v2/)" in str(refused.value) and "wrong" not in str(refused.value)
    helper.setenv("WANTED_HOST", "elsewhere")
    with pytest.raises(UsageProblem, match="asks for a login and this host stored none"):
        registry.check_push_access(remote)


def test_a_helper_that_is_not_installed_is_one_line(serve, tmp_path):
    remote, _ = serve("basic", None)
    host = remote.split("/")[0]
    (tmp_path / "auth.json").write_text(json.dumps({"credHelpers": {host: "ecr-login"}}))
    with pytest.raises(logins.LoginRefused) as refused:
        logins.login_for(host)
    said = str(refused.value)
    assert said.startswith(
        f"{host}: the credential helper docker-credential-ecr-login that {tmp_path / 'auth.json'} names could not be asked"
    )
    assert said.endswith(f"install it, or log in again with `docker login {host}`") and "\n" not in said


def test_logins_are_looked_for_where_podman_then_docker_keep_them(monkeypatch, tmp_path):
    monkeypatch.delenv("REGISTRY_AUTH_FILE", raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", "/run/user/1000")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker"))
    assert logins.auth_files() == [
        Path("/run/user/1000/containers/auth.json"),
        tmp_path / "config" / "containers" / "auth.json",
        tmp_path / "docker" / "config.json",
    ]
    monkeypatch.setenv("REGISTRY_AUTH_FILE", str(tmp_path / "named.json"))
    assert logins.auth_files() == [tmp_path / "named.json", tmp_path / "docker" / "config.json"]
