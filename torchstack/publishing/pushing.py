"""One checked image pushed into a registry by its ID, under the name it gets there.

A push shows its progress, tries again on a transient failure, says a refusal in one line.
Credentials are the engine's: Docker's come from the Docker config (`docker login`, credential
helpers) as the Docker SDK reads it, and reach the engine in its API's header, never on a command
line; skopeo and the engines' CLIs read the same files themselves. Nothing here prints them."""

from __future__ import annotations

import re
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from torchstack.base.errors import ToolkitError
from torchstack.engines.engine import Engine, EngineRefused
from torchstack.registries import registry
from torchstack.registries.logins import LoginRefused

# What a registry or the network says when trying again may help, and when it cannot.
_TRANSIENT = re.compile(
    r"connection reset|connection refused|broken pipe|i/o timeout|timeout|EOF|temporar|"
    r"50[0234]|too many requests|429|net/http: request canceled",
    re.IGNORECASE,
)
_AUTH = re.compile(r"unauthorized|authentication required|no basic auth credentials|denied|forbidden", re.IGNORECASE)
_TLS = re.compile(r"x509|certificate|tls:|HTTP response to HTTPS client", re.IGNORECASE)
ATTEMPTS = 3
# The layers a push of the engine's own compression sends.
GZIP_LAYERS = {"application/vnd.docker.image.rootfs.diff.tar.gzip", "application/vnd.oci.image.layer.v1.tar+gzip"}
# What a refused skopeo call tells the user to do: it reads the logins Docker's config holds.
SKOPEO_LOGIN = "log in with `docker login {host}` (credentials are read from the Docker config)"


class PushFailed(ToolkitError):
    """The registry refused the push, or it failed after every retry."""


@dataclass(frozen=True)
class Pushed:
    reference: str  # registry/namespace/repository:tag
    digest: str  # the manifest's sha256, as the registry reported it
    layers: int | None  # None: the engine told none (Podman's API reports the digest alone)
    already_there: int  # layers the registry had before this push
    attempts: int


def push(
    engine: Engine,
    local: str,
    remote: str,
    say: Callable[[str], None],
    zstd: bool = False,
    scratch: Path | None = None,
) -> Pushed:
    """Tag `local` (an image's name or ID) as `remote` on `engine` and push it, trying again on a
    transient failure; the engine says what a refusal's line tells the user to do. With `zstd`,
    skopeo copies it from the engine's export with zstd layers instead (`_push_zstd`), its export in
    `scratch` (the run's private folder)."""
    repository, _, tag = remote.rpartition(":")
    image = engine.image(local)
    engine.tag(image.id, remote)
    host = repository.split("/", 1)[0]
    if zstd:
        return _push_zstd(engine, image.id, remote, say, scratch)
    if not engine.push_streams_layers:
        say(f"torchstack: pushing {remote} ({engine.kind.capitalize()}'s API says nothing more until the push is done)")
    for attempt in range(1, ATTEMPTS + 1):
        try:
            digest, layers, already = _push_once(engine, repository, tag, say)
            if not engine.push_streams_layers:  # Podman: the digest alone, checked here
                _as_checked(f"{repository}@{digest}", image.id, say)
            return Pushed(remote, digest, len(layers) or None, len(already), attempt)
        except (EngineRefused, _RegistrySaid, OSError) as problem:
            message = _one_line(problem)
            if _AUTH.search(message):
                raise _refused(host, f"the push of {remote}", message, engine.login_hint(host)) from None
            if _TLS.search(message):
                raise PushFailed(f"push of {remote} failed on TLS: {message}; {engine.tls_hint(host)}") from None
            if attempt == ATTEMPTS or not _TRANSIENT.search(message):
                raise PushFailed(f"push of {remote} failed after {attempt} attempt(s): {message}") from None
            wait = 2**attempt
            say(f"torchstack: push of {remote}: {message}; trying again in {wait} s ({attempt}/{ATTEMPTS})")
            time.sleep(wait)
    raise AssertionError("unreachable")


def _push_zstd(engine: Engine, image: str, remote: str, say: Callable[[str], None], scratch: Path | None) -> Pushed:
    """`image` (the engine's, tagged `remote`) copied to its registry by skopeo with zstd layers, as an
    OCI manifest: exported by the engine (the SDK's `docker save`, whose API version the SDK agrees
    with the engine: skopeo's own `docker-daemon:` client asks for API 1.22, which Docker 29 refuses),
    compressed afresh into an OCI layout, then pushed as it is (--preserve-digests). In one copy,
    bookworm's skopeo (1.9) sends a gzip blob instead of compressing a layer wherever its blob cache,
    which root's Podman shares, knows the registry holds one of the same content; and a push through
    the engine would send its gzip layers."""
    host = remote.split("/", 1)[0]
    say(f"torchstack: pushing {remote} with zstd layers (skopeo compresses each layer of the engine's export)")
    tls = ["--dest-tls-verify=false"] if registry.is_loopback(host) else []
    with tempfile.TemporaryDirectory(prefix="torchstack-zstd-", dir=scratch) as work:
        exported = Path(work) / "image.tar"
        with exported.open("wb") as out:
            for chunk in engine.save(image):
                out.write(chunk)
        layout, digest_file = f"oci:{Path(work) / 'layout'}:image", Path(work) / "digest"
        compress = ["--quiet", "--format", "oci", "--dest-compress-format", "zstd"]
        _cli("skopeo", "copy", *compress, f"docker-archive:{exported}", layout)
        exported.unlink()
        send = ["--quiet", "--retry-times", str(ATTEMPTS), "--preserve-digests", "--digestfile", str(digest_file), *tls]
        _cli("skopeo", "copy", *send, layout, f"docker://{remote}")
        digest = digest_file.read_text().strip()
    return Pushed(remote, digest, None, 0, 1)


