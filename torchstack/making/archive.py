"""The Debian archive as a build reads it on the host: each suite's signed index, the upgrades an image lacks.

A build asks the suites before any work (a mirror without the -security suite is refused in one
line), refreshes the release image with the versions they hold, and gates the release tag on the
-security suite: no installed package may have a newer version there. The images themselves are
read without running them (dpkg's status file), so this works for every architecture alike.
"""

from __future__ import annotations

import base64
import hashlib
import json
import lzma
import os
import re
import subprocess
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from http.client import HTTPException
from pathlib import Path

from debian.debian_support import Version

from torchstack.base import redact
from torchstack.base.errors import ToolkitError, UsageProblem
from torchstack.base.state import state_dir
from torchstack.engines.engine import Engine
from torchstack.request.plan import AptSources, Suite

DEBIAN_KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")
SOURCES = ("/etc/apt/sources.list", "/etc/apt/sources.list.d")
DPKG_STATUS = "/var/lib/dpkg/status"
TIMEOUT = 60  # seconds for one download


class ArchiveUnreachable(ToolkitError):
    """A suite's index could not be read, or its signature did not verify."""


@dataclass(frozen=True)
class Upgrade:
    package: str
    installed: str
    available: str
    suite: str

    def __str__(self) -> str:
        return f"{self.package} {self.installed} -> {self.available}"


