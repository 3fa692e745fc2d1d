"""Podman as the only engine: the README's build on an empty Podman 5 engine (Debian 13's, run in a
container where the host's is older: hosts.podman5_engine), its checks through
Podman, a push to the loopback registry and a pull back, a multi-architecture tag, and the image
run by a rootless user. The earlier stages come from what the Docker chain pushed (--cache-from:
Podman takes them under their content names); the final stage is built by Podman."""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import subprocess
import urllib.request
import uuid

import docker
import pytest

from tests.engine.conftest import listed_architectures, untag
from tests.engine.hosts import PODMAN, podman_engine, running_registry
from tests.engine.images import IMAGES, X86_ARGS, checks_passed, run_build_py, x86_wheelhouse

pytestmark = pytest.mark.engine

# The checks that take a minute together and read only the image's content: they ran on this
# image ID, through Podman, when it was built (as test_registry's pulled-image check skips them).
SLOW = ("every_example", "torch_compile", "ca_bundles", "threads", "restricted_pod", "noexec_tmp")


@pytest.fixture(scope="session")
def podman() -> dict:
    """The empty Podman 5 engine of the session (hosts.PODMAN), with the session's registry."""
    return PODMAN.get()


def podman_cli(env: dict, *args: str) -> subprocess.CompletedProcess:
    """Podman's CLI as root, on the test's Podman engine (`env`: its storage and registries)."""
    return subprocess.run(["podman", *args], env={**os.environ, **env}, capture_output=True, text=True, timeout=900)


def rootless_podman(user: str, *args: str) -> subprocess.CompletedProcess:
    """Podman's CLI as `user`, in its home, on its own storage; nothing of root's engine set."""
    # Nor the session's TMPDIR (tests/session.py): a folder of root's, which the user cannot enter.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "CONTAINER", "DOCKER_")) and k != "TMPDIR"}
    home = pwd.getpwnam(user).pw_dir
    return subprocess.run(
        ["runuser", "-u", user, "--", "podman", *args],
        env={**env, "HOME": home, "USER": user},
        cwd=home,
        capture_output=True,
        text=True,
        timeout=900,
    )


@pytest.fixture(scope="session")
def podman_build(podman, pushed) -> dict:
    """The README's build with `--engine podman`, starting from the stages the Docker chain pushed,
    checked through Podman and pushed (images.py: in the background once `pushed`
    ended); its JSON summary, with the build's output as `output`."""
    return IMAGES.result("podman_build")


def test_podman_builds_the_readme_image_checks_it_and_pushes_it(client, x86_build, podman, podman_build, registry):
    engine = podman_build["engine"]
    assert (engine["kind"], engine["url"], engine["chosen_by"]) == ("podman", podman["CONTAINER_HOST"], "--engine podman, CONTAINER_HOST")
    assert engine["version"].startswith("5."), engine
    assert f"torchstack: engine podman at {podman['CONTAINER_HOST']}" in podman_build["output"]
    status = {s["stage"]: s["status"] for s in podman_build["stages"]}
    assert status == {"base": "pulled", "libs": "pulled", "tools": "pulled", "dev": "pulled", "final": "built"}, status
    assert "failed" not in podman_build["checks"] and "passed" in podman_build["checks"], podman_build["checks"]
    # The release image is Podman's own build: the Docker chain's image of the same name is another.
    released = docker.DockerClient(base_url=podman["CONTAINER_HOST"]).images.get(podman_build["final_image"])
    podmans, dockers = (json.loads(i.labels["io.torchstack.build-info"]) for i in (released, client.images.get(x86_build["final_image"])))
    assert podmans.pop("engine")["kind"] == "podman" and dockers.pop("engine")["kind"] == "docker"
    assert podmans == dockers, "the same request records the same build, whichever engine built it"
    assert released.id != client.images.get(x86_build["final_image"]).id
    sent = podman_build["pushed"][-1]
    assert sent["reference"] == f"{registry}/podman/{podman_build['final_image']}" and sent["digest"].startswith("sha256:")


