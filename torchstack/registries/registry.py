"""A registry's HTTP API, spoken as the engines speak it (their logins, their TLS trust), with no engine in between.

Reads manifests, configurations and blobs, writes blobs and manifests: what the checks after a push,
`verify`, a rebuild that changed nothing and a SOCI index need (logins.py finds the login)."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import requests

from torchstack.base.errors import ToolkitError, UsageProblem
from torchstack.registries.http_auth import authorization, is_loopback, realm_refused, same_origin
from torchstack.registries.logins import LOG_IN, Login, LoginRefused, Trusting, login_for, tls_context

# Both generations of image manifests and lists: Docker's and OCI's.
ACCEPT = ", ".join(
    [
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    ]
)
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


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


def digest_of(data: bytes) -> str:
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


class NotInRegistry(RegistryProblem):
    """The registry answers 404: it holds no such manifest or blob."""


class Registry:
    """One registry host, over HTTPS as the engines reach it (plain HTTP only on loopback, where
    HTTPS does not answer: the engines' default for 127.0.0.0/8), with the login this host keeps
    for it (`login_for`) and the token the registry asks for."""

    def __init__(self, host: str):
        self.host = host
        self.session = requests.Session()
        self.session.mount("https://", Trusting(tls_context(host)))
        self._basic = False  # the registry asked for the login itself, not a token
        self._bearer = ""  # the token the registry's own token service issued
        self._scheme: str | None = None

    @functools.cached_property
    def login(self) -> Login | None:
        """Asked for only when the registry asks for a login: a public registry asks no helper."""
        return login_for(self.host)

    @property
    def base(self) -> str:
        if self._scheme is None:
            self._scheme = self._reach()
        return f"{self._scheme}://{self.host}/v2"

    def _reach(self) -> str:
        """https where the registry answers it; on loopback, else plain http (as the engines do)."""
        try:
            self.session.get(f"https://{self.host}/v2/", timeout=15)
            return "https"
        except requests.exceptions.SSLError as exc:
            if not is_loopback(self.host):
                raise RegistryProblem(_tls_failed(self.host, exc)) from None
            tls = exc
        except requests.RequestException as exc:
            if not is_loopback(self.host):
                raise RegistryProblem(f"the registry {self.host} does not answer ({_why_not_reached(exc)})") from None
            tls = None
        try:
            answer = self.session.get(f"http://{self.host}/v2/", timeout=15)
        except requests.RequestException as exc:
            raise RegistryProblem(f"the registry {self.host} does not answer ({_why_not_reached(exc)})") from None
        if tls is not None and answer.status_code == 400 and "HTTPS" in answer.text:
            raise RegistryProblem(_tls_failed(self.host, tls))
        return "http"

    def request(self, method: str, path: str, accept: str = "*/*", **options) -> requests.Response:
        """`method` on `path` (under /v2/, or a whole URL the registry gave), with the login or token
        the registry asks for. 404 is NotInRegistry, a refused login LoginRefused, any other error
        RegistryProblem: each one line, never with the secret."""
        url = path if "://" in path else f"{self.base}/{path}"
        headers = {"Accept": accept, **options.pop("headers", {})}
        try:
            answer = self.session.request(method, url, headers={**headers, **self._credential(url)}, timeout=120, **options)
            if answer.status_code == 401 and same_origin(url, self.base) and self._authenticate(answer.headers.get("WWW-Authenticate", "")):
                answer = self.session.request(method, url, headers={**headers, **self._credential(url)}, timeout=120, **options)
        except requests.RequestException as exc:
            raise RegistryProblem(f"{self.host}: {_why_not_reached(exc)}") from None
        where = (path.split("?")[0] or "/v2/") if "://" not in path else "an upload"
        if answer.status_code == 401:
            raise LoginRefused(self._refused(f"{answer.status_code} for {where}"))
        if answer.status_code == 404:
            raise NotInRegistry(f"{self.host}/{where.replace('/manifests/', ':', 1)}: not in the registry")
        if answer.status_code >= 400:
            said = " ".join(answer.text.split())[:160]
            raise RegistryProblem(f"{self.host}: {answer.status_code} for {method} {where}" + (f" ({said})" if said else ""))
        return answer

    def _credential(self, url: str) -> dict[str, str]:
        """The Authorization for `url`, none where it is not this registry's (a redirect elsewhere
        loses it too: requests' `Session.rebuild_auth`)."""
        return authorization(url, self.base, self._bearer, self.login if self._basic else None)

    def _refused(self, what: str) -> str:
        if self.login is None:
            return f"the registry {self.host} asks for a login ({what}) and this host keeps none: " + LOG_IN.format(host=self.host)
        return f"the registry {self.host} refuses the login from {self.login.source} ({what}): " + LOG_IN.format(host=self.host)

    def _authenticate(self, challenge: str) -> bool:
        """Answer a 401's challenge: a Bearer token from the registry's token service (with the
        login, where this host keeps one), or the login itself; False where there is nothing to try."""
        if challenge.lower().startswith("bearer"):
            self._bearer = self._token(challenge)
            return True
        if self.login and not self._basic:
            self._basic = True
            return True
        return False

    def _token(self, challenge: str, scope: str | None = None) -> str:
        fields = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
        params = {"service": fields.get("service", ""), "scope": scope or fields.get("scope", "")}
        realm = fields.get("realm", "")
        if why := realm_refused(realm):
            raise RegistryProblem(f"{self.host}: {why}")
        try:
            if self.login and self.login.identity_token:  # OAuth2's refresh-token grant (distribution's token spec)
                form = {**params, "grant_type": "refresh_token", "refresh_token": self.login.identity_token, "client_id": "torchstack"}
                answer = requests.post(realm, data=form, timeout=60)
            else:
                login = (self.login.username, self.login.password) if self.login else None
                answer = self.session.get(realm, params=params, auth=login, timeout=60)
        except requests.RequestException as exc:
            raise RegistryProblem(f"{self.host}'s token service does not answer ({_why_not_reached(exc)})") from None
        if answer.status_code >= 400:
            raise LoginRefused(self._refused(f"no token: {answer.status_code}"))
        try:
            body = answer.json()
            return str(body.get("token") or body.get("access_token") or "")
        except (ValueError, AttributeError):
            kind = answer.headers.get("Content-Type", "no Content-Type").split(";")[0]
            raise RegistryProblem(f"{self.host}'s token service {urlsplit(realm).hostname} answers {kind}, not JSON with a token") from None

    def manifest(self, reference: Reference) -> tuple[str, dict]:
        """The digest and the manifest (or list) `reference` names now."""
        digest, _, body = self.manifest_bytes(reference.repository, reference.digest or reference.tag or "latest")
        return digest, json.loads(body)

    def manifest_bytes(self, repository: str, name: str) -> tuple[str, str, bytes]:
        """The digest, media type and bytes (as the registry holds them) of a manifest, by tag or digest."""
        answer = self.request("GET", f"{repository}/manifests/{name}", ACCEPT)
        digest, said = digest_of(answer.content), answer.headers.get("Docker-Content-Digest")
        if DIGEST.fullmatch(name) and digest != name:
            raise RegistryProblem(f"{self.host}/{repository}@{name}: the registry answered other bytes ({digest})")
        if said and said != digest:
            raise RegistryProblem(f"{self.host}/{repository}:{name}: the registry says its digest is {said[:80]!r}, its bytes are {digest}")
        return digest, answer.headers.get("Content-Type", "").split(";")[0], answer.content

    def referrers(self, repository: str, digest: str) -> list[dict]:
        """The descriptors of what refers to `digest` (OCI 1.1 artifacts whose subject it is: a SOCI
        index, say): from the referrers API, or where a registry lacks it (Distribution 2.8) from the
        referrers tag (`sha256-HEX`) that pushers keep instead. Empty where neither names any."""
        api, tag = f"{repository}/referrers/{digest}", f"{repository}/manifests/{referrers_tag(digest)}"
        for path in (api, tag):
            try:
                answer = self.request("GET", path, OCI_INDEX)
            except RegistryProblem as exc:
                if path == api or isinstance(exc, NotInRegistry):
                    continue  # no such API (404, 405): the tag
                raise
            if answer.headers.get("Content-Type", "").startswith(OCI_INDEX):
                return answer.json().get("manifests") or []
        return []

    def config(self, repository: str, manifest: dict) -> dict:
        """An image manifest's configuration (its labels under config.Labels)."""
        return self.request("GET", f"{repository}/blobs/{self._named(repository, manifest['config'])}").json()

    def fetch_blob(self, repository: str, descriptor: dict, folder: Path) -> None:
        """The blob `descriptor` names, into `folder`/sha256/HEX (an OCI layout's blobs), checked against its digest."""
        target = folder / "sha256" / self._named(repository, descriptor).removeprefix("sha256:")
        if target.is_file():
            return
        answer = self.request("GET", f"{repository}/blobs/{descriptor['digest']}", stream=True)
        checked, partial = hashlib.sha256(), target.with_suffix(".part")
        target.parent.mkdir(parents=True, exist_ok=True)
        with answer, partial.open("wb") as out:
            for chunk in answer.iter_content(1 << 20):
                checked.update(chunk)
                out.write(chunk)
        if f"sha256:{checked.hexdigest()}" != descriptor["digest"]:
            partial.unlink()
            raise RegistryProblem(f"{self.host}/{repository}: blob {descriptor['digest']} arrived as other bytes")
        partial.rename(target)

    def put_blob(self, repository: str, data: bytes) -> str:
        """`data` as a blob of `repository` (where it is not there already); its digest."""
        digest = digest_of(data)
        try:
            self.request("HEAD", f"{repository}/blobs/{digest}")
            return digest
        except NotInRegistry:
            pass
        location = self._upload(self.request("POST", f"{repository}/blobs/uploads/"))
        separator = "&" if "?" in location else "?"
        octets = {"Content-Type": "application/octet-stream"}
        self.request("PUT", f"{location}{separator}digest={digest}", data=data, headers=octets)
        return digest

    def mount_blob(self, repository: str, digest: str, source: str) -> bool:
        """The blob `digest` of repository `source` lent to `repository` too (no bytes moved), where the
        registry does so: False where it started an upload instead (which is cancelled)."""
        answer = self.request("POST", f"{repository}/blobs/uploads/?mount={digest}&from={source}")
        if answer.status_code == 201:
            return True
        with contextlib.suppress(RegistryProblem):
            self.request("DELETE", self._upload(answer))
        return False

    def _upload(self, started: requests.Response) -> str:
        """The whole URL of the upload a POST started (its Location, which may be on another host)."""
        if "Location" not in started.headers:
            raise RegistryProblem(f"{self.host}: an upload started with no Location to send it to")
        return urljoin(started.url, started.headers["Location"])

    def _named(self, repository: str, descriptor: dict) -> str:
        """The digest a manifest's descriptor names, where it is one (sha256: and 64 hex digits): it becomes a file name."""
        digest = descriptor.get("digest") if isinstance(descriptor, dict) else None
        if not isinstance(digest, str) or not DIGEST.fullmatch(digest):
            raise RegistryProblem(f"{self.host}/{repository}: a manifest names {str(digest)[:80]!r}, not a sha256 digest")
        return digest

    def put_manifest(self, repository: str, name: str, body: bytes, media_type: str) -> bool:
        """A manifest under `name` (a tag, or its digest); whether the registry took its subject into
        its referrers API (OCI 1.1's OCI-Subject answer): else a pusher keeps the referrers tag."""
        answer = self.request("PUT", f"{repository}/manifests/{name}", data=body, headers={"Content-Type": media_type})
        return "OCI-Subject" in answer.headers

    def add_referrer(self, repository: str, subject: str, descriptor: dict) -> None:
        """`descriptor` listed in the referrers tag of `subject` (the distribution spec's fallback for a
        registry without the referrers API), beside what the tag lists already."""
        tag = referrers_tag(subject)
        try:
            _, _, body = self.manifest_bytes(repository, tag)
            listed = json.loads(body)
        except NotInRegistry:
            listed = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": []}
        if any(entry.get("digest") == descriptor["digest"] for entry in listed.get("manifests") or []):
            return
        listed["manifests"] = [*(listed.get("manifests") or []), descriptor]
        self.put_manifest(repository, tag, json.dumps(listed, separators=(",", ":")).encode(), OCI_INDEX)

    def copy_to_layout(self, reference: Reference, folder: Path) -> dict:
        """The image `reference` names (a list with every image in it) into the OCI layout `folder`:
        its manifests and blobs, each checked against its digest. The descriptor of its top manifest."""
        blobs = folder / "blobs"

        def manifest(name: str) -> dict:
            digest, media_type, body = self.manifest_bytes(reference.repository, name)
            (blobs / "sha256").mkdir(parents=True, exist_ok=True)
            (blobs / "sha256" / digest.removeprefix("sha256:")).write_bytes(body)
            parsed = json.loads(body)
            for entry in parsed.get("manifests") or []:
                manifest(self._named(reference.repository, entry))
            for blob in [parsed["config"], *parsed.get("layers", [])] if "config" in parsed else []:
                self.fetch_blob(reference.repository, blob, blobs)
            return {"mediaType": media_type or parsed.get("mediaType", ""), "digest": digest, "size": len(body)}

        top = manifest(reference.digest or reference.tag or "latest")
        (folder / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
        return top


def plain_http(host: str) -> bool:
    """Whether `host` is a registry on loopback that answers plain HTTP, not HTTPS."""
    try:
        return is_loopback(host) and Registry(host).base.startswith("http:")
    except RegistryProblem:
        return is_loopback(host)


def referrers_tag(digest: str) -> str:
    """The tag under which a registry without the referrers API lists what refers to `digest`."""
    return digest.replace(":", "-")


def _tls_failed(host: str, exc: requests.RequestException) -> str:
    """Why HTTPS to `host` failed, and what to do: trust its CA, or (speaking no TLS at all) serve it
    over TLS: a registry other than loopback is reached over HTTPS only, never sent a login in clear."""
    why = _why_not_reached(exc)
    if why == "no TLS":
        return f"the registry {host} speaks no TLS: the toolkit reaches a registry other than loopback over HTTPS only"
    where = f"the system's CA store, or /etc/docker/certs.d/{host}/ca.crt"
    return f"the registry {host} fails TLS ({why}): give this host the registry's CA ({where})"


def check_push_access(remote: str) -> None:
    """Before any work: the registry of `remote` (HOST[:PORT]/REPOSITORY:TAG, the first image a push
    sends) answers, and takes the login this host keeps for a push to that repository (a helper's
    too). One line (exit 2) where it does not; a registry that needs no login passes."""
    ref = parse(remote)
    where = Registry(ref.host)
    try:
        answer = where.session.get(f"{where.base}/", timeout=15)
    except RegistryProblem as exc:
        raise UsageProblem(f"--push: {exc}" + ("" if "TLS" in str(exc) else ": check --registry, or start the registry")) from None
    except requests.RequestException as exc:
        raise UsageProblem(f"--push: the registry {ref.host} does not answer ({_why_not_reached(exc)})") from None
    if answer.status_code < 400:
        return
    log_in = LOG_IN.format(host=ref.host)
    if answer.status_code != 401:
        raise UsageProblem(f"--push: the registry {ref.host} answers {answer.status_code} at {answer.url}: is it a registry? ({log_in})")
    if where.login is None:
        raise UsageProblem(f"--push: the registry {ref.host} asks for a login and this host stored none: {log_in}")
    challenge = answer.headers.get("WWW-Authenticate", "")
    try:
        if challenge.lower().startswith("bearer"):
            where._token(challenge, scope=f"repository:{ref.repository}:push,pull")
        else:
            where._basic = True
            where.request("GET", "")
    except (RegistryProblem, LoginRefused) as exc:
        raise UsageProblem(f"--push: {exc}") from None


def _why_not_reached(exc: requests.RequestException) -> str:
    """Why a request got no answer, in a few words rather than urllib3's nested repr."""
    text = str(exc)
    for marker, said in (
        ("NameResolutionError", "its name does not resolve"),
        ("Connection refused", "connection refused"),
        ("timed out", "no answer in 15 s"),
        ("CERTIFICATE_VERIFY_FAILED", "its certificate is not one this host trusts"),
        ("WRONG_VERSION_NUMBER", "no TLS"),  # a plain-HTTP server's answer to a TLS hello
        ("SSLError", "TLS handshake failed"),
    ):
        if marker in text or marker in type(exc).__name__:
            return said
    return " ".join(text.split())[:120]
