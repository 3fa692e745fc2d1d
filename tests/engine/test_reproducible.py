"""The README's image built again by `verify IMAGE --rebuild`, cold, on another empty engine of a current
Docker release (BuildKit) and image store, with a state folder of its own and at another time, from the
same wheel: the OS image, every stage and the release image come out with the same image IDs, on each of
Docker's image stores (containerd's, overlay2). Podman, the other engine
kind, makes the same OS image and the same stages before the numpy compile on two empty engines. What
differs between two images is named by layer and file. A build asked for a past state of the Debian
archive takes every suite from it."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import docker
import pytest

from tests.engine.conftest import engine_over
from tests.engine.hosts import CURRENT_ENGINES, REBUILD_ENGINES, REGISTRY
from tests.engine.images import IMAGES, REPRODUCED, X86_ARGS, run_build_py, x86_wheelhouse
from tests.local_archive import LocalArchive, SnapshotArchive
from torchstack.making import archive
from torchstack.publishing import pushing
from torchstack.request.metadata import toolkit_revision
from torchstack.verify import rebuild

pytestmark = pytest.mark.engine


@pytest.fixture(scope="session")
def built_on_current(x86_build) -> dict:
    return IMAGES.result("built_on_current")


@pytest.fixture(scope="session")
def built_on_overlay2(x86_build) -> dict:
    return IMAGES.result("built_on_overlay2")


def _rebuilt(store: str, built: dict) -> dict:
    """The rebuild's summary on the store's other engine, with verify's output; a skip where the Debian
    archive moved on between the two builds (a new InRelease: they had different inputs) or where the
    checkout has uncommitted changes (nobody can build such an image again: verify refuses it)."""
    if (toolkit_revision()["revision"] or "").endswith("-dirty"):
        pytest.skip("the checkout has uncommitted changes: its images record no revision anyone can check out")
    name = REPRODUCED[store][-1]
    try:
        return IMAGES.result(name)
    except AssertionError:
        folder = IMAGES.table[name].folder
        summary = folder / "summary.json" if folder else None
        if summary and summary.is_file() and json.loads(summary.read_text())["reproducible"]["archive"] != built["reproducible"]["archive"]:
            pytest.skip("the Debian archive changed between the two builds (a new InRelease): they had different inputs")
        raise


@pytest.fixture(scope="session")
def rebuilt_on_current(built_on_current) -> dict:
    return _rebuilt("containerd", built_on_current)


@pytest.fixture(scope="session")
def rebuilt_on_overlay2(built_on_overlay2) -> dict:
    return _rebuilt("overlay2", built_on_overlay2)


def _ids(summary: dict) -> dict[str, str]:
    stages = {s["stage"]: s["image_id"] for s in summary["stages"]}
    return {"os": summary["reproducible"]["base_image_id"], **stages, "release": summary["image_id"]}


def _made_the_same(store: str, first: dict, again: dict) -> None:
    """The rebuild on the store's other engine said `reproduced`, built every stage, and made the first build's images."""
    assert first["engine"]["store"] == again["engine"]["store"] == store, (first["engine"], again["engine"])
    assert first["reproducible"]["why_not"] is None and again["reproducible"]["why_not"] is None
    assert first["reproducible"]["source_date_epoch"] == again["reproducible"]["source_date_epoch"]
    assert f"torchstack: reproduced {first['stages'][-1]['tags'][-1]}" in again["output"]
    assert [s["stage"] for s in again["stages"]] == [s["stage"] for s in first["stages"]]
    assert {s["status"] for s in again["stages"]} == {"built"}, "the rebuild is cold: it built every stage"
    differ = {name: (_ids(first)[name], image) for name, image in _ids(again).items() if _ids(first)[name] != image}
    assert not differ, f"images that differ (first, again): {differ}"
    assert all(s["image"].startswith("torchstack-rebuild-") for s in again["stages"]), "the rebuild replaces no image of the host's"


def test_verify_rebuild_makes_the_same_images_on_another_engine(built_on_current, rebuilt_on_current):
    _made_the_same("containerd", built_on_current, rebuilt_on_current)


def test_verify_rebuild_makes_the_same_images_on_another_engine_of_the_overlay2_store(built_on_overlay2, rebuilt_on_overlay2):
    """As on the containerd store, on Docker's overlay2 store with BuildKit (Docker 23 and later), which
    most build hosts run: Docker 23 to 28, Docker 29 upgraded from an older release, Debian 13's 26."""
    _made_the_same("overlay2", built_on_overlay2, rebuilt_on_overlay2)


def test_the_release_pushed_from_each_engine_has_one_digest_its_image_id(built_on_current, rebuilt_on_current):
    """On Docker's containerd image store (the engines of these builds) an image's ID is its manifest's
    digest, and BuildKit attaches no attestation of its own: the release image, pushed from the engine
    that built it and from the one it was moved to (where the rebuild made the same ID), is one digest."""
    image, registry = built_on_current["stages"][-1]["tags"][-1], REGISTRY.get()
    digests = set()
    for engine, name in ((CURRENT_ENGINES["containerd"], "built"), (REBUILD_ENGINES["containerd"], "moved")):
        client = docker.DockerClient(base_url=engine.get())
        digests.add(pushing.push(engine_over(client), image, f"{registry}/containerd-store/readme:{name}", lambda line: None).digest)
    assert digests == {built_on_current["image_id"]}, digests


