"""Images current on the day they are built. A fix the -security suite publishes after a build
reaches the next build of the same request as the release image's last layer, with nothing
compiled again; a fix that cannot be installed keeps the release tag where it was; `test` says
what is pending in any image. The -security suite here is a real Debian archive the test signs
with a key of its own and serves on loopback (tests/local_archive.py), as a site's mirror."""

from __future__ import annotations

import json

import pytest

from tests.engine.conftest import engine_over
from tests.engine.images import X86_ARGS, run_build_py, x86_wheelhouse
from tests.local_archive import LocalArchive, debian_suites, published_deb, rebuilt
from torchstack.making import archive

pytestmark = pytest.mark.engine

PACKAGE = "tzdata"  # in every image, Architecture: all, nothing pins its version


def summary_of(result, path) -> dict:
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(path.read_text())


def test_a_fix_published_after_a_build_reaches_the_next_without_compiling_and_one_that_cannot_install_holds_the_tag(
    client, x86_build, unique_tag, tmp_path
):
    have = archive.installed(engine_over(client), x86_build["image_id"])[PACKAGE]
    debian = json.loads(client.images.get(x86_build["image_id"]).labels["io.torchstack.build-info"])["distribution"]
    security = f"{debian}-security"
    original = published_deb(PACKAGE, have, tmp_path, debian_suites(debian), "amd64")
    release = f"torchstack:{unique_tag}"
    with LocalArchive(tmp_path / "site") as site:
        site.publish(security, "amd64")  # nothing newer yet
        args = [*X86_ARGS, "--security-mirror", site.url, "--archive-keyring", str(site.keyring), "--tag", unique_tag, "--no-test"]
        env = {"PIP_FIND_LINKS": x86_wheelhouse()}
        first = summary_of(run_build_py(*args, "--json", str(tmp_path / "first.json"), env=env), tmp_path / "first.json")
        assert first["security_updates"]["gate"] == f"none pending in {security}"
        assert f"deb {site.url} {security} main" in first["security_updates"]["suites"]

        # A fix whose dependency no suite holds: apt keeps it back, the gate refuses, the tag stays.
        site.publish(security, "amd64", [rebuilt(original, tmp_path, f"{have}+test1", depends="torchstack-absent-package")])
        held = run_build_py(*args, env=env)
        assert held.returncode != 0
        assert held.stderr.strip().splitlines()[-1] == (
            f"torchstack: error: 1 installed package with a newer version in {security}: "
            f"{PACKAGE} {have} -> {have}+test1; the release tag was not applied"
        )
        assert client.images.get(release).id == first["image_id"]
        # `test` asks the suites the image's own sources name (the site's mirror, with its key).
        tested = run_build_py("test", release, "-k", "test_os_is_the_planned_debian_release", "--archive-keyring", str(site.keyring))
        assert tested.returncode != 0 and f"{PACKAGE} {have} -> {have}+test1" in tested.stderr.strip().splitlines()[-1]

        # The fix as it should be: the next build of the same request takes it, compiling nothing.
        site.publish(security, "amd64", [rebuilt(original, tmp_path, f"{have}+test2")])
        third = summary_of(run_build_py(*args, "--json", str(tmp_path / "third.json"), env=env), tmp_path / "third.json")
    assert [(s["stage"], s["status"], s["ran"]) for s in third["stages"]] == [(s["stage"], "cached", []) for s in third["stages"]]
    assert f"{PACKAGE} {have} -> {have}+test2" in third["security_updates"]["upgraded"]
    assert third["security_updates"]["gate"] == f"none pending in {security}"
    assert archive.installed(engine_over(client), release)[PACKAGE] == f"{have}+test2"
