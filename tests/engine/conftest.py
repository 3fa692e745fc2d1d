"""Engine tests build real images on the local Docker engine (scripts/setup-host.sh starts one).

The images they need are data (tests/engine/images.py): a test asks for one by its fixture and gets
it built once, in the background, as soon as what it builds on is built. The session's registry and
extra engines are in tests/engine/hosts.py."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import io
import ipaddress
import json
import signal
import subprocess
import sys
import tarfile
import threading
import urllib.request
import uuid
from pathlib import Path

import docker
import pytest
from docker.models.containers import ContainerCollection

from tests import session
from tests.cpu_use import CpuUse
from tests.engine.hosts import COSIGN_KEYS, CURRENT_ENGINES, PODMAN, PODMAN5_IMAGE, REBUILD_ENGINES, REGISTRY, SECOND_ENGINE
from tests.engine.images import APP_RELEASE, BUILDKIT_TAG, IMAGES, README_WHEEL, ZENDNN_WHEELS, copy_of_checkout, x86_wheelhouse
from torchstack.base import sharing
from torchstack.base.state import state_dir
from torchstack.catalog.model import ROOT, load_catalog
from torchstack.engines import connection
from torchstack.engines.engine import Engine


def pypi_wheel(dest: Path, requirement: str) -> Path:
    """PyPI's wheel of `requirement` (NAME==VERSION) for the x86_64 images' Python (3.11), downloaded into `dest`."""
    download = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--quiet",
        "--no-deps",
        "--only-binary=:all:",
        "--platform",
        "manylinux_2_28_x86_64",
        "--python-version",
        "3.11",
        "--dest",
        str(dest),
        requirement,
    ]
    subprocess.run(download, check=True, timeout=600)
    return next(dest.glob(f"{requirement.partition('==')[0]}-*.whl"))


def numpy_wheel(dest: Path) -> Path:
    """PyPI's numpy 2.3.5 wheel (it carries scipy-openblas, not our BLAS)."""
    return pypi_wheel(dest, "numpy==2.3.5")


def files_holding(image, needle: bytes) -> list[str]:
    """The files, in every layer of `image` as `docker save` exports it, whose bytes hold `needle`."""
    found = []
    with tarfile.open(fileobj=io.BytesIO(b"".join(image.save()))) as saved:
        layers = [m for m in saved.getmembers() if m.name.endswith("layer.tar")]
        assert layers, "docker save exported no layers"
        for member in layers:
            with tarfile.open(fileobj=saved.extractfile(member)) as layer:
                for entry in layer.getmembers():
                    if entry.isfile() and needle in layer.extractfile(entry).read():
                        found.append(f"{member.name}:{entry.name}")
    return found


def bridge_address(network_attrs: dict) -> str:
    """This host's address on an engine network, where build steps and containers reach it. An
    engine reports a Gateway only for a network it was told one for; a newly started engine
    reports its default bridge as {"Subnet": "172.17.0.0/16"} alone, and then the gateway is, as
    the engine assigns it, the subnet's first address."""
    config = network_attrs["IPAM"]["Config"][0]
    return config.get("Gateway") or str(next(ipaddress.ip_network(config["Subnet"]).hosts()))


def engine_over(client: docker.DockerClient) -> Engine:
    """The toolkit's engine over a test's own SDK client (the containers it starts carry the session's
    label too), as connection.connect describes the engine there."""
    version, info = client.version(), client.info()
    chosen = connection.engine_of(connection.kind_of(version), str(client.api.base_url), "a test's client")
    return dataclasses.replace(connection.described(chosen, version, info), sdk=client)


def leftovers_of(client, owner: str) -> list[str]:
    """What the run `owner` (sharing.identity) left: its containers, its build contexts."""
    containers = [c.name for c in client.containers.list(all=True, filters={"label": f"{sharing.LABEL}={owner}"})]
    contexts = [str(p) for p in (state_dir() / "contexts").glob(owner.replace("/", "+") + "+*")]
    return containers + contexts


def untag(client, fragment: str) -> None:
    """Remove every image name holding `fragment` (an image other names share only loses the name)."""
    for image in client.images.list():
        for name in image.tags:
            if fragment in name:
                with contextlib.suppress(docker.errors.NotFound):
                    client.images.remove(name)


CPU_USE = CpuUse()  # the session's CPU use by program, in the terminal's summary
_MANIFEST_TYPES = "application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json"


