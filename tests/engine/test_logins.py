"""Publishing to the registry users have: over TLS, behind a login, the login kept by a real
credential helper (Debian's docker-credential-pass, with a throwaway GPG key and pass store) or as a
plain `auths` entry (what CI's docker/login-action writes). The README's release goes the whole way
through each: the push, the signature, the SOCI index or zstd layers, `manifest`, `verify`,
`policy`. Meanwhile a watcher reads every process's arguments for the password; afterwards the
build's logs, summary, SBOM, the image's labels and history and its attestations are searched for it.

The registry is Debian's docker-registry on 127.0.0.1 with a certificate of the test's own, which
the toolkit's processes trust through SSL_CERT_FILE (as a host trusts a private CA in its store);
the engine treats 127.0.0.0/8 as its own and takes any certificate there."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import session
from tests.engine.conftest import untag
from tests.engine.hosts import running_registry
from tests.engine.images import X86_ARGS, run_build_py, x86_wheelhouse
from torchstack.base import sharing, state
from torchstack.catalog.model import ROOT

pytestmark = pytest.mark.engine

USER = "ci-pusher"
SYSTEM_CAS = Path("/etc/ssl/certs/ca-certificates.crt")


class LoginRegistry:
    """A registry over TLS that takes one user's login (htpasswd): its address, and what a client needs."""

    def __init__(self, folder: Path, address: str, bundle: Path):
        self.folder, self.address, self.bundle = folder, address, bundle
        self.password = ""
        self.secrets: set[bytes] = set()  # every password it took, as given and as an `auths` entry holds it

    def set_password(self, password: str) -> None:
        """The user's password from now on (the registry reads its htpasswd again when it changes)."""
        subprocess.run(
            ["htpasswd", "-iBc", str(self.folder / "htpasswd"), USER], input=password, text=True, check=True, capture_output=True
        )
        self.password = password
        self.secrets |= {password.encode(), base64.b64encode(f"{USER}:{password}".encode())}

    def get(self, path: str, accept: str = "*/*") -> bytes:
        """GET /v2/`path` with the login, as the test's own client."""
        request = urllib.request.Request(f"https://{self.address}/v2/{path}", headers={"Accept": accept})
        request.add_header("Authorization", "Basic " + base64.b64encode(f"{USER}:{self.password}".encode()).decode())
        with urllib.request.urlopen(request, timeout=30, context=ssl.create_default_context(cafile=str(self.bundle))) as answer:
            return answer.read()

    def tags(self, repository: str) -> list[str]:
        try:
            return json.loads(self.get(f"{repository}/tags/list")).get("tags") or []
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return []
            raise


