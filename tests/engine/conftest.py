"""Engine tests build real images on the local Docker engine (scripts/setup-host.sh starts one)."""

from __future__ import annotations

import contextlib
import io
import ipaddress
import json
import os
import shutil
import subprocess
import sys
import tarfile
import uuid
from pathlib import Path

import docker
import pytest

from torchstack.model import ROOT

CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")


def x86_wheelhouse() -> str:
    """The folder holding a CPU-only x86_64 torch wheel (PyPI's x86_64 wheels are CUDA builds)."""
    folder = os.environ.get("TORCHSTACK_TEST_WHEELHOUSE") or os.environ.get("PIP_FIND_LINKS")
    if not folder or not list(Path(folder).glob("torch-*x86_64.whl")):
        pytest.fail("no CPU x86_64 torch wheel: set TORCHSTACK_TEST_WHEELHOUSE to a folder holding one")
    return folder


# The x86_64 chain the README's first command builds: torch from the local CPU wheel, OpenBLAS
# from Debian, numpy compiled from its source distribution against that OpenBLAS.
X86_ARGS = ["--torch-from", "wheel", "--openblas-from", "distro", "--ca-bundle", str(CA_BUNDLE)]


# The arm64 image the emulated tests build: PyPI's aarch64 torch wheels are CPU builds carrying
# oneDNN with ACL up to torch 2.8; from 2.9 on they are CUDA builds, which the toolkit refuses for
# a CPU image. The 2.8.0 wheel reports itself as 2.8.0+cpu: the labels carry that, the tag 2.8.0.
ARM64_ARGS = ["--backend", "onednn-acl", "--torch-from", "wheel", "--torch-wheel", "index", "--torch-version", "2.8.0",
              "--openblas-from", "distro", "--numpy-from", "wheel", "--ca-bundle", str(CA_BUNDLE)]  # fmt: skip


def run_build_py(*args: str, cwd: Path = ROOT, timeout: int = 3000, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(cwd / "build.py"), *args], cwd=cwd, capture_output=True, text=True, timeout=timeout,
        env={**os.environ, **(env or {})},
    )  # fmt: skip


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


def untag(client, fragment: str) -> None:
    """Remove every image name holding `fragment` (an image other names share only loses the name)."""
    for image in client.images.list():
        for name in image.tags:
            if fragment in name:
                with contextlib.suppress(docker.errors.NotFound):
                    client.images.remove(name)


@pytest.fixture(scope="session")
def client():
    try:
        found = docker.from_env()
        found.ping()
    except docker.errors.DockerException as exc:
        pytest.fail(f"engine tests need a running Docker engine (run scripts/setup-host.sh): {exc}")
    return found


@pytest.fixture(scope="session")
def x86_build(client, tmp_path_factory):
    """The full x86_64 chain, built once per session; its JSON summary. --recheck: the image checks
    run in every test session, even on an image whose ID passed them in an earlier one."""
    summary = tmp_path_factory.mktemp("x86") / "summary.json"
    result = run_build_py(*X86_ARGS, "--torch-wheel", x86_wheelhouse(), "--json", str(summary), "--recheck")
    assert result.returncode == 0, f"the x86_64 build failed:\n{result.stdout[-3000:]}{result.stderr[-3000:]}"
    return json.loads(summary.read_text())


@pytest.fixture(scope="session")
def zendnn_build(client, tmp_path_factory, plugin_wheels):
    """The x86_64 zendnn chain with zentorch (from PyPI, paired with torch by version) and the two
    test plugins that fit (a torch.compile backend, a PrivateUse1 device), built once per session;
    its JSON summary, with the build's output (the checks' report among it) as `output`."""
    summary = tmp_path_factory.mktemp("zendnn") / "summary.json"
    plugins = [arg for name in ("compile_backend", "device") for arg in ("--plugin-wheel", str(plugin_wheels[name]))]
    result = run_build_py(*X86_ARGS, "--backend", "zendnn", "--torch-wheel", x86_wheelhouse(), *plugins,
                          "--json", str(summary), "--recheck")  # fmt: skip
    assert result.returncode == 0, f"the zendnn build failed:\n{result.stdout[-3000:]}{result.stderr[-3000:]}"
    return {**json.loads(summary.read_text()), "output": result.stdout}


@pytest.fixture(scope="session")
def arm64_build(client, tmp_path_factory):
    """The arm64 onednn-acl chain under qemu, built once per session; its JSON summary."""
    summary = tmp_path_factory.mktemp("arm64") / "summary.json"
    result = run_build_py(*ARM64_ARGS, "--json", str(summary), "--recheck")
    assert result.returncode == 0, f"the arm64 build failed:\n{result.stdout[-3000:]}{result.stderr[-3000:]}"
    return json.loads(summary.read_text())


@pytest.fixture
def repo_copy(tmp_path):
    """A copy of the checkout to change (a stale patch, a slow step) without touching the real one."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True).stdout
    copy = tmp_path / "torchstack"
    for name in files.split():
        if (ROOT / name).is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, copy / name)
    return copy


@pytest.fixture
def unique_tag(client):
    """A tag no other run uses; the images given it are untagged afterwards (layers that other
    tags share stay, and so does the engine's build cache)."""
    tag = f"test-{uuid.uuid4().hex[:10]}"
    yield tag
    untag(client, f":{tag}")
