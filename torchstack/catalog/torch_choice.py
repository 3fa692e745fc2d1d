"""Which torch release an image gets from an index: the newest catalogued one whose CPU wheel is offered, with why."""

from __future__ import annotations

import base64
import functools
import html
import os
import re
import ssl
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

from torchstack.base import redact
from torchstack.base.errors import UsageProblem
from torchstack.catalog.component import TorchRelease
from torchstack.catalog.model import Catalog, Distribution
from torchstack.catalog.wheels import WheelName, wheelhouse_wheels

WHEELHOUSE = "a local wheelhouse (pip's find-links)"
# How long an index may take to list its torch wheels before the plan goes on without it.
LISTING_TIMEOUT_S = 10


@dataclass(frozen=True)
class Offer:
    """The torch wheels one place offers, in the order a build looks: the wheelhouse, then the index."""

    where: str
    wheels: tuple[WheelName, ...]
    failed: str | None = None  # why it offered nothing

    def has(self, release: str, arch: str, python: str) -> bool:
        return any(_release(w.version) == release and w.fits(arch, python) for w in self.wheels)


@dataclass(frozen=True)
class Choice:
    release: TorchRelease | None  # None: the wheel --torch-wheel names decides
    distribution: Distribution
    note: str  # which release, and why
    distribution_note: str


def _release(version: str) -> str:
    return version.split("+")[0]


class _LoginToItsOrigin(urllib.request.HTTPRedirectHandler):
    """Redirects followed with the login only where they stay on the origin (scheme, host, port) it is for,
    as requests' should_strip_auth: urllib's own would carry a header set on the request to any host."""

    def __init__(self, origin: tuple[str, str | None, int | None], authorization: str):
        self.origin, self.authorization = origin, authorization

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and _origin(new.full_url) == self.origin:
            new.add_unredirected_header("Authorization", self.authorization)
        return new


def _origin(url: str) -> tuple[str, str | None, int | None]:
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    return scheme, parts.hostname, parts.port or {"http": 80, "https": 443}.get(scheme)


def _authorization(index: str) -> str | None:
    """A login in the index's URL (https://USER:TOKEN@host/..., as pip takes one) as a Basic Authorization header."""
    parts = urllib.parse.urlsplit(index)
    if parts.username is None:
        return None
    login = f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
    return "Basic " + base64.b64encode(login.encode()).decode()


def listing(index: str) -> tuple[WheelName, ...]:
    """The torch wheels a PEP 503 simple index lists (its page for torch); raises OSError when it does not answer.
    A login in its URL goes to the index's own origin alone, never shown, never where a redirect leads elsewhere."""
    url = redact.without_login(index).rstrip("/") + "/torch/"
    context = ssl.create_default_context(cafile=os.environ.get("PIP_CERT") or None) if url.startswith("https:") else None
    handlers: list[urllib.request.BaseHandler] = [urllib.request.HTTPSHandler(context=context)] if context else []
    request = urllib.request.Request(url, headers={"Accept": "text/html", "User-Agent": "torchstack"})
    authorization = _authorization(index)
    if authorization:
        request.add_unredirected_header("Authorization", authorization)  # unredirected: urllib copies none of these
        handlers.append(_LoginToItsOrigin(_origin(url), authorization))
    opener = urllib.request.build_opener(*handlers)
    with opener.open(request, timeout=LISTING_TIMEOUT_S) as response:
        page = response.read().decode("utf-8", "replace")
    names = {urllib.parse.unquote(html.unescape(h).split("#")[0].rsplit("/", 1)[-1]) for h in re.findall(r'href="([^"]+)"', page)}
    found = []
    for name in sorted(n for n in names if n.startswith("torch-") and n.endswith(".whl")):
        try:
            found.append(WheelName.parse(name))
        except UsageProblem:
            continue
    return tuple(found)


@functools.lru_cache(maxsize=4)
def offers(index: str) -> tuple[Offer, ...]:
    """What the wheelhouse and then `index` offer, each asked once per run."""
    local = wheelhouse_wheels()
    found = [Offer(WHEELHOUSE, local, None if local else "holds no torch wheel")]
    shown = redact.url(index)
    try:
        found.append(Offer(shown, listing(index)))
    except urllib.error.HTTPError as exc:
        found.append(Offer(shown, (), f"answered HTTP {exc.code} {exc.reason}"))
    except (OSError, ValueError) as exc:
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        found.append(Offer(shown, (), f"did not answer: {reason}"))
    return tuple(found)


def _newest_first(catalog: Catalog) -> list[TorchRelease]:
    return sorted(catalog.torch_releases.values(), key=lambda r: Version(r.name), reverse=True)