def test_the_pulled_image_is_the_checked_one_and_passes_its_checks(podman, podman_build):
    reference = podman_build["pushed"][-1]["reference"]
    client = docker.DockerClient(base_url=podman["CONTAINER_HOST"])
    checked = client.images.get(podman_build["final_image"]).id
    client.images.remove(reference)  # only the name: the release tag stays
    pulled = podman_cli(podman, "pull", reference)
    assert pulled.returncode == 0, pulled.stderr
    assert client.images.get(reference).id == checked
    tested = run_build_py("test", "--engine", "podman", reference, "-k", " and ".join(f"not {n}" for n in SLOW), env=podman)
    assert checks_passed(tested, podman_build) and "passed" in tested.stdout, tested.stdout[-3000:] + tested.stderr[-3000:]
    shown = run_build_py("inspect", "--engine", "podman", reference, env=podman)
    assert shown.returncode == 0 and f"release tag   {podman_build['release_tag']}\n" in shown.stdout, shown.stderr[-2000:]


@pytest.mark.emulated
def test_podman_joins_the_architectures_in_one_tag(podman, podman_build, arm64_pushed, registry):
    x86 = podman_build["pushed"][-1]["reference"]
    target = f"{registry}/podman/torchstack:r26.11-multiarch"
    both = ["--arch", "x86_64", "--arch", "aarch64"]
    refused = run_build_py("manifest", "--engine", "podman", target, x86, *both, env=podman)
    assert refused.returncode == 2 and refused.stderr.strip().splitlines() == [
        f"torchstack: error: no image for aarch64 among the sources; {target} was not made"
    ], refused.stderr
    made = run_build_py("manifest", "--engine", "podman", target, x86, arm64_pushed, *both, env=podman)
    assert made.returncode == 0, made.stderr[-3000:]
    assert listed_architectures(registry, "podman/torchstack", "r26.11-multiarch") == ["amd64", "arm64"]
    assert made.stdout.strip() == f"{target}@{made.stdout.strip().rpartition('@')[2]}"
    assert "torchstack-manifest-" not in podman_cli(podman, "images", "--format", "{{.Repository}}").stdout


@pytest.fixture(scope="module")
def rootless_user():
    """A host user without privileges (subordinate ids from useradd), removed afterwards with
    its home, where its Podman keeps its images, and its Podman's pause process."""
    name = f"tsrl{uuid.uuid4().hex[:8]}"
    subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", name], check=True, capture_output=True)
    uid = pwd.getpwnam(name).pw_uid
    try:
        assert any(line.startswith(f"{name}:") for line in open("/etc/subuid")), "useradd gave no subordinate uids"
        yield name
    finally:
        subprocess.run(["pkill", "-KILL", "-u", name], capture_output=True)
        subprocess.run(["userdel", "--remove", name], capture_output=True)
        shutil.rmtree(f"/tmp/podman-run-{uid}", ignore_errors=True)
        shutil.rmtree(f"/tmp/containers-user-{uid}", ignore_errors=True)


@pytest.mark.parametrize("user", [["--userns=keep-id"], ["--user", "54321:0"]], ids=["keep-id", "random-uid"])
def test_a_rootless_user_runs_torch_compile(podman_build, rootless_user, user):
    """Rootless Podman, as a host user without privileges: its own storage, the image pulled from
    the registry, run with the user's own id in the container (keep-id) or an arbitrary one."""
    reference = podman_build["pushed"][-1]["reference"]
    if rootless_podman(rootless_user, "image", "exists", reference).returncode != 0:
        pulled = rootless_podman(rootless_user, "pull", "--tls-verify=false", reference)
        assert pulled.returncode == 0, pulled.stderr[-3000:]
    ran = rootless_podman(
        rootless_user, "run", "--rm", "--network", "none", *user, reference, "python3", "/opt/torchstack/examples/compile.py"
    )
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-3000:]
    assert "torch.compile of a ResNet-style model" in ran.stdout and "matches eager mode" in ran.stdout, ran.stdout


ZSTD_LAYER = "application/vnd.oci.image.layer.v1.tar+zstd"


def docker_cli_version() -> tuple[int, ...]:
    """The version of the docker CLI on PATH (the client's, not the engine's), as numbers."""
    said = subprocess.run(["docker", "version", "--format", "{{.Client.Version}}"], capture_output=True, text=True).stdout
    return tuple(int(part) for part in re.findall(r"\d+", said)[:2])