def _as_checked(pushed: str, image_id: str, say: Callable[[str], None]) -> None:
    """Refuses in one line a Podman push that the registry holds as another image than the checked
    one. Podman before 4.6 sends, in place of a layer's gzip blob, a blob of the same content that
    its blob-info cache (shared with skopeo: after a --compression zstd push, say) knows the
    registry holds with other compression, and then rewrites the manifest as OCI with another
    configuration. Not read back: said in a line, and the push stands."""
    reference = registry.parse(pushed)
    try:
        _, manifest = registry.Registry(reference.host).manifest(reference)
    except registry.RegistryProblem as problem:
        say(f"torchstack: {pushed} could not be read back to compare it with the checked image: {problem}")
        return
    config = manifest.get("config", {}).get("digest")
    others = sorted({layer.get("mediaType", "?") for layer in manifest.get("layers", [])} - GZIP_LAYERS)
    if config == image_id and not others:
        return
    raise PushFailed(
        f"{pushed} is not the checked image {image_id}: the registry holds configuration {config}"
        + (f" and {', '.join(others)} layers" if others else "")
        + "; Podman before 4.6 sends a layer the registry already holds with other compression (its blob-info cache "
        "names it) and rewrites the image: remove blob-info-cache-v1.boltdb from /var/lib/containers/cache "
        "(~/.local/share/containers/cache for a rootless Podman) and push again"
    )


def _refused(host: str, what: str, message: str, log_in: str) -> LoginRefused:
    """A registry that refused the login, at any step of publishing (exit 2): what to do, and that
    the same command again reuses what was built and checked. A registry never tags an image whose
    blobs it lacks: what the step had sent is under no name."""
    return LoginRefused(
        f"the registry {host} refused the login for {what} ({message}): {log_in}, "
        "then run the same command again (what was built and checked is reused)"
    )


class _RegistrySaid(Exception):
    """An error the engine streamed back in the middle of a push."""


def _push_once(engine: Engine, repository: str, tag: str, say: Callable[[str], None]) -> tuple[str, set, set]:
    layers: set[str] = set()
    done: set[str] = set()
    already: set[str] = set()
    digest = ""
    said, said_at = 0, 0.0
    for event in engine.push(repository, tag):
        if "error" in event:
            raise _RegistrySaid(event.get("errorDetail", {}).get("message") or event["error"])
        status, layer = event.get("status", ""), event.get("id")
        if layer and status in ("Preparing", "Waiting", "Pushing", "Pushed", "Layer already exists", "Mounted from"):
            layers.add(layer)
        if layer and (status in ("Pushed", "Layer already exists") or status.startswith("Mounted from")):
            done.add(layer)
            if status != "Pushed":
                already.add(layer)
        found = re.search(r"digest: (sha256:[0-9a-f]{64})", status)
        if found:
            digest = found[1]
        now = time.monotonic()
        if len(done) != said and (now - said_at > 5 or len(done) == len(layers)):
            say(
                f"torchstack: pushing {repository}:{tag}: {len(done)}/{len(layers)} layers"
                + (f" ({len(already)} already there)" if already else "")
            )
            said, said_at = len(done), now
    if not digest:
        raise _RegistrySaid("the engine reported no manifest digest")
    return digest, layers, already


def _one_line(problem: BaseException) -> str:
    return " ".join(str(problem).split())[:300]


def _cli(tool: str, *args: str) -> str:
    """Run a registry tool's CLI (skopeo, which reads the logins the engines read); its failure as one line."""
    try:
        result = subprocess.run([tool, *args], capture_output=True, text=True)
    except FileNotFoundError:
        raise PushFailed(f"`{tool} {args[0]}` is needed, and {tool}'s CLI is not installed") from None
    if result.returncode != 0:
        message = " ".join(result.stderr.split())[:300]
        if _AUTH.search(message):
            host = args[-1].removeprefix("docker://").split("/", 1)[0]
            raise _refused(host, f"{tool} {' '.join(args[:2])}", message, SKOPEO_LOGIN.format(host=host))
        raise PushFailed(f"{tool} {' '.join(args[:2])} {args[-1]} failed: {message}")
    return result.stdout
