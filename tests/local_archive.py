"""A real Debian archive that a test makes and serves on loopback: signed with a key of its own,
as a site's mirror is (aptly, reprepro), never trusted without a signature."""

from __future__ import annotations

import email.utils
import functools
import hashlib
import http.server
import lzma
import shutil
import subprocess
import tempfile
import threading
import urllib.error
import urllib.request
from datetime import datetime
from pathlib import Path


class LocalArchive:
    """Suites under `folder`, served at `url` while the context is open; `keyring` is the
    public key (ASCII-armoured, as sites publish theirs) that --archive-keyring takes."""

    def __init__(self, folder: Path):
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        # GnuPG's home on a short path of its own: gpg-agent's sockets live there, and a socket's path
        # holds at most 107 bytes (a test's folder can be longer).
        self.home = Path(tempfile.mkdtemp(prefix="gpg-"))
        self._gpg("--quick-gen-key", "torchstack test archive <archive@localhost>", "ed25519", "sign", "never")
        self.keyring = folder / "archive-key.asc"
        self.keyring.write_bytes(self._gpg("--export", "--armor"))
        self.root = folder / "archive"
        self.root.mkdir()

    def _gpg(self, *args: str) -> bytes:
        command = ["gpg", "--batch", "--quiet", "--homedir", str(self.home), "--pinentry-mode", "loopback", "--passphrase", "", *args]
        return subprocess.run(command, check=True, capture_output=True).stdout

    def publish(self, suite: str, arch: str, debs: list[Path] = (), valid_until: datetime | None = None) -> None:
        """The suite's main for `arch` holds exactly `debs`, with a newly signed InRelease (valid until
        `valid_until`, as a snapshot's Release files long since are not)."""
        pool = self.root / "pool" / suite
        pool.mkdir(parents=True, exist_ok=True)
        stanzas = []
        for deb in debs:
            shutil.copyfile(deb, pool / deb.name)
            control = subprocess.run(["dpkg-deb", "-f", str(deb)], check=True, capture_output=True, text=True).stdout.strip()
            data = deb.read_bytes()
            stanzas.append(f"{control}\nFilename: pool/{suite}/{deb.name}\nSize: {len(data)}\nSHA256: {hashlib.sha256(data).hexdigest()}\n")
        binary = self.root / "dists" / suite / "main" / f"binary-{arch}"
        binary.mkdir(parents=True, exist_ok=True)
        packages = "\n".join(stanzas).encode()
        (binary / "Packages").write_bytes(packages)
        (binary / "Packages.xz").write_bytes(lzma.compress(packages))
        sums = "".join(
            f" {hashlib.sha256(p.read_bytes()).hexdigest()} {p.stat().st_size} main/binary-{arch}/{p.name}\n"
            for p in (binary / "Packages", binary / "Packages.xz")
        )
        release = (
            f"Origin: torchstack-test\nLabel: torchstack-test\nSuite: {suite}\nCodename: {suite}\n"
            f"Date: {email.utils.formatdate(usegmt=True)}\nArchitectures: {arch}\nComponents: main\n"
            + (f"Valid-Until: {email.utils.format_datetime(valid_until, usegmt=True)}\n" if valid_until else "")
            + f"SHA256:\n{sums}"
        )
        dists = self.root / "dists" / suite
        (dists / "Release").write_text(release)
        (dists / "InRelease").write_bytes(self._gpg("--clearsign", "--output", "-", str(dists / "Release")))

    def __enter__(self) -> LocalArchive:
        self.server, self.url = _serve(functools.partial(_Quiet, directory=str(self.root)))
        return self

    def __exit__(self, *exc) -> None:
        _stop(self.server)
        # The agent gpg started for the signing key ends with the archive.
        subprocess.run(["gpgconf", "--homedir", str(self.home), "--kill", "gpg-agent"], capture_output=True)
        shutil.rmtree(self.home, ignore_errors=True)