@pytest.fixture
def zstd_registry(client, tmp_path):
    """A registry of the zstd test's own. In the session's registry, the session's Podman (4.3)
    would send these zstd layers in place of gzip ones in its later pushes of the same content:
    the blob-info cache it shares with root's skopeo names them (pushing._as_checked). The names
    the push gives the engine's image are removed after it."""
    (tmp_path / "registry").mkdir()
    with running_registry(tmp_path / "registry", auth=False) as host:
        yield host
        untag(client, f"{host}/")


def test_zstd_layers_are_pushed_signed_listed_pulled_by_podman_and_pass_the_checks(x86_build, zstd_registry, cosign_keys, tmp_path):
    """--compression zstd: the README's release image pushed by skopeo with zstd layers (an OCI
    manifest; its stages, for other hosts' --cache-from, stay gzip) and signed; verify accepts it,
    and a multi-architecture tag made of it (manifest) verifies too. Pulled by an empty Podman
    engine of its own, which reads zstd, and checked there. Not the session's Podman engine: a
    Podman that pulled zstd blobs reuses them when it pushes layers of the same content (its blob
    cache), which would change what the Podman tests push."""
    summary = tmp_path / "zstd.json"
    private, public = (str(key) for key in cosign_keys["ours"])
    push = ["--push", "--compression", "zstd", "--registry", zstd_registry, "--sign", private, "--json", str(summary)]
    sent = run_build_py(*X86_ARGS, "--torch-wheel", x86_wheelhouse(), *push, env=cosign_keys["env"])
    assert sent.returncode == 0, sent.stdout[-3000:] + sent.stderr[-3000:]
    release = json.loads(summary.read_text())["pushed"][-1]
    reference = release["reference"]
    assert reference == f"{zstd_registry}/{x86_build['final_image']}" and release["digest"].startswith("sha256:")
    repository = reference.removeprefix(f"{zstd_registry}/").rpartition(":")[0]
    request = urllib.request.Request(
        f"http://{zstd_registry}/v2/{repository}/manifests/{release['digest']}",
        headers={"Accept": "application/vnd.oci.image.manifest.v1+json"},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        manifest = json.load(answer)
    assert manifest["mediaType"] == "application/vnd.oci.image.manifest.v1+json", manifest
    assert {layer["mediaType"] for layer in manifest["layers"]} == {ZSTD_LAYER}, manifest["layers"]

    # Signed and attested by digest, as a gzip push is: verify names the zstd manifest.
    verified = run_build_py("verify", reference, "--key", public)
    assert verified.returncode == 0, verified.stderr[-2000:]
    assert verified.stdout.strip() == f"{reference.rpartition(':')[0]}@{release['digest']}", verified.stdout
    # A multi-architecture tag over it (one architecture here), signed with each image in it.
    # Docker 20.10's CLI cannot read an OCI manifest: refused in one line naming Podman, which can.
    listed = f"{zstd_registry}/torchstack:zstd-list"
    join = ["manifest", listed, reference, "--arch", "x86_64", "--sign", private]
    made = run_build_py(*join, env=cosign_keys["env"])
    if made.returncode != 0 and docker_cli_version() < (23,):
        assert made.returncode == 2 and "is an OCI image" in made.stderr and "--engine podman" in made.stderr, made.stderr
        assert len(made.stderr.strip().splitlines()) == 1, made.stderr
        made = run_build_py(*join, "--engine", "podman", env=cosign_keys["env"])
    assert made.returncode == 0, made.stderr[-3000:]
    assert listed_architectures(zstd_registry, "torchstack", "zstd-list") == ["amd64"]
    verified = run_build_py("verify", listed, "--key", public)
    assert verified.returncode == 0, verified.stderr[-2000:]
    digests = [line.split()[3].rstrip(":") for line in verified.stderr.splitlines() if "verified" in line]
    assert digests == [release["digest"]], verified.stderr

    with podman_engine(zstd_registry) as podman:
        pulled = podman_cli(podman, "pull", f"{zstd_registry}/{repository}@{release['digest']}")
        assert pulled.returncode == 0, pulled.stderr
        tagged = podman_cli(podman, "tag", f"{zstd_registry}/{repository}@{release['digest']}", reference)
        assert tagged.returncode == 0, tagged.stderr
        tested = run_build_py("test", "--engine", "podman", reference, "-k", " and ".join(f"not {n}" for n in SLOW), env=podman)
    built = json.loads(summary.read_text())
    assert checks_passed(tested, built) and "passed" in tested.stdout, tested.stdout[-3000:] + tested.stderr[-3000:]
