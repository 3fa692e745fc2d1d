"""The Debian suites a build reads on the host: signed indexes only, the newest version of each
installed package and where it is, a mirror without a suite refused in one line before any work.
Against a real archive the test signs and serves on loopback (tests/local_archive.py)."""

import pytest

from tests.local_archive import LocalArchive
from torchstack.base.errors import UsageProblem
from torchstack.making import archive
from torchstack.request.plan import AptSources, Suite

PACKAGES = """Package: libssl3
Version: 3.0.20-1~deb12u1
Architecture: amd64

Package: libssl3
Version: 3.0.22-1~deb12u1
Architecture: amd64

Package: tzdata
Version: 2026a-0+deb12u1
Architecture: all
"""


def test_an_index_gives_each_package_its_newest_version():
    assert archive._parse_packages(PACKAGES) == {"libssl3": "3.0.22-1~deb12u1", "tzdata": "2026a-0+deb12u1"}


def test_the_newest_version_of_each_installed_package_is_found_with_its_suite(monkeypatch):
    held = {
        "bookworm": {"libssl3": "3.0.20-1~deb12u1", "tzdata": "2026a-0+deb12u1", "perl": "5.36.0-7+deb12u1"},
        "bookworm-updates": {"tzdata": "2026f-0+deb12u1"},
        "bookworm-security": {"libssl3": "3.0.22-1~deb12u1", "perl": "5.36.0-7+deb12u1", "absent": "9"},
    }
    monkeypatch.setattr(archive, "packages", lambda suite, arch, keyring=None: held[suite.name])
    suites = tuple(Suite("http://mirror", name, "release") for name in held)
    have = {"libssl3": "3.0.20-1~deb12u1", "tzdata": "2026a-0+deb12u1", "perl": "5.36.0-7+deb12u1"}
    found = archive.newer(have, suites, "amd64")
    assert [(u.package, u.available, u.suite) for u in found] == [
        ("libssl3", "3.0.22-1~deb12u1", "bookworm-security"),
        ("tzdata", "2026f-0+deb12u1", "bookworm-updates"),
    ]
    assert archive.describe(found, "bookworm-security") == (
        "2 installed packages with a newer version in bookworm-security: "
        "libssl3 3.0.20-1~deb12u1 -> 3.0.22-1~deb12u1, tzdata 2026a-0+deb12u1 -> 2026f-0+deb12u1"
    )


def test_an_images_sources_are_read_in_either_format():
    one_line = (
        "deb http://deb.debian.org/debian bookworm main\n# deb http://old bookworm main\n"
        "deb [signed-by=/k.gpg] http://deb.debian.org/debian-security bookworm-security main\n"
    )
    deb822 = (
        "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: trixie trixie-updates\nComponents: main\n\n"
        "Types: deb-src\nURIs: http://x\nSuites: trixie\n"
    )
    assert archive.source_entries(one_line) == [
        ("http://deb.debian.org/debian", ["bookworm"]),
        ("http://deb.debian.org/debian-security", ["bookworm-security"]),
    ]
    assert archive.source_entries(deb822) == [("http://deb.debian.org/debian", ["trixie", "trixie-updates"])]


@pytest.fixture
def served(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHSTACK_CACHE", str(tmp_path / "cache"))  # the indexes it reads are cached there
    with LocalArchive(tmp_path) as local:
        local.publish("bookworm-security", "amd64")
        yield local


def test_a_signed_suite_is_read_and_one_its_key_does_not_sign_is_refused(served, tmp_path):
    suite = Suite(served.url, "bookworm-security", "security")
    assert archive.packages(suite, "amd64", served.keyring) == {}
    with pytest.raises(archive.ArchiveUnreachable, match="signature does not verify"):
        archive.release(suite)  # Debian's keys alone


def test_a_mirror_without_the_security_suite_is_one_line_naming_the_option(served):
    apt = AptSources((Suite(served.url, "bookworm-security", "security"),), served.keyring)
    archive.require_suites(apt)
    missing = AptSources((Suite(served.url, "trixie-security", "security"),), served.keyring)
    with pytest.raises(
        UsageProblem, match=rf"^--security-mirror {served.url}: no usable trixie-security suite .*HTTP 404.*--no-security-updates"
    ):
        archive.require_suites(missing)
