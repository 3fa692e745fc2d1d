"""Reads an image's manifest, its configuration from a registry's HTTP API, without pulling its layers."""

from __future__ import annotations

import base64
import ipaddress
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

import requests

from torchstack.errors import ToolkitError, UsageProblem

# Both generations of image manifests and lists: Docker's and OCI's.
ACCEPT = ", ".join(
    [
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    ]
)
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_LOG_IN = "log in with `docker login {host}` or `podman login {host}`"


def is_loopback(host: str) -> bool:
    name = host.rsplit(":", 1)[0].strip("[]") if host.count(":") <= 1 or host.startswith("[") else host
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


class RegistryProblem(ToolkitError):
    """The registry could not be read, or does not hold what was named."""


@dataclass(frozen=True)
class Reference:
    host: str
    repository: str
    tag: str | None
    digest: str | None

    @property
    def name(self) -> str:
        return f"{self.host}/{self.repository}"

    def __str__(self) -> str:
        return self.name + (f":{self.tag}" if self.tag else "") + (f"@{self.digest}" if self.digest else "")


def parse(text: str) -> Reference:
    """HOST/REPOSITORY[:TAG][@sha256:DIGEST]; the host is required (an image checked here is in a registry)."""
    rest, _, digest = text.partition("@")
    host, _, path = rest.partition("/")
    if not path or not ("." in host or ":" in host or host == "localhost"):
        raise UsageProblem(f"{text}: name the registry too (HOST[:PORT]/REPOSITORY:TAG, or @sha256:...)")
    repository, _, tag = path.rpartition(":") if ":" in path.rsplit("/", 1)[-1] else (path, "", "")
    if digest and not DIGEST.fullmatch(digest):
        raise UsageProblem(f"{text}: a digest is sha256: and 64 hex digits")
    if not tag and not digest:
        tag = "latest"
    return Reference(host, repository, tag or None, digest or None)


def _auth_files() -> list[Path]:
    """Where logins are stored, in the order Podman and skopeo read them: REGISTRY_AUTH_FILE,
    Podman's auth.json (`podman login`), then the Docker config (`docker login`)."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    podman = Path(runtime, "containers") if runtime else Path(f"/run/containers/{os.getuid()}")
    docker = Path(os.environ.get("DOCKER_CONFIG", Path.home() / ".docker"))
    named = os.environ.get("REGISTRY_AUTH_FILE")
    return [*([Path(named)] if named else []), podman / "auth.json", docker / "config.json"]


def stored_login(host: str) -> tuple[str, str] | None:
    """The user and password a login to `host` stored (`_auth_files`), if one stored them there."""
    for path in _auth_files():
        try:
            entry = json.loads(path.read_text()).get("auths", {}).get(host, {})
        except (OSError, ValueError):
            continue
        if entry.get("auth"):
            user, _, password = base64.b64decode(entry["auth"]).decode().partition(":")
            return user, password
    return None


def _credential_helper(host: str) -> bool:
    """Whether a Docker config names a credential helper (`credsStore`, `credHelpers`) that may hold
    the login to `host`: the engine's CLI asks it, this module does not."""
    for path in _auth_files():
        try:
            config = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if config.get("credsStore") or host in config.get("credHelpers", {}):
            return True
    return False