@pytest.fixture(scope="module")
def login_registry(client, tmp_path_factory) -> Iterator[LoginRegistry]:
    """The registry for this module's tests; the names its pushes gave images here are removed afterwards."""
    folder = tmp_path_factory.mktemp("login-registry")
    cert, key = folder / "registry.crt", folder / "registry.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1"]
        + ["-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )
    bundle = folder / "trusted.pem"
    bundle.write_bytes(SYSTEM_CAS.read_bytes() + cert.read_bytes())
    started = LoginRegistry(folder, "", bundle)
    started.set_password(uuid.uuid4().hex)
    with running_registry(folder, auth=True, tls=("127.0.0.1", cert, key, folder / "data")) as address:
        started.address = address
        try:
            yield started
        finally:
            untag(client, f"{address}/")


@contextlib.contextmanager
def pass_store(folder: Path) -> Iterator[dict[str, str]]:
    """A throwaway GPG key and pass store, as `docker-credential-pass` uses them: the environment that
    names them. The GPG agent it starts is stopped afterwards. (GPG's socket path must be short.)"""
    for tool in ("pass", "docker-credential-pass", "gpg", "htpasswd"):
        if not shutil.which(tool):
            pytest.fail(f"{tool} is missing: run scripts/setup-host.sh --tests")
    home = Path(tempfile.mkdtemp(prefix="gpg-", dir="/tmp"))
    env = {"GNUPGHOME": str(home), "PASSWORD_STORE_DIR": str(folder / "pass-store")}
    full = {**os.environ, **env}
    try:
        made = ["gpg", "--batch", "--pinentry-mode", "loopback", "--passphrase", "", "--quick-gen-key", "torchstack-test"]
        subprocess.run([*made, "default", "default", "never"], env=full, check=True, capture_output=True)
        listed = subprocess.run(["gpg", "--list-keys", "--with-colons"], env=full, check=True, capture_output=True, text=True).stdout
        fingerprint = next(line.split(":")[9] for line in listed.splitlines() if line.startswith("fpr:"))
        subprocess.run(["pass", "init", fingerprint], env=full, check=True, capture_output=True)
        yield env
    finally:
        subprocess.run(["gpgconf", "--kill", "all"], env=full, capture_output=True)
        shutil.rmtree(home, ignore_errors=True)


class Watcher:
    """Reads every process's arguments (/proc/PID/cmdline), about every 20 ms, for any of `secrets`
    (a set the test adds to as a password changes)."""

    def __init__(self, secrets: set[bytes]):
        self.secrets, self.seen, self.rounds = secrets, [], 0
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        while not self.stopping.is_set():
            secrets = tuple(self.secrets)
            for entry in Path("/proc").iterdir():
                if not entry.name.isdigit():
                    continue
                try:
                    arguments = (entry / "cmdline").read_bytes()
                except OSError:
                    continue
                if any(secret in arguments for secret in secrets):
                    words = arguments.split(b"\0")[:3]
                    self.seen.append(b" ".join(words).decode(errors="replace"))
            self.rounds += 1
            time.sleep(0.02)

    def __enter__(self) -> Watcher:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopping.set()
        self.thread.join()


def _search(texts: dict[str, bytes], secrets: set[bytes]) -> list[str]:
    return [name for name, text in texts.items() if any(secret in text for secret in secrets)]


def _published_texts(where: LoginRegistry, repository: str, digest: str) -> dict[str, bytes]:
    """What the registry holds about the image `digest`: its manifest, its configuration (labels,
    history), and the payloads of its signature and attestations (the SBOM, the provenance)."""
    manifest = where.get(
        f"{repository}/manifests/{digest}",
        "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json",
    )
    texts = {"manifest": manifest, "config": where.get(f"{repository}/blobs/{json.loads(manifest)['config']['digest']}")}
    for suffix in ("sig", "att"):
        attached = json.loads(
            where.get(f"{repository}/manifests/{digest.replace(':', '-')}.{suffix}", "application/vnd.oci.image.manifest.v1+json")
        )
        for number, layer in enumerate(attached["layers"]):
            body = where.get(f"{repository}/blobs/{layer['digest']}")
            payload = json.loads(body).get("payload") if suffix == "att" else None
            texts[f"{suffix} {number}"] = base64.b64decode(payload) if payload else body
    return texts


def _left_by(summary: dict, run: subprocess.CompletedProcess, began: float) -> dict[str, bytes]:
    """What the build left on the host: its output, its summary, its log, its SBOM, and every file
    of the toolkit's state folder written since `began` (logs, contexts, locks)."""
    texts = {"output": (run.stdout + run.stderr).encode(), "summary": json.dumps(summary).encode()}
    for path in [Path(summary["log"]), *([Path(summary["sbom"])] if summary.get("sbom") else [])]:
        texts[str(path)] = path.read_bytes()
    for path in state.state_dir().rglob("*"):
        if path.is_file() and path.stat().st_mtime >= began:
            texts[str(path)] = path.read_bytes()
    return texts


def _publish(where: LoginRegistry, env: dict, namespace: str, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    summary = Path(env["SUMMARY_DIR"]) / f"{namespace}.json"
    run = run_build_py(
        *X86_ARGS, "--torch-wheel", x86_wheelhouse(), "--registry", f"{where.address}/{namespace}", "--json", str(summary), *extra, env=env
    )
    return run, (json.loads(summary.read_text()) if summary.is_file() else {})


def _image_texts(client, image_id: str) -> dict[str, bytes]:
    image = client.images.get(image_id)
    return {"labels": json.dumps(image.labels).encode(), "history": json.dumps(image.history()).encode()}


def test_a_login_a_credential_helper_keeps_publishes_the_whole_way_and_one_that_stops_working_is_one_line(
    client, x86_build, login_registry, cosign_keys, tmp_path
):
    """`docker login` through docker-credential-pass (the config names the helper; the password is in
    the pass store): --push --push-stages --sign --lazy soci, refused in one line (exit 2) when the
    password changes after the checks passed, with nothing tagged; after a new login the same
    command publishes it all without building again; `verify`, `manifest` and `policy` through it."""
    where = login_registry
    config = tmp_path / "docker-config"
    config.mkdir()
    (config / "config.json").write_text(json.dumps({"credHelpers": {where.address: "pass"}}))
    (tmp_path / "summaries").mkdir()
    with pass_store(tmp_path) as store:
        env = {
            **store,
            **cosign_keys["env"],
            "DOCKER_CONFIG": str(config),
            "SSL_CERT_FILE": str(where.bundle),
            "SUMMARY_DIR": str(tmp_path / "summaries"),
        }

        def docker_login() -> None:
            login = ["docker", "login", "--username", USER, "--password-stdin", where.address]
            done = subprocess.run(login, input=where.password, text=True, capture_output=True, env={**os.environ, **env}, timeout=120)
            assert done.returncode == 0, done.stderr
            assert where.password not in (config / "config.json").read_text(), "the helper, not the config, keeps the password"

        docker_login()
        began = time.time()
        args = ("--push", "--push-stages", "--sign", str(cosign_keys["ours"][0]), "--lazy", "soci")
        lock = f"{x86_build['engine']['url']} {x86_build['final_image']} release"
        with Watcher(where.secrets) as watcher:
            # The checks pass while the test holds the release lock; then the password changes.
            with sharing.lock(state.state_dir() / "locks", lock, lambda _: None):
                summary = tmp_path / "summaries" / "helper.json"
                command = [sys.executable, str(ROOT / "build.py"), *X86_ARGS, "--torch-wheel", x86_wheelhouse()]
                command += ["--registry", f"{where.address}/helper", "--json", str(summary), *args]
                first = session.popen(
                    command, cwd=ROOT, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, **env}
                )
                said = []
                for line in first.stderr:
                    said.append(line)
                    if "waiting for " in line:
                        break
                assert said and "waiting for " in said[-1], "".join(said[-30:])
                old = where.password
                where.set_password(uuid.uuid4().hex)
            out, rest = first.communicate(timeout=1800)
            lines = [line for line in rest.strip().splitlines() if "error" in line]
            assert first.returncode == 2 and "Traceback" not in rest, "".join(said[-20:]) + rest[-3000:]
            assert len(lines) == 1 and lines[0].startswith(f"torchstack: error: the registry {where.address} refuses the login from "), (
                rest[-3000:]
            )
            assert lines[0].endswith(f"log in with `docker login {where.address}` or `podman login {where.address}`"), lines
            assert old not in rest
            # Nothing was pushed under any name: no tag points at a part of it.
            assert not [r for r in ("torchstack", "torchstack-os") if where.tags(f"helper/{r}")]

            docker_login()
            again, published = _publish(where, env, "helper", *args)
            assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-3000:]
            assert {s["status"] for s in published["stages"]} == {"cached"}, "the same command again builds nothing"
            release = published["pushed"][-1]
            assert published["lazy"]["image"] == f"{release['reference'].rpartition(':')[0]}@{release['digest']}"

            public = str(cosign_keys["ours"][1])
            verified = run_build_py("verify", release["reference"], "--key", public, env=env)
            assert verified.returncode == 0, verified.stderr[-2000:]
            assert f"torchstack: {release['digest']} pulls lazily: SOCI index {published['lazy']['index']}, signed" in verified.stderr
            listed = f"{where.address}/helper/torchstack:login-list"
            joined = run_build_py(
                "manifest", listed, release["reference"], "--arch", "x86_64", "--sign", str(cosign_keys["ours"][0]), env=env
            )
            assert joined.returncode == 0, joined.stderr[-2000:]
            assert run_build_py("verify", listed, "--key", public, env=env).returncode == 0
            policy = run_build_py(
                "policy", "--registry", f"{where.address}/helper", "--key", public, "--output", str(tmp_path / "policy"), env=env
            )
            assert policy.returncode == 0, policy.stderr[-2000:]
        assert watcher.rounds > 100 and not watcher.seen, watcher.seen
        left = {**_left_by(published, again, began), **_published_texts(where, "helper/torchstack", release["digest"])}
        left |= _image_texts(client, published["image_id"])
        assert not _search(left, where.secrets), _search(left, where.secrets)
        assert not _search({"policy": b"".join(p.read_bytes() for p in (tmp_path / "policy").rglob("*") if p.is_file())}, where.secrets)


