"""Fetching pinned sources for real: from a mirror folder or a mirror served over HTTP on loopback."""

import hashlib

import pytest

from tests.loopback import serving
from torchstack.base.errors import ChecksumMismatch, ToolkitError
from torchstack.catalog.component import Source
from torchstack.making.sources import fetch_source

PAYLOAD = b"pretend this is OpenBLAS-0.3.33.tar.gz\n" * 5000


def pinned(payload=PAYLOAD, name="OpenBLAS-0.3.33.tar.gz"):
    return Source(
        version="0.3.33",
        url=f"https://upstream.invalid/{name}",
        filename=name,
        sha256=hashlib.sha256(payload).hexdigest(),
        sha256_from="test pin",
    )


@pytest.fixture
def mirror():
    with serving() as served:
        yield served, served.url


def test_fetch_from_an_http_mirror_verifies_and_caches(mirror, tmp_path):
    handler, url = mirror
    handler.files["/OpenBLAS-0.3.33.tar.gz"] = PAYLOAD
    path = fetch_source("openblas", pinned(), url, tmp_path)
    assert path == tmp_path / "OpenBLAS-0.3.33.tar.gz" and path.read_bytes() == PAYLOAD
    assert fetch_source("openblas", pinned(), url, tmp_path) == path
    assert len(handler.seen) == 1, "a verified cached file is not fetched again"


def test_a_corrupted_file_is_rejected_and_nothing_is_cached(mirror, tmp_path):
    handler, url = mirror
    handler.files["/OpenBLAS-0.3.33.tar.gz"] = PAYLOAD.replace(b"pretend", b"tampered", 1)
    with pytest.raises(
        ChecksumMismatch, match=r"openblas 0.3.33: .* has sha256 \w+, but the pin is \w+ \(published in test pin\); nothing was cached"
    ):
        fetch_source("openblas", pinned(), url, tmp_path)
    assert list(tmp_path.iterdir()) == [], "no file, not even a partial one, is left in the cache"


def test_an_interrupted_download_is_retried(mirror, tmp_path):
    handler, url = mirror
    handler.files["/OpenBLAS-0.3.33.tar.gz"] = PAYLOAD
    handler.broken_once.add("/OpenBLAS-0.3.33.tar.gz")
    path = fetch_source("openblas", pinned(), url, tmp_path)
    assert path.read_bytes() == PAYLOAD
    assert len(handler.seen) == 2


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