class SnapshotArchive:
    """Debian's snapshot archive as a site's copy of it answers, on loopback, for one time only (any
    other answers 404): its main archive's paths passed through to `mirror`, a real Debian mirror;
    its security archive's served from `security`, a LocalArchive whose suites the test signs. `asked`
    holds the paths asked for."""

    def __init__(self, timestamp: str, mirror: str, security: LocalArchive):
        self.timestamp, self.mirror, self.security = timestamp, mirror.rstrip("/"), security
        self.asked: list[str] = []

    def answer(self, path: str) -> tuple[int, object]:
        """The HTTP status and an open file (or None) for `path`."""
        self.asked.append(path)
        for archive, where in (("debian", None), ("debian-security", self.security.root)):
            prefix = f"/archive/{archive}/{self.timestamp}/"
            if not path.startswith(prefix):
                continue
            rest = path.removeprefix(prefix)
            if where is None:
                try:
                    return 200, urllib.request.urlopen(f"{self.mirror}/{rest}", timeout=120)
                except urllib.error.HTTPError as exc:
                    return exc.code, None
            found = (where / rest).resolve()
            return (200, found.open("rb")) if found.is_file() and found.is_relative_to(where.resolve()) else (404, None)
        return 404, None

    def __enter__(self) -> SnapshotArchive:
        self.server, self.url = _serve(functools.partial(_Relay, self))
        return self

    def __exit__(self, *exc) -> None:
        _stop(self.server)


def _serve(handler) -> tuple[http.server.ThreadingHTTPServer, str]:
    """`handler` answering on a free loopback port, in a thread of its own: the server and its URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def _stop(server: http.server.ThreadingHTTPServer) -> None:
    server.shutdown()
    server.server_close()


class _Relay(http.server.BaseHTTPRequestHandler):
    def __init__(self, archive: SnapshotArchive, *args, **kwargs):
        self.archive = archive
        super().__init__(*args, **kwargs)

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        status, body = self.archive.answer(self.path.split("?", 1)[0])
        if body is None:
            self.send_error(status)
            return
        with body:
            data = body.read()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


def rebuilt(deb: Path, dest: Path, version: str, depends: str | None = None) -> Path:
    """A real package made again at another version (and, given, another Depends): what an
    archive publishes as its fix."""
    tree = dest / f"tree-{version}"
    subprocess.run(["dpkg-deb", "-R", str(deb), str(tree)], check=True)
    control = tree / "DEBIAN" / "control"
    lines = [line for line in control.read_text().splitlines() if not (depends and line.startswith("Depends:"))]
    lines = [f"Version: {version}" if line.startswith("Version:") else line for line in lines]
    control.write_text("\n".join([*lines, *([f"Depends: {depends}"] if depends else [])]) + "\n")
    out = dest / f"{deb.name.split('_')[0]}_{version.replace(':', '%3a')}_rebuilt.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "-b", str(tree), str(out)], check=True, capture_output=True)
    shutil.rmtree(tree)
    return out


def published_deb(name: str, version: str, dest: Path, suites: list[tuple[str, str]], arch: str) -> Path:
    """The .deb a Debian archive publishes of `name` at `version`, found through the indexes of
    `suites` ((archive URL, suite) pairs), downloaded into `dest`."""
    for url, suite in suites:
        with urllib.request.urlopen(f"{url}/dists/{suite}/main/binary-{arch}/Packages.xz", timeout=120) as answer:
            for stanza in lzma.decompress(answer.read()).decode().split("\n\n"):
                fields = dict(line.split(": ", 1) for line in stanza.splitlines() if ": " in line and not line.startswith(" "))
                if fields.get("Package") == name and fields.get("Version") == version:
                    return download(f"{url}/{fields['Filename']}", dest / f"{name}.deb")
    raise LookupError(f"{name} {version} is in none of {', '.join(suite for _, suite in suites)}")


def debian_suites(release: str) -> list[tuple[str, str]]:
    """Debian's own three suites of `release`: where a package of an image built on them is published."""
    return [
        ("http://deb.debian.org/debian-security", f"{release}-security"),
        ("http://deb.debian.org/debian", release),
        ("http://deb.debian.org/debian", f"{release}-updates"),
    ]


def download(url: str, dest: Path) -> Path:
    with urllib.request.urlopen(url, timeout=120) as answer:
        dest.write_bytes(answer.read())
    return dest
