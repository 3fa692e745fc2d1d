"""Pinned sources: fetched on the host (upstream or a mirror), verified, cached."""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import time
import urllib.error
import urllib.parse
import urllib.request
from http.client import HTTPException, InvalidURL
from pathlib import Path

from torchstack.base import redact, state
from torchstack.base.errors import ChecksumMismatch, ToolkitError, UsageProblem
from torchstack.catalog.component import Source
from torchstack.registries.http_auth import is_loopback
from torchstack.request.plan import Plan

ATTEMPTS = 4
TIMEOUT_SECONDS = 60


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def download(url: str, dest: Path) -> None:
    """Download `url` to `dest`, all or nothing: a broken or short transfer is retried, and
    `dest` appears only once the whole file has arrived."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_name(f".{dest.name}.{os.getpid()}.partial")
    try:
        _download(url, partial)
        os.replace(partial, dest)
    finally:
        partial.unlink(missing_ok=True)


def _request(url: str) -> urllib.request.Request:
    """The request for `url`, a login in it (https://USER:PASSWORD@host/...) sent as Basic auth to that URL
    alone: urllib carries an unredirected header to no other, so a redirect, wherever it leads, gets none."""
    parts = urllib.parse.urlsplit(url)
    request = urllib.request.Request(redact.without_login(url))
    if parts.username is not None:
        login = f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
        request.add_unredirected_header("Authorization", "Basic " + base64.b64encode(login.encode()).decode())
    return request


def _download(url: str, dest: Path) -> None:
    """Download `url` to `dest`, retrying broken or short transfers with a growing pause."""
    for attempt in range(1, ATTEMPTS + 1):
        try:
            with urllib.request.urlopen(_request(url), timeout=TIMEOUT_SECONDS) as response, dest.open("wb") as out:
                expected = response.headers.get("Content-Length")
                shutil.copyfileobj(response, out, 1 << 20)
            if expected is not None and dest.stat().st_size != int(expected):
                raise HTTPException(f"got {dest.stat().st_size} of {expected} bytes")
            return
        except urllib.error.HTTPError as exc:
            if exc.code < 500 or attempt == ATTEMPTS:
                raise ToolkitError(f"cannot download {redact.url(url)}: HTTP {exc.code}") from None
        except (InvalidURL, ValueError):  # no attempt mends the URL itself (its words can hold a login: not said)
            raise ToolkitError(
                f"cannot download {redact.url(url)}: not a URL that can be fetched (a space or another character a URL "
                "cannot hold, a port that is no number, a scheme other than http, https or file)"
            ) from None
        except (urllib.error.URLError, HTTPException, OSError, TimeoutError) as exc:
            if attempt == ATTEMPTS:
                reason = getattr(exc, "reason", exc)
                raise ToolkitError(f"cannot download {redact.url(url)} after {ATTEMPTS} attempts: {reason}") from None
        time.sleep(0.5 * 2**attempt)


def _origin(source: Source, mirror: str | None) -> str:
    if mirror is None:
        return source.url
    if "://" in mirror:
        return f"{mirror.rstrip('/')}/{source.filename}"
    return str(Path(mirror).expanduser() / source.filename)


def fetch_source(name: str, source: Source, mirror: str | None = None, cache: Path | None = None) -> Path:
    """The verified source file in the cache: fetched from `mirror` (a folder or URL) or upstream.

    A file whose sha256 differs from the pin is removed and never enters the cache.
    """
    cache = cache or state.cache_dir()
    cached = cache / source.filename
    if cached.is_file() and sha256_of(cached) == source.sha256:
        return cached
    cache.mkdir(parents=True, exist_ok=True)
    origin = _origin(source, mirror)
    partial = cache / f".{source.filename}.{os.getpid()}.partial"
    try:
        if "://" in origin:
            _download(origin, partial)
        elif Path(origin).is_file():
            shutil.copyfile(origin, partial)
        else:
            raise ToolkitError(f"{name} {source.version}: {source.filename} is not in the mirror {redact.url(mirror)}")
        actual = sha256_of(partial)
        if actual != source.sha256:
            raise ChecksumMismatch(
                f"{name} {source.version}: {redact.url(origin)} has sha256 {actual}, but the pin is {source.sha256} "
                f"(published in {source.sha256_from}); nothing was cached"
            )
        os.replace(partial, cached)
    finally:
        partial.unlink(missing_ok=True)
    return cached


def plan_sources(plan: Plan) -> dict[str, tuple[str, Source]]:
    """Source file name -> (component, pinned source) for what the plan's stages compile."""
    return {c.source.filename: (c.name, c.source) for s in plan.stages for c in s.components if c.source is not None}


def cached_sources(plan: Plan, cache: Path | None = None) -> dict[str, Path]:
    cache = cache or state.cache_dir()
    return {name: cache / name for name in plan_sources(plan) if (cache / name).is_file()}


def check_mirror(mirror: str | None) -> None:
    """--source-mirror, which this host alone reads (no image names it): a login in its URL is sent over
    https only, or plain http to loopback, never where anyone on the way reads it."""
    try:
        parts = urllib.parse.urlsplit(mirror or "")
    except ValueError:
        return  # no URL: its download says so in one line
    if parts.username is not None and parts.scheme != "https" and not is_loopback(parts.hostname or ""):
        raise UsageProblem(f"--source-mirror {redact.url(mirror)}: a login goes to a mirror over https only (plain http to loopback alone)")


def fetch_plan_sources(plan: Plan, mirror: str | None, mirror_dir: Path | None = None, cache: Path | None = None) -> dict[str, Path]:
    """Fetch and verify every source of the plan; optionally copy them into a mirror folder."""
    check_mirror(mirror)
    paths = {name: fetch_source(component, source, mirror, cache) for name, (component, source) in plan_sources(plan).items()}
    if mirror_dir is not None:
        mirror_dir.mkdir(parents=True, exist_ok=True)
        for name, path in paths.items():
            if not (mirror_dir / name).exists():
                shutil.copy2(path, mirror_dir / name)
        paths = {name: mirror_dir / name for name in paths}
    return paths
