"""Fetching pinned sources for real: from a mirror folder or a mirror served over HTTP on loopback."""

import hashlib
import http.server
import threading

import pytest

from torchstack.base.errors import ChecksumMismatch, ToolkitError
from torchstack.build.sources import fetch_source
from torchstack.catalog.component import Source

PAYLOAD = b"pretend this is OpenBLAS-0.3.33.tar.gz\n" * 5000


def pinned(payload=PAYLOAD, name="OpenBLAS-0.3.33.tar.gz"):
    return Source(
        version="0.3.33",
        url=f"https://upstream.invalid/{name}",
        filename=name,
        sha256=hashlib.sha256(payload).hexdigest(),
        sha256_from="test pin",
    )


class MirrorHandler(http.server.BaseHTTPRequestHandler):
    files: dict[str, bytes] = {}
    broken_once: set[str] = set()
    requests: list[str] = []

    def do_GET(self):
        self.requests.append(self.path)
        body = self.files.get(self.path.lstrip("/"))
        if body is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.path in self.broken_once:
            self.broken_once.discard(self.path)
            self.wfile.write(body[: len(body) // 3])  # the connection drops mid-transfer
            self.close_connection = True
            return
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def mirror():
    MirrorHandler.files, MirrorHandler.broken_once, MirrorHandler.requests = {}, set(), []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), MirrorHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield MirrorHandler, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_fetch_from_an_http_mirror_verifies_and_caches(mirror, tmp_path):
    handler, url = mirror
    handler.files["OpenBLAS-0.3.33.tar.gz"] = PAYLOAD
    path = fetch_source("openblas", pinned(), url, tmp_path)
    assert path == tmp_path / "OpenBLAS-0.3.33.tar.gz" and path.read_bytes() == PAYLOAD
    assert fetch_source("openblas", pinned(), url, tmp_path) == path
    assert len(handler.requests) == 1, "a verified cached file is not fetched again"


def test_a_corrupted_file_is_rejected_and_nothing_is_cached(mirror, tmp_path):
    handler, url = mirror
    handler.files["OpenBLAS-0.3.33.tar.gz"] = PAYLOAD.replace(b"pretend", b"tampered", 1)
    with pytest.raises(
        ChecksumMismatch, match=r"openblas 0.3.33: .* has sha256 \w+, but the pin is \w+ \(published in test pin\); nothing was cached"
    ):
        fetch_source("openblas", pinned(), url, tmp_path)
    assert list(tmp_path.iterdir()) == [], "no file, not even a partial one, is left in the cache"


def test_an_interrupted_download_is_retried(mirror, tmp_path):
    handler, url = mirror
    handler.files["OpenBLAS-0.3.33.tar.gz"] = PAYLOAD
    handler.broken_once.add("/OpenBLAS-0.3.33.tar.gz")
    path = fetch_source("openblas", pinned(), url, tmp_path)
    assert path.read_bytes() == PAYLOAD
    assert len(handler.requests) == 2


def test_a_file_missing_from_the_http_mirror_is_an_error(mirror, tmp_path):
    _, url = mirror
    with pytest.raises(ToolkitError, match="HTTP 404"):
        fetch_source("openblas", pinned(), url, tmp_path / "cache")


def test_a_mirror_folder(tmp_path):
    folder = tmp_path / "mirror"
    folder.mkdir()
    (folder / "OpenBLAS-0.3.33.tar.gz").write_bytes(PAYLOAD)
    path = fetch_source("openblas", pinned(), str(folder), tmp_path / "cache")
    assert path.read_bytes() == PAYLOAD
    with pytest.raises(ToolkitError, match="zDNN-1.0.1.tar.gz is not in the mirror"):
        fetch_source("zdnn", pinned(name="zDNN-1.0.1.tar.gz"), str(folder), tmp_path / "cache")


def test_a_corrupted_cache_entry_is_fetched_again(tmp_path):
    folder, cache = tmp_path / "mirror", tmp_path / "cache"
    folder.mkdir()
    cache.mkdir()
    (folder / "OpenBLAS-0.3.33.tar.gz").write_bytes(PAYLOAD)
    (cache / "OpenBLAS-0.3.33.tar.gz").write_bytes(b"truncated")
    assert fetch_source("openblas", pinned(), str(folder), cache).read_bytes() == PAYLOAD