def _download(url: str) -> bytes:
    shown = redact.url(url)
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT) as answer:
            return answer.read()
    except urllib.error.HTTPError as exc:
        raise ArchiveUnreachable(f"{shown}: HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise ArchiveUnreachable(f"{shown}: {getattr(exc, 'reason', None) or exc}") from None
    except (HTTPException, ValueError):  # http.client's InvalidURL among them; its words can hold a login: not said
        raise ArchiveUnreachable(
            f"{shown}: not a URL that can be fetched (a space or another character a URL cannot hold, a port that is no number)"
        ) from None


def _binary_keyring(path: Path, folder: Path) -> Path:
    """`path` as gpgv reads it: an ASCII-armoured key (.asc, as sites publish them) unwrapped."""
    data = path.read_bytes()
    if not data.lstrip().startswith(b"-----BEGIN PGP"):
        return path
    body = data.decode().split("\n\n", 1)[1] if "\n\n" in data.decode() else ""
    lines = [line for line in body.splitlines() if line and not line.startswith(("=", "-----"))]
    unwrapped = folder / f"{path.stem}.gpg"
    unwrapped.write_bytes(base64.b64decode("".join(lines)))
    return unwrapped


def _verified(inrelease: bytes, url: str, keyring: Path | None) -> str:
    """The text of a suite's InRelease once gpgv accepts its signature (Debian's keys, the site's)."""
    with tempfile.TemporaryDirectory(prefix="torchstack-gpgv-") as work:
        keyrings = [DEBIAN_KEYRING] if DEBIAN_KEYRING.is_file() else []
        if keyring:
            keyrings.append(_binary_keyring(keyring, Path(work)))
        command = ["gpgv", "--output", "-", *(a for k in keyrings for a in ("--keyring", str(k))), "-"]
        try:
            result = subprocess.run(command, input=inrelease, capture_output=True, timeout=TIMEOUT)
        except FileNotFoundError:
            raise ToolkitError("gpgv is not installed: run scripts/setup-host.sh (Debian's package gpgv)") from None
    if result.returncode != 0:
        why = (result.stderr.decode(errors="replace").strip().splitlines() or ["no output"])[-1]
        raise ArchiveUnreachable(
            f"{redact.url(url)}: the signature does not verify with Debian's keys{' or --archive-keyring' if keyring else ''} ({why})"
        )
    return result.stdout.decode()


def release(suite: Suite, keyring: Path | None = None) -> str:
    """The suite's InRelease, its signature verified."""
    url = f"{suite.url}/dists/{suite.name}/InRelease"
    return _verified(_download(url), url, keyring)


def _index_checksum(release_text: str, arch: str) -> str:
    """The sha256 the signed InRelease gives for main's Packages.xz of `arch`."""
    found = re.search(rf"^ ([0-9a-f]{{64}}) +\d+ main/binary-{arch}/Packages\.xz$", release_text.split("SHA256:", 1)[-1], re.MULTILINE)
    if not found:
        raise ArchiveUnreachable(f"the suite lists no main/binary-{arch}/Packages.xz")
    return found.group(1)


def _parse_packages(text: str) -> dict[str, str]:
    """Package -> its newest version in a Packages index."""
    newest: dict[str, str] = {}
    name = None
    for line in text.splitlines():
        if line.startswith("Package: "):
            name = line[9:].strip()
        elif line.startswith("Version: ") and name:
            version = line[9:].strip()
            if name not in newest or Version(version) > Version(newest[name]):
                newest[name] = version
    return newest


def packages(suite: Suite, arch: str, keyring: Path | None = None) -> dict[str, str]:
    """Package -> newest version in the suite's main for `arch` (with Architecture: all), read
    through the signed InRelease; each index is read once per host (cached by its sha256)."""
    sha256 = _index_checksum(release(suite, keyring), arch)
    cached = state_dir() / "apt" / f"{sha256}.json"
    if cached.is_file():
        return json.loads(cached.read_text())
    url = f"{suite.url}/dists/{suite.name}/main/binary-{arch}/Packages.xz"
    data = _download(url)
    if hashlib.sha256(data).hexdigest() != sha256:
        raise ArchiveUnreachable(f"{redact.url(url)}: its sha256 is not the one the signed InRelease gives")
    newest = _parse_packages(lzma.decompress(data).decode())
    cached.parent.mkdir(parents=True, exist_ok=True)
    partial = cached.with_suffix(f".{os.getpid()}.part")  # one per process: runs side by side write their own
    partial.write_text(json.dumps(newest))
    partial.replace(cached)
    return newest


def suite_state(suite: Suite, keyring: Path | None = None) -> dict:
    """The suite's state as the build reads it: its signed InRelease's URL (as printed: redact.url), `Date` and sha256."""
    url = f"{suite.url}/dists/{suite.name}/InRelease"
    data = _download(url)
    text = _verified(data, url, keyring)
    date = re.search(r"^Date: (.+)$", text, re.MULTILINE)
    return {
        "suite": suite.name,
        "uri": redact.url(url),
        "date": date.group(1).strip() if date else None,
        "sha256": hashlib.sha256(data).hexdigest(),
    }


def require_suites(apt: AptSources) -> list[dict]:
    """Before any work: every suite the build takes answers with a signed index. A mirror that
    lacks one is refused in one line, with what serves instead. Returns the archive's state, each
    suite's (suite_state), which the provenance records."""
    found = []
    for suite in apt.suites:
        try:
            found.append(suite_state(suite, apt.keyring))
        except ArchiveUnreachable as exc:
            option = "--security-mirror" if suite.kind == "security" else "--debian-mirror"
            if apt.snapshot:
                option = f"--debian-snapshot {apt.snapshot.timestamp}:"
            instead = (
                "; or --no-security-updates to build without them, named in the image's tag and labels" if suite.kind != "release" else ""
            )
            raise UsageProblem(f"{option} {redact.url(suite.url)}: no usable {suite.name} suite ({exc}){instead}") from None
    return found


def installed(engine: Engine, image: str) -> dict[str, str]:
    """Package -> version of every Debian package installed in `image`, read from dpkg's status
    file without running the image; one that has none is refused, never taken for an image with nothing installed."""
    status = engine.files_of(image, [DPKG_STATUS]).get(DPKG_STATUS)
    if not status:
        raise ToolkitError(f"{image} has no {DPKG_STATUS}: its installed Debian packages cannot be read")
    text = b"".join(status).decode()
    found = {}
    for stanza in text.split("\n\n"):
        fields = dict(re.findall(r"^([\w-]+): (.*)$", stanza, re.MULTILINE))
        if fields.get("Status") == "install ok installed" and "Package" in fields:
            found[fields["Package"]] = fields["Version"]
    return found


def newer(have: dict[str, str], suites: tuple[Suite, ...], arch: str, keyring: Path | None = None) -> list[Upgrade]:
    """The installed packages of which `suites` hold a newer version: the newest, and where."""
    found: dict[str, Upgrade] = {}
    for suite in suites:
        for name, version in packages(suite, arch, keyring).items():
            if name in have and Version(version) > Version(found[name].available if name in found else have[name]):
                found[name] = Upgrade(name, have[name], version, suite.name)
    return sorted(found.values(), key=lambda u: u.package)


def describe(pending: list[Upgrade], suite: str) -> str:
    """One line: how many packages have updates pending in `suite`, the first few named."""
    first = ", ".join(str(u) for u in pending[:4])
    more = f" and {len(pending) - 4} more" if len(pending) > 4 else ""
    return f"{len(pending)} installed package{'s' if len(pending) != 1 else ''} with a newer version in {suite}: {first}{more}"


def image_sources(engine: Engine, image: str) -> AptSources:
    """The suites an image's own apt sources name (one-line and deb822 files alike), with the kind
    each suite's name says: what `test` checks any image against."""
    texts = [content.decode() for files in engine.files_of(image, list(SOURCES)).values() for content in files]
    suites = []
    for text in texts:
        for url, names in source_entries(text):
            for name in names:
                kind = "security" if name.endswith("-security") else "updates" if name.endswith("-updates") else "release"
                suites.append(Suite(url.rstrip("/"), name, kind))
    return AptSources(tuple(dict.fromkeys(suites)))


def pending_in(engine: Engine, image: str, keyring: Path | None = None) -> tuple[list[Upgrade], str]:
    """Any image's installed packages with a newer version in the -security suites its own apt
    sources name (`test`), and those suites' names."""
    security = image_sources(engine, image).security
    if not security:
        raise ArchiveUnreachable("its apt sources name no -security suite")
    arch = engine.image(image).architecture  # amd64, arm64, s390x: Debian's names too
    return newer(installed(engine, image), security, arch, keyring), ", ".join(s.name for s in security)


def source_entries(text: str) -> list[tuple[str, list[str]]]:
    """(URL, suites) of each binary source in a sources.list or deb822 .sources text."""
    if re.search(r"^Types:", text, re.MULTILINE):
        stanzas = [dict(re.findall(r"^([\w-]+): *(.*)$", s, re.MULTILINE)) for s in text.split("\n\n")]
        return [
            (s["URIs"].split()[0], s.get("Suites", "").split())
            for s in stanzas
            if "deb" in s.get("Types", "").split() and s.get("URIs") and s.get("Enabled", "yes") != "no"
        ]
    found = []
    for line in text.splitlines():
        words = re.sub(r"\[[^]]*\]", "", line.split("#", 1)[0]).split()
        if len(words) >= 3 and words[0] == "deb":
            found.append((words[1], [words[2]]))
    return found