class Registry:
    """One registry host, over HTTPS (plain HTTP on loopback, as the engine allows), with the
    login Podman or Docker stored and the token the registry asks for."""

    def __init__(self, host: str):
        self.host = host
        self.base = f"{'http' if is_loopback(host) else 'https'}://{host}/v2"
        self.session = requests.Session()
        self.auth = stored_login(host)

    def _get(self, path: str, accept: str = "*/*") -> requests.Response:
        url = f"{self.base}/{path}"
        try:
            answer = self.session.get(url, headers={"Accept": accept}, timeout=60)
            if answer.status_code == 401 and "Bearer" in answer.headers.get("WWW-Authenticate", ""):
                self._token(answer.headers["WWW-Authenticate"])
                answer = self.session.get(url, headers={"Accept": accept}, timeout=60)
            elif answer.status_code == 401 and self.auth:
                answer = self.session.get(url, headers={"Accept": accept}, auth=self.auth, timeout=60)
        except requests.RequestException as exc:
            raise RegistryProblem(f"{self.host}: {' '.join(str(exc).split())[:200]}") from None
        if answer.status_code == 404:
            raise RegistryProblem(f"{self.host}/{path.replace('/manifests/', ':', 1)}: not in the registry")
        if answer.status_code >= 400:
            raise RegistryProblem(f"{self.host}: {answer.status_code} for {path} (" + _LOG_IN.format(host=self.host) + ")")
        return answer

    def _token(self, challenge: str) -> None:
        fields = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
        params = {k: v for k, v in fields.items() if k in ("service", "scope")}
        answer = requests.get(fields.get("realm", ""), params=params, auth=self.auth, timeout=60)
        if answer.status_code >= 400:
            raise RegistryProblem(f"{self.host}: no token ({answer.status_code}); " + _LOG_IN.format(host=self.host))
        token = answer.json().get("token") or answer.json().get("access_token")
        self.session.headers["Authorization"] = f"Bearer {token}"

    def manifest(self, reference: Reference) -> tuple[str, dict]:
        """The digest and the manifest (or list) `reference` names now."""
        answer = self._get(f"{reference.repository}/manifests/{reference.digest or reference.tag}", ACCEPT)
        digest = answer.headers.get("Docker-Content-Digest") or reference.digest
        return digest, answer.json()

    def referrers(self, repository: str, digest: str) -> list[dict]:
        """The descriptors of what refers to `digest` (OCI 1.1 artifacts whose subject it is: a SOCI
        index, say): from the referrers API, or where a registry lacks it (Distribution 2.8) from the
        referrers tag (`sha256-HEX`) that pushers keep instead. Empty where neither names any."""
        api, tag = f"{repository}/referrers/{digest}", f"{repository}/manifests/{digest.replace(':', '-')}"
        for path in (api, tag):
            try:
                answer = self._get(path, "application/vnd.oci.image.index.v1+json")
            except RegistryProblem as exc:
                if path == api or "not in the registry" in str(exc):  # no such API (404, 405): the tag
                    continue
                raise
            if answer.headers.get("Content-Type", "").startswith("application/vnd.oci.image.index.v1+json"):
                return answer.json().get("manifests") or []
        return []

    def config(self, repository: str, manifest: dict) -> dict:
        """An image manifest's configuration (its labels under config.Labels)."""
        return self._get(f"{repository}/blobs/{manifest['config']['digest']}").json()


def check_push_access(remote: str) -> None:
    """Before any work: the registry of `remote` (HOST[:PORT]/REPOSITORY:TAG, the first image a push
    sends) answers, and takes the login this host stored for a push to that repository. One line
    (exit 2) where it does not; a registry that needs no login passes."""
    ref = parse(remote)
    where = Registry(ref.host)
    schemes = [where.base] if is_loopback(ref.host) else [where.base, where.base.replace("https://", "http://", 1)]
    answer, reasons = None, []
    for base in schemes:
        try:
            answer = where.session.get(f"{base}/", timeout=15)
            break
        except requests.RequestException as exc:
            reasons.append(_why_not_reached(exc))
    if answer is None:
        raise UsageProblem(f"--push: the registry {ref.host} does not answer ({reasons[-1]}): check --registry, or start the registry")
    if answer.status_code < 400:
        return
    log_in = _LOG_IN.format(host=ref.host)
    if answer.status_code != 401:
        raise UsageProblem(f"--push: the registry {ref.host} answers {answer.status_code} at {answer.url}: is it a registry? ({log_in})")
    if where.auth is None:
        if _credential_helper(ref.host):
            return  # the login is in a credential helper's keeping, which the engine asks at the push
        raise UsageProblem(f"--push: the registry {ref.host} asks for a login and this host stored none: {log_in}")
    challenge = answer.headers.get("WWW-Authenticate", "")
    if "Bearer" in challenge:
        fields = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
        params = {"service": fields.get("service", ""), "scope": f"repository:{ref.repository}:push,pull"}
        try:
            checked = requests.get(fields.get("realm", ""), params=params, auth=where.auth, timeout=15)
        except requests.RequestException as exc:
            raise UsageProblem(f"--push: {ref.host}'s login service does not answer ({_why_not_reached(exc)})") from None
    else:
        checked = where.session.get(answer.url, auth=where.auth, timeout=15)
    if checked.status_code >= 400:
        raise UsageProblem(f"--push: the registry {ref.host} refuses this host's login ({checked.status_code}): {log_in}")


def _why_not_reached(exc: requests.RequestException) -> str:
    """Why a request got no answer, in a few words rather than urllib3's nested repr."""
    text = str(exc)
    for marker, said in (
        ("NameResolutionError", "its name does not resolve"),
        ("Connection refused", "connection refused"),
        ("timed out", "no answer in 15 s"),
        ("SSLError", "no TLS"),
    ):
        if marker in text or marker in type(exc).__name__:
            return said
    return " ".join(text.split())[:120]
