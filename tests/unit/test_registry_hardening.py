"""The registry client keeps its login and token to the registry they are for, takes a manifest's digest
from its bytes (never from a header), and answers a token service that speaks no JSON in one line.
Against real HTTP servers on loopback: a registry on 127.0.0.1 and an elsewhere on localhost (another
host, as requests and the engines count hosts) that its upload Locations and redirects point to."""

import base64
import hashlib
import http.server
import json
import threading

import pytest

from torchstack.base.errors import UsageProblem
from torchstack.registries import registry

LOGIN = ("ci", "s3cret")
TOKEN = "t0ken-for-127.0.0.1-only"
BASIC = "Basic " + base64.b64encode(":".join(LOGIN).encode()).decode()
LAYER = b"the layer's bytes"


def sha256(data: bytes) -> str:
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


class Quiet(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def answer(self, code: int, body: bytes = b"", headers: dict | None = None) -> None:
        self.send_response(code)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


class Elsewhere(Quiet):
    """Another host: keeps what each request brought (its method, path and headers) and takes it all."""

    def keep(self) -> None:
        self.server.asked.append((self.command, self.path, dict(self.headers)))
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.answer(200 if self.command == "GET" else 201, LAYER if self.command == "GET" else b"")

    do_GET = do_PUT = do_DELETE = keep


class FakeRegistry(Quiet):
    """A registry asking for `mode` (basic, or a bearer token from its own /token), whose uploads and
    blobs are on `elsewhere`, and whose manifests are `manifests` (path: (body, Docker-Content-Digest))."""

    mode = "bearer"
    token_answer = (b'{"token": "%s"}' % TOKEN.encode(), "application/json")
    elsewhere = ""
    manifests: dict = {}

    def authorized(self) -> bool:
        given = self.headers.get("Authorization", "")
        self.server.asked.append((self.command, self.path, given))
        if given == (f"Bearer {TOKEN}" if self.mode == "bearer" else BASIC):
            return True
        port = self.server.server_address[1]
        challenge = f'Bearer realm="http://127.0.0.1:{port}/token",service="test"' if self.mode == "bearer" else 'Basic realm="test"'
        self.answer(401, b"{}", {"WWW-Authenticate": challenge})
        return False

    def do_GET(self):
        if self.path.startswith("/token"):
            body, kind = self.token_answer
            return self.answer(200 if self.headers.get("Authorization") == BASIC else 401, body, {"Content-Type": kind})
        if not self.authorized():
            return
        if self.path.startswith("/v2/ml/t/blobs/"):
            return self.answer(307, headers={"Location": f"{self.elsewhere}/blob/{self.path.rsplit('/', 1)[-1]}"})
        if self.path in self.manifests:
            body, said = self.manifests[self.path]
            return self.answer(200, body, {"Content-Type": registry.OCI_INDEX, **({"Docker-Content-Digest": said} if said else {})})
        self.answer(404 if self.path != "/v2/" else 200, b"{}")

    def do_HEAD(self):
        if self.authorized():
            self.answer(404)

    def do_POST(self):
        if self.authorized():
            self.answer(202, headers={"Location": f"{self.elsewhere}/upload/1?state=abc"})

    def do_PUT(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.authorized():
            self.answer(201)


@pytest.fixture
def servers(monkeypatch, tmp_path):
    """Start a registry (its handler's attributes as given) with LOGIN stored for it, and an elsewhere on
    localhost; their hosts, and what each was asked."""
    started = []

    def start(**attributes) -> tuple[str, list, list]:
        other = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Elsewhere)
        attributes.setdefault("elsewhere", f"http://localhost:{other.server_address[1]}")
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), type("Handler", (FakeRegistry,), attributes))
        for each in (server, other):
            each.asked = []
            threading.Thread(target=each.serve_forever, daemon=True).start()
            started.append(each)
        host = f"127.0.0.1:{server.server_address[1]}"
        (tmp_path / "auth.json").write_text(json.dumps({"auths": {host: {"auth": BASIC.removeprefix("Basic ")}}}))
        monkeypatch.setenv("REGISTRY_AUTH_FILE", str(tmp_path / "auth.json"))
        monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "no-docker-config"))
        return host, server.asked, other.asked

    yield start
    for each in started:
        each.shutdown()


def no_credential_in(asked: list) -> bool:
    said = json.dumps(asked)
    return bool(asked) and "Authorization" not in said and TOKEN not in said and LOGIN[1] not in said


@pytest.mark.parametrize("mode", ["bearer", "basic"])
def test_an_upload_location_on_another_host_gets_no_login_or_token(servers, mode):
    host, at_registry, elsewhere = servers(mode=mode)
    assert registry.Registry(host).put_blob("ml/t", LAYER) == sha256(LAYER)
    assert [(method, path.split("?")[0]) for method, path, _ in elsewhere] == [("PUT", "/upload/1")]
    assert f"digest={sha256(LAYER)}" in elsewhere[0][1]
    assert no_credential_in(elsewhere), elsewhere
    wanted = f"Bearer {TOKEN}" if mode == "bearer" else BASIC
    assert ("POST", "/v2/ml/t/blobs/uploads/", wanted) in at_registry, "the registry itself had the credential"


@pytest.mark.parametrize("mode", ["bearer", "basic"])
def test_a_mount_that_starts_an_upload_elsewhere_cancels_it_without_the_login(servers, mode):
    host, _, elsewhere = servers(mode=mode)
    assert registry.Registry(host).mount_blob("ml/t", sha256(LAYER), "ml/other") is False
    assert [(method, path) for method, path, _ in elsewhere] == [("DELETE", "/upload/1?state=abc")]
    assert no_credential_in(elsewhere), elsewhere


