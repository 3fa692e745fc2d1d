"""The README's build on a current Docker engine as Docker 29 runs on a new install (BuildKit its default
builder, images in containerd's image store, clients below API 1.44 refused), as an Ubuntu 24.04 or
26.04 host or a CI runner has it: every stage built by BuildKit, and the release image passes its checks there."""

from __future__ import annotations

import json

import docker
import pytest

from tests.engine.hosts import CURRENT_ENGINES
from tests.engine.images import IMAGES, ccache_counts
from torchstack.making.sbom import BUILD_INFO_LABEL

pytestmark = pytest.mark.engine


@pytest.fixture(scope="session")
def current_engine() -> str:
    """The current engine's DOCKER_HOST (hosts.CURRENT_ENGINES, the containerd store's: started, empty, for the build below)."""
    return CURRENT_ENGINES["containerd"].get()


@pytest.fixture(scope="session")
def built_on_current(x86_build, current_engine) -> dict:
    """The README's request on that engine, no --builder given; its JSON summary, with its output."""
    return IMAGES.result("built_on_current")


def test_the_engine_keeps_its_images_in_containerd_and_refuses_old_clients(current_engine):
    client = docker.DockerClient(base_url=current_engine)
    version = client.version()
    assert int(version["Version"].split(".")[0]) >= 23 and version["MinAPIVersion"] == "1.44", version
    assert ["driver-type", "io.containerd.snapshotter.v1"] in client.info()["DriverStatus"]


def test_the_readme_build_takes_buildkit_for_every_stage_and_passes_its_checks(built_on_current, current_engine):
    assert "failed" not in built_on_current["checks"] and "passed" in built_on_current["checks"], built_on_current["checks"]
    builders = {s["stage"]: s["builder"] for s in built_on_current["stages"]}
    assert set(builders) == {"base", "libs", "tools", "dev", "final"} and set(builders.values()) == {"buildkit"}, builders
    on_current = docker.DockerClient(base_url=current_engine)
    release = on_current.images.get(built_on_current["final_image"])
    assert release.labels, "the release image on the current engine carries no labels"
    engine = built_on_current["engine"]
    assert engine["store"] == "containerd" and engine["sizes"] == "compressed", engine
    assert json.loads(release.labels[BUILD_INFO_LABEL])["engine"] == {"kind": "docker", "store": "containerd"}


def test_a_compiler_cache_written_on_another_engine_serves_the_numpy_compile(built_on_current):
    """The build started from the folder BuildKit's first chain wrote on the host's engine (--ccache-dir,
    as a CI job's cache action restores it on a new runner): numpy's compile on this empty engine
    took its objects from it."""
    log = open(built_on_current["log"]).read()
    assert "torchstack: compiler cache loaded from " in built_on_current["output"], built_on_current["output"][-2000:]
    hits, misses = ccache_counts(log)
    print(f"numpy on an empty engine from a restored compiler cache: {hits} hits, {misses} misses")
    assert hits > 100 and misses <= 3, (hits, misses)


def test_the_summary_names_the_builder_of_each_stage(x86_build):
    """On the host's engine the README build names its own builder per stage too: BuildKit on Docker 23
    and later, the legacy builder on Docker 20.10."""
    builders = {s["builder"] for s in x86_build["stages"] if s["status"] in ("built", "cached")}
    assert builders and builders <= {"buildkit", "legacy"}, builders
