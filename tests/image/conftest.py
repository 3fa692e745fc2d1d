"""Fixtures for the image checks: one container of the image under test, handed to testinfra.

Run through `./build.py test IMAGE`, which picks the folders for the image's stage and its
ancestors. What an image should contain comes from the same data that drove its build: the
build-info it carries, its labels, and the catalog (backends, targets, stages).
"""

from __future__ import annotations

import json
import shlex

import docker
import pytest

from tests.image.engine_host import engine_host
from torchstack.base import sharing
from torchstack.catalog.model import load_catalog


def pytest_addoption(parser):
    parser.addoption("--image", required=True, help="image to check")
    parser.addoption("--stage", default="final", help="stage to check the image as")
    parser.addoption("--backend", default=None, help="backend to expect (default: the image's label)")
    parser.addoption(
        "--engine",
        default="docker",
        choices=("docker", "podman"),
        help="the engine DOCKER_HOST names; testinfra runs commands through its CLI",
    )


def pytest_configure(config):
    config.addinivalue_line("markers", "side_by_side(*runs): the slow runs (test_final.RUNS) this check reads")


def pytest_collection_modifyitems(session, config, items):
    """The checks that wait for a side-by-side run go last (in their order): the others run while those
    runs work, not after them."""
    items.sort(key=lambda item: item.get_closest_marker("side_by_side") is not None)


@pytest.fixture(scope="session")
def catalog():
    return load_catalog()


@pytest.fixture(scope="session")
def image(request):
    return request.config.getoption("--image")


@pytest.fixture(scope="session")
def stage(request):
    return request.config.getoption("--stage")


@pytest.fixture(scope="session")
def image_attrs(image):
    return docker.from_env().images.get(image).attrs


@pytest.fixture(scope="session")
def labels(image_attrs):
    return image_attrs["Config"].get("Labels") or {}


@pytest.fixture(scope="session")
def container(image):
    client = docker.from_env()
    started = client.containers.run(image, entrypoint=["sleep", "infinity"], detach=True, network_mode="none", labels=sharing.labels())
    yield started
    started.remove(force=True)


@pytest.fixture(scope="session")
def engine(request):
    return request.config.getoption("--engine")


@pytest.fixture(scope="session")
def host(container, engine):
    """The container as root, to read anything in it."""
    return engine_host(engine, f"root@{container.id}")


@pytest.fixture(scope="session")
def user_host(container, engine):
    """The container as its default user, the way people run it."""
    return engine_host(engine, container.id)


@pytest.fixture(scope="session")
def ours(labels):
    """The build information every torchstack stage image carries in a label; others are skipped."""
    if "io.torchstack.build-info" not in labels:
        pytest.skip("not a torchstack image (no io.torchstack.build-info label): nothing to compare with")
    return json.loads(labels["io.torchstack.build-info"])


@pytest.fixture(scope="session")
def backend(request, catalog, labels):
    name = request.config.getoption("--backend") or labels.get("io.torchstack.backend")
    if name is None:
        pytest.skip("backend unknown: the image has no torchstack label; pass --backend to check one")
    return catalog.backends[name]


@pytest.fixture(scope="session")
def target(catalog, ours):
    if "target" not in ours:
        pytest.skip("nothing in this stage is compiled for a target (its content does not name one)")
    found = catalog.find_target(ours["target"], ours["arch"])
    if found is None:
        pytest.skip(f"target {ours['target']} is not in the catalog (a custom target)")
    return found


@pytest.fixture(scope="session")
def python(user_host):
    """Run Python code in the image as its default user; a failure shows Python's stderr."""

    def run(code: str, env: str = "") -> str:
        result = user_host.run(f"{env} python3 -c {shlex.quote(code)}")
        assert result.rc == 0, f"python3 failed in the image (exit {result.rc}):\n{result.stderr[-2000:]}"
        return result.stdout

    return run