def catalogued(catalog: Catalog, version: str) -> TorchRelease:
    """The catalog's entry for `version` (a local label such as +cpu ignored), or one line naming the newest."""
    release = catalog.torch_releases.get(_release(version))
    if release is None:
        newest = _newest_first(catalog)[0].name
        raise UsageProblem(
            f"torch {version} is not a release the catalog knows (newest: {newest}; known: {', '.join(catalog.torch_releases)}): "
            "its pins are not resolved; add it with scripts/catalog-torch.py (docs/maintaining/torch-releases.md)"
        )
    return release


def unpaired(catalog: Catalog, release: str, plugins: tuple[str, ...]) -> list[str]:
    """The named plugins none of whose pinned versions pairs with `release`."""
    return [p for p in plugins if catalog.plugins[p].versions and catalog.plugins[p].version_for(release) is None]


def choose(catalog: Catalog, arch: str, index: str, dists: list[Distribution], asked: str | None, plugins: tuple[str, ...]) -> Choice:
    """The release to install from the wheelhouse or `index`, with the Debian release (of `dists`, newest first) its wheel fits."""
    found = offers(index)
    candidates = [catalogued(catalog, asked)] if asked else _newest_first(catalog)
    passed: list[tuple[str, str]] = []  # (release, why it was passed over)
    unoffered: list[str] = []
    for release in candidates:
        if not asked and (missing := unpaired(catalog, release.name, plugins)):
            passed.append((release.name, f"no pinned {', '.join(missing)} pairs with {release.name}"))
            continue
        for dist in dists:
            where = [o.where for o in found if o.has(release.name, arch, dist.python)]
            if where:
                py = f"cp{dist.python.replace('.', '')}"
                why = "--torch-version" if asked else "the newest catalogued release with a CPU wheel offered"
                said = [text for _, text in passed]
                if unoffered:
                    said.append(f"newer {', '.join(unoffered)}: no {arch} wheel for Python {' or '.join(d.python for d in dists)}")
                said += [f"{o.where} {o.failed}" for o in found if o.failed and o.where != WHEELHOUSE]
                note = f"{why}: {' and '.join(where)} offers it for {arch} {py}" + "".join(f"; {p}" for p in said)
                return Choice(release, dist, note + _uncatalogued(catalog, found, arch), distribution_note(dist, dists, py))
        unoffered.append(release.name)
    return _fallback(catalog, found, dists, asked, plugins, passed)


def _fallback(
    catalog: Catalog,
    found: tuple[Offer, ...],
    dists: list[Distribution],
    asked: str | None,
    plugins: tuple[str, ...],
    passed: list[tuple[str, str]],
) -> Choice:
    """Nothing offered fits: the asked release, else the newest paired one, on the newest Debian release it has wheels for."""
    newest = _newest_first(catalog)
    release = catalogued(catalog, asked) if asked else next((r for r in newest if not unpaired(catalog, r.name, plugins)), newest[0])
    dist = next((d for d in dists if release.has_wheel_for(d.python)), dists[0])
    tried = "; ".join(f"{o.where} {o.failed or 'offers no catalogued release for this image'}" for o in found)
    why = "--torch-version" if asked else "the newest catalogued release" + (f" {', '.join(plugins)} pairs with" if plugins else "")
    note = f"{why}; no index offered one for this image ({tried}): the build asks them again, and stops if none has it"
    note += "".join(f"; {text}" for name, text in passed if Version(name) > Version(release.name))
    return Choice(release, dist, note, distribution_note(dist, dists, f"cp{dist.python.replace('.', '')}", offered=False))


def _uncatalogued(catalog: Catalog, found: tuple[Offer, ...], arch: str) -> str:
    """The releases newer than every catalogued one that an index offers for `arch`: named, not taken."""
    newest = Version(_newest_first(catalog)[0].name)
    newer: dict[Version, str] = {}
    for offer in found:
        for wheel in offer.wheels:
            try:
                version = Version(_release(wheel.version))
            except InvalidVersion:
                continue
            if wheel.platform.endswith(f"_{arch}") and not version.is_prerelease and version > newest:
                newer.setdefault(version, offer.where)
    listed = ", ".join(f"{v} ({w})" for v, w in sorted(newer.items()))
    return f"; offered but not yet catalogued: {listed}" if newer else ""


def distribution_note(dist: Distribution, dists: list[Distribution], py: str, offered: bool = True) -> str:
    """Why `dist` of `dists` (newest first): --distribution, else the newest whose Python the wheel (`py`, cp313) is for."""
    if len(dists) == 1:
        return f"{dist.name} (Python {dist.python}): --distribution"
    newer = "".join(f"; {d.name} has Python {d.python}" for d in dists[: dists.index(dist)])
    whose = "the torch wheel is for" if offered else "the torch release has wheels for"
    return f"{dist.name} (Python {dist.python}): the newest Debian release whose Python {whose} ({py}{newer})"