def test_what_differs_between_two_images_is_named_by_layer_and_file(rebuilt_on_current, tmp_path):
    """Two images on the OS image the rebuild made, the same second layer (from the engine's cache),
    one file apart in the third."""
    client = docker.DockerClient(base_url=REBUILD_ENGINES["containerd"].get())
    base = rebuilt_on_current["reproducible"]["base_image_id"]
    (tmp_path / "Dockerfile").write_text(
        f"FROM {base}\nRUN echo same > /etc/torchstack-same\nARG CONTENT\nRUN echo $CONTENT > /etc/torchstack-changed\n"
    )
    made = [client.images.build(path=str(tmp_path), buildargs={"CONTENT": content}, rm=True)[0].id for content in ("one", "two")]
    try:
        lines = rebuild.differences(engine_over(client), *made)
    finally:
        for image in made:
            client.images.remove(image)
    layers = [line for line in lines if line.startswith("layer ")]
    assert len(layers) == 1 and layers[0].startswith("layer 3 of 3: "), lines
    assert "  /etc/torchstack-changed" in lines and "  /etc/torchstack-same" not in lines, lines


@pytest.fixture(scope="session")
def podman_stages_twice(x86_build) -> list[dict]:
    return IMAGES.result("podman_stages_twice")


def test_podman_makes_the_os_image_and_the_stages_before_the_compile_the_same_twice(podman_stages_twice):
    """Podman 5 twice, from empty stores; Podman 4.3 (Debian 12's) builds the same request too."""
    older, first, second = podman_stages_twice
    assert older["engine"]["version"].startswith("4.") and first["engine"]["version"].startswith("5."), (older["engine"], first["engine"])
    if first["reproducible"]["archive"] != second["reproducible"]["archive"]:
        pytest.skip("the Debian archive moved on between the two builds: they had different inputs")
    for summary in (older, first, second):
        assert summary["engine"]["kind"] == "podman" and summary["reproducible"]["why_not"] is None, summary["reproducible"]
        assert [(s["stage"], s["status"], s["builder"]) for s in summary["stages"]] == [
            ("base", "built", "buildah"),
            ("libs", "built", "buildah"),
        ]
    assert first["reproducible"]["base_image_id"] == second["reproducible"]["base_image_id"]
    assert [s["image_id"] for s in first["stages"]] == [s["image_id"] for s in second["stages"]], (first["stages"], second["stages"])


def test_a_build_asked_for_a_past_state_of_the_archive_takes_every_suite_from_it(client, catalog, unique_tag, tmp_path):
    """--debian-snapshot: the OS image and the stage after it take Debian's suites as a snapshot archive
    serves them at that time, their Release files long expired, and the images' apt sources name it. The
    snapshot archive is a site's copy of Debian's (tests/local_archive.py): its main archive the mirror
    the builds take, its -security suite one the test signs, valid until a day long past. What the
    build made (its own OS image, its stage) is removed afterwards."""
    stamp = f"{datetime.now(timezone.utc) - timedelta(days=1):%Y%m%dT%H%M%S}Z"  # this run's own OS image
    summary = tmp_path / "summary.json"
    try:
        with LocalArchive(tmp_path / "site") as security:
            security.publish("bookworm-security", "amd64", valid_until=datetime(2024, 1, 1, tzinfo=timezone.utc))
            with SnapshotArchive(stamp, catalog.distributions["bookworm"].mirror, security) as snapshot:
                args = [*X86_ARGS, "--torch-wheel", x86_wheelhouse(), "--build-type", "base", "--no-test", "--tag", unique_tag]
                args += ["--debian-snapshot", stamp, "--snapshot-archive", snapshot.url, "--archive-keyring", str(security.keyring)]
                made = run_build_py(*args, "--json", str(summary))
        assert made.returncode == 0, made.stderr[-3000:]
        found = json.loads(summary.read_text())
        main, fixes = f"{snapshot.url}/archive/debian/{stamp}", f"{snapshot.url}/archive/debian-security/{stamp}"
        suites = [(main, "bookworm"), (main, "bookworm-updates"), (fixes, "bookworm-security")]
        assert found["reproducible"]["debian_snapshot"] == stamp
        assert [state["uri"] for state in found["reproducible"]["archive"]] == [f"{url}/dists/{name}/InRelease" for url, name in suites]
        top = found["stages"][-1]
        assert [(s.url, s.name) for s in archive.image_sources(engine_over(client), top["image_id"]).suites] == suites
        assert any(path.startswith(f"/archive/debian/{stamp}/pool/") for path in snapshot.asked), "no package came from the snapshot"
    finally:
        stages = json.loads(summary.read_text())["stages"] if summary.is_file() else []
        for name in [*(tag for stage in stages for tag in stage["tags"]), f"torchstack-os:bookworm-amd64-{stamp}"]:
            try:
                client.images.remove(name)
            except docker.errors.APIError:
                pass