@pytest.mark.parametrize("mode", ["bearer", "basic"])
def test_a_blob_redirected_to_another_host_is_fetched_there_without_the_login(servers, mode, tmp_path):
    host, _, elsewhere = servers(mode=mode)
    registry.Registry(host).fetch_blob("ml/t", {"digest": sha256(LAYER)}, tmp_path / "blobs")
    assert (tmp_path / "blobs" / "sha256" / sha256(LAYER).removeprefix("sha256:")).read_bytes() == LAYER
    assert [(method, path) for method, path, _ in elsewhere] == [("GET", f"/blob/{sha256(LAYER)}")]
    assert no_credential_in(elsewhere), elsewhere


def test_an_upload_location_on_the_registry_itself_keeps_the_token(servers):
    host, at_registry, elsewhere = servers(mode="bearer", elsewhere="")
    registry.Registry(host).put_blob("ml/t", LAYER)
    assert ("PUT", f"/upload/1?state=abc&digest={sha256(LAYER)}", f"Bearer {TOKEN}") in at_registry and not elsewhere


INDEX = json.dumps({"schemaVersion": 2, "mediaType": registry.OCI_INDEX, "manifests": []}).encode()


@pytest.mark.parametrize(
    ("said", "refused"),
    [
        ("sha256:../../../escaped", "the registry says its digest is 'sha256:../../../escaped', its bytes are " + sha256(INDEX)),
        (sha256(b"other bytes"), f"the registry says its digest is '{sha256(b'other bytes')}', its bytes are {sha256(INDEX)}"),
    ],
)
def test_a_manifest_whose_header_names_another_digest_is_refused_and_nothing_written(servers, tmp_path, said, refused):
    host, _, _ = servers(mode="bearer", manifests={"/v2/ml/t/manifests/a": (INDEX, said)})
    layout = tmp_path / "deep" / "down" / "layout"
    with pytest.raises(registry.RegistryProblem) as problem:
        registry.Registry(host).copy_to_layout(registry.parse(f"{host}/ml/t:a"), layout)
    assert str(problem.value) == f"{host}/ml/t:a: {refused}"
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["auth.json"]


def test_a_manifest_is_named_by_the_hash_of_its_bytes(servers, tmp_path):
    host, _, _ = servers(mode="bearer", manifests={"/v2/ml/t/manifests/a": (INDEX, None)})
    top = registry.Registry(host).copy_to_layout(registry.parse(f"{host}/ml/t:a"), tmp_path / "layout")
    assert top["digest"] == sha256(INDEX)
    assert (tmp_path / "layout" / "blobs" / "sha256" / sha256(INDEX).removeprefix("sha256:")).read_bytes() == INDEX


def test_a_manifest_naming_a_layer_by_a_path_is_refused_and_nothing_written(servers, tmp_path):
    image = json.dumps({"schemaVersion": 2, "config": {"digest": sha256(LAYER)}, "layers": [{"digest": "sha256:../../../escaped"}]})
    host, _, _ = servers(mode="bearer", manifests={"/v2/ml/t/manifests/a": (image.encode(), None)})
    with pytest.raises(registry.RegistryProblem) as problem:
        registry.Registry(host).copy_to_layout(registry.parse(f"{host}/ml/t:a"), tmp_path / "layout")
    assert str(problem.value) == f"{host}/ml/t: a manifest names 'sha256:../../../escaped', not a sha256 digest"
    assert not list(tmp_path.rglob("escaped")) and not (tmp_path / "layout" / "oci-layout").exists()


@pytest.mark.parametrize(
    ("answer", "kind"),
    [
        ((b"<html><body>Sign in</body></html>", "text/html; charset=utf-8"), "text/html"),
        ((b"[]", "application/json"), "application/json"),
    ],
)
def test_a_token_service_that_answers_no_json_object_is_one_line(servers, answer, kind):
    host, _, _ = servers(mode="bearer", token_answer=answer)
    said = f"{host}'s token service 127.0.0.1 answers {kind}, not JSON with a token"
    with pytest.raises(UsageProblem) as refused:
        registry.check_push_access(f"{host}/ml/t:a")
    assert str(refused.value) == f"--push: {said}"
    with pytest.raises(registry.RegistryProblem) as problem:
        registry.Registry(host).manifest_bytes("ml/t", "a")
    assert str(problem.value) == said


def test_a_token_service_that_answers_json_without_a_token_is_a_refused_login(servers, tmp_path):
    host, _, _ = servers(mode="bearer", token_answer=(b'{"error": "none for you"}', "application/json"))
    with pytest.raises(registry.LoginRefused) as refused:
        registry.Registry(host).manifest_bytes("ml/t", "a")
    assert str(refused.value).startswith(f"the registry {host} refuses the login from {tmp_path / 'auth.json'} (401 for ml/t/manifests/a)")


def test_a_token_service_in_plain_http_off_loopback_is_refused_before_it_is_asked(servers):
    host, _, _ = servers(mode="bearer")
    where = registry.Registry(host)
    with pytest.raises(registry.RegistryProblem) as refused:
        where._token('Bearer realm="http://auth.example.com/token",service="test"')
    assert str(refused.value) == (
        f"{host}: its token service auth.example.com is plain HTTP: a login goes to a token service over HTTPS only"
    )
    with pytest.raises(registry.RegistryProblem, match="its Bearer challenge names no token service"):
        where._token('Bearer service="test"')