def test_a_plain_auths_login_pushes_zstd_layers_signs_joins_and_verifies(client, x86_build, login_registry, cosign_keys, tmp_path):
    """A login as CI's docker/login-action writes it (`auths`, base64): --push --sign --compression
    zstd (skopeo reads the same config), `manifest`, `verify`; the password nowhere."""
    where = login_registry
    config = tmp_path / "docker-config"
    config.mkdir()
    (config / "config.json").write_text(
        json.dumps({"auths": {where.address: {"auth": base64.b64encode(f"{USER}:{where.password}".encode()).decode()}}})
    )
    (tmp_path / "summaries").mkdir()
    env = {
        **cosign_keys["env"],
        "DOCKER_CONFIG": str(config),
        "SSL_CERT_FILE": str(where.bundle),
        "SUMMARY_DIR": str(tmp_path / "summaries"),
    }
    began = time.time()
    with Watcher(where.secrets) as watcher:
        run, published = _publish(where, env, "plain", "--push", "--sign", str(cosign_keys["ours"][0]), "--compression", "zstd")
        assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
        release = published["pushed"][-1]
        public = str(cosign_keys["ours"][1])
        verified = run_build_py("verify", release["reference"], "--key", public, env=env)
        assert verified.returncode == 0, verified.stderr[-2000:]
        listed = f"{where.address}/plain/torchstack:login-list"
        joined = run_build_py("manifest", listed, release["reference"], "--arch", "x86_64", "--sign", str(cosign_keys["ours"][0]), env=env)
        assert joined.returncode == 0, joined.stderr[-2000:]
        assert run_build_py("verify", listed, "--key", public, env=env).returncode == 0
    assert watcher.rounds > 100 and not watcher.seen, watcher.seen
    manifest = json.loads(where.get(f"plain/torchstack/manifests/{release['digest']}", "application/vnd.oci.image.manifest.v1+json"))
    assert {layer["mediaType"] for layer in manifest["layers"]} == {"application/vnd.oci.image.layer.v1.tar+zstd"}
    left = {**_left_by(published, run, began), **_published_texts(where, "plain/torchstack", release["digest"])}
    left |= _image_texts(client, published["image_id"])
    assert not _search(left, where.secrets), _search(left, where.secrets)