def copy_into(registry: str, source_repository: str, target_repository: str, source: str, target: str) -> None:
    """The manifest `source` (tag or digest) of one repository, as `target` in another, its blobs
    mounted from the first: what a registry user with push rights can do."""
    base = f"http://{registry}/v2"
    with urllib.request.urlopen(
        urllib.request.Request(f"{base}/{source_repository}/manifests/{source}", headers={"Accept": _MANIFEST_TYPES})
    ) as got:
        body, kind = got.read(), got.headers["Content-Type"]
    manifest = json.loads(body)
    for blob in [manifest["config"], *manifest["layers"]]:
        urllib.request.urlopen(
            urllib.request.Request(
                f"{base}/{target_repository}/blobs/uploads/?mount={blob['digest']}&from={source_repository}", method="POST"
            )
        )
    urllib.request.urlopen(
        urllib.request.Request(f"{base}/{target_repository}/manifests/{target}", data=body, method="PUT", headers={"Content-Type": kind})
    )


def listed_architectures(registry: str, repository: str, tag: str) -> list[str]:
    """The architectures of a multi-architecture tag, as the registry lists them."""
    request = urllib.request.Request(
        f"http://{registry}/v2/{repository}/manifests/{tag}",
        headers={"Accept": "application/vnd.docker.distribution.manifest.list.v2+json, application/vnd.oci.image.index.v1+json"},
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        return sorted(m["platform"]["architecture"] for m in json.load(answer)["manifests"])


class _SessionContainers(ContainerCollection):
    """Containers the tests start themselves carry the session's owner label (tests/session.py)."""

    def create(self, image, command=None, **kwargs):
        kwargs["labels"] = {**(kwargs.get("labels") or {}), **session.labels()}
        return super().create(image, command, **kwargs)


class SessionClient(docker.DockerClient):
    @property
    def containers(self):
        return _SessionContainers(client=self)


@pytest.fixture(scope="session")
def client():
    try:
        found = SessionClient.from_env()
        found.ping()
    except docker.errors.DockerException as exc:
        pytest.fail(f"engine tests need a running Docker engine (run scripts/setup-host.sh): {exc}")
    return found


def pytest_configure(config):
    """A CI job's cancel (SIGTERM) ends the session as Ctrl-C does: fixtures torn down and
    pytest_sessionfinish run (the background builds stopped)."""

    def interrupted(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupted)


def _images_of(item) -> list[str]:
    return [name for name in IMAGES.table if name in getattr(item, "fixturenames", ())]


def pytest_collection_modifyitems(session, config, items):
    """The tests of an image after those of the images above it in the table (tests that read none
    first): each waits only for its own, while the builds below it go on in the background. The
    fixtures such tests share with their module are session-scoped, so that the move sets up none twice."""
    order = list(IMAGES.table)
    items.sort(key=lambda item: max((order.index(name) for name in _images_of(item)), default=-1))


def pytest_collection_finish(session):
    """Every image the collected tests ask for, started in the background from here on, and the
    session's CPU use watched (tests/cpu_use.py) where it builds any."""
    if not session.config.option.collectonly:
        IMAGES.want({name for item in session.items for name in _images_of(item)})
        if IMAGES.wanted:
            CPU_USE.start()


def pytest_terminal_summary(terminalreporter):
    """The background builds' timeline and the CPU each program used: the session's critical path
    and where a CPU-bound host's time went, read from one run."""
    for title, lines in (
        ("background builds (minutes from collection)", IMAGES.timeline()),
        ("CPU use by program (CPU-minutes, from collection)", CPU_USE.report()),
    ):
        if lines:
            terminalreporter.section(title)
            for line in lines:
                terminalreporter.write_line(line)


def pytest_sessionfinish(session):
    CPU_USE.stop()
    IMAGES.stop()
    # The tags of the session's own builds (none where no engine test ran: no engine needed then).
    started = {name for name, build in IMAGES.table.items() if build.started()}
    if started & {"buildkit_first", "buildkit_patched"}:
        untag(docker.from_env(), f":{BUILDKIT_TAG}")
    if "requirements_build" in started:  # its test untags it; not if the session ended before
        untag(docker.from_env(), f":{APP_RELEASE}-")
    # Side by side: each waits mostly on its engine's shutdown and its disk.
    resources = (PODMAN, SECOND_ENGINE, *CURRENT_ENGINES.values(), *REBUILD_ENGINES.values(), REGISTRY, COSIGN_KEYS, README_WHEEL)
    closing = [threading.Thread(target=resource.close) for resource in resources]
    for thread in closing:
        thread.start()
    for thread in closing:
        thread.join()
    PODMAN5_IMAGE.close()  # once the Podman 5 engine that runs it has stopped


@pytest.fixture(scope="session")
def x86_build(client):
    """The full x86_64 chain, built once per session; its JSON summary, with the build's output as
    `output`. --recheck: the image checks run in every test session, even on an image whose ID
    passed them in an earlier one."""
    return IMAGES.result("x86_build")


@pytest.fixture(scope="session")
def zendnn_build(client, x86_build):
    """The x86_64 zendnn chain with zentorch and the test plugins that fit it (a torch.compile
    backend, a PrivateUse1 device); its JSON summary, with the build's output as `output` and the
    plugin wheels it installed as `plugin_wheels` (folder name -> wheel file)."""
    return {**IMAGES.result("zendnn_build"), "plugin_wheels": dict(ZENDNN_WHEELS)}


@pytest.fixture(scope="session")
def arm64_build(client):
    """The arm64 onednn-acl chain under qemu, built once per session; its JSON summary."""
    return IMAGES.result("arm64_build")


@pytest.fixture(scope="session")
def buildkit_first(client):
    """BuildKit's tools chain with the compiler cache mount; its JSON summary, its output, and the
    folder its --ccache-dir wrote, as `ccache_dir`."""
    built = IMAGES.result("buildkit_first")
    return {**built, "ccache_dir": IMAGES.table["buildkit_first"].folder / "ccache"}


@pytest.fixture(scope="session")
def buildkit_patched(buildkit_first):
    """BuildKit's tools chain again with a one-line numpy patch; its JSON summary, and its output."""
    return IMAGES.result("buildkit_patched")


@pytest.fixture(scope="session")
def skopeo(client):
    """The image with trixie's skopeo; removed when the session ends."""
    return IMAGES.result("skopeo")


@pytest.fixture(scope="session")
def plain_image(client) -> str:
    """Debian with the x86_64 torch wheel installed by pip alone, as root: an image the toolkit did
    not build. Made by the benchmark's own code (benchmarks/run.py), so that its run in the session
    takes this very image from the engine's cache instead of installing torch again."""
    spec = importlib.util.spec_from_file_location("torchstack_benchmark", ROOT / "benchmarks" / "run.py")
    benchmark = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(benchmark)
    plan = benchmark.readme_plan(load_catalog(), x86_wheelhouse())
    if not engine_over(client).has_image(plan.base_image):
        pytest.fail(f"{plan.base_image} is not here: the plain image is built on the OS image the x86_64 chain bootstraps")
    return benchmark.plain_image(plan.base_image, plan.torch_wheel_file)[0]


@pytest.fixture
def repo_copy(tmp_path):
    """A copy of the checkout to change (a stale patch, a slow step) without touching the real one."""
    return copy_of_checkout(tmp_path)


@pytest.fixture
def unique_tag(client):
    """A tag no other run uses (it holds the session's id); the images given it are untagged
    afterwards (layers that other tags share stay, and so does the engine's build cache)."""
    tag = f"test-{session.ID}-{uuid.uuid4().hex[:6]}"
    yield tag
    untag(client, f":{tag}")


@pytest.fixture(scope="session")
def registry() -> str:
    """A registry on loopback for the whole session: the x86_64 chain's stages pushed there once
    (`pushed`) serve the push tests and another engine's --cache-from."""
    return REGISTRY.get()


@pytest.fixture(scope="session")
def cosign_keys() -> dict:
    """Two cosign key pairs, ours (which --sign uses) and another's, with the password cosign reads
    from COSIGN_PASSWORD: {"ours": (private, public), "other": (...), "env": {...}}."""
    return COSIGN_KEYS.get()


@pytest.fixture(scope="session")
def pushed(client, x86_build, registry, cosign_keys):
    """The README's build pushed with its stages and signed (images.py); its JSON summary, and its output."""
    built = IMAGES.result("pushed")
    yield {k: v for k, v in built.items() if k != "output"}, built["output"]
    untag(client, f"{registry}/")


@pytest.fixture(scope="session")
def arm64_pushed(arm64_build, registry, cosign_keys) -> str:
    """The emulated arm64 image in the loopback registry, pushed once per session and signed."""
    IMAGES.result("arm64_pushed")
    return f"{registry}/ml/torchstack:{arm64_build['release_tag']}"
