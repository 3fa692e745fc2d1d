"""Images into a registry: a real registry server (Debian's docker-registry) on loopback, started
by the tests. The README's x86_64 image is pushed with its stage images, pulled back and checked;
a registry that needs a login refuses the push in one line."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import urllib.request
import uuid
from pathlib import Path

import pytest

from tests.engine.conftest import listed_architectures, untag
from tests.engine.hosts import free_port, running_registry
from tests.engine.images import X86_ARGS, checks_passed, run_build_py
from torchstack.publishing import pushing

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def locked_registry(tmp_path_factory):
    with running_registry(tmp_path_factory.mktemp("locked"), auth=True) as address:
        yield address


def registry_tags(address: str, repository: str) -> list[str]:
    with urllib.request.urlopen(f"http://{address}/v2/{repository}/tags/list", timeout=10) as answer:
        return json.load(answer)["tags"] or []


def test_push_sends_the_checked_release_image_and_its_stages(client, x86_build, registry, pushed):
    summary, output = pushed
    tag = x86_build["release_tag"]
    references = [p["reference"] for p in summary["pushed"]]
    # The OS image, then each stage under its content name, then the release image: under a dated
    # tag that keeps naming it, and under the release tag, which moves to the next image that differs.
    stages = [f"{registry}/ml/{s['image']}" for s in x86_build["stages"] if s["stage"] != "final"]
    dated = references[-2]
    assert re.fullmatch(rf"{re.escape(registry)}/ml/torchstack:{re.escape(tag)}-20\d{{10}}", dated), dated
    assert references == [f"{registry}/ml/torchstack-os:bookworm-amd64", *stages, dated, f"{registry}/ml/torchstack:{tag}"]
    assert summary["pushed"][-2]["digest"] == summary["pushed"][-1]["digest"]
    for reference in references:  # (the registry may hold other tags of a repository: the arm64 image's)
        repository, _, pushed_tag = reference.removeprefix(f"{registry}/").rpartition(":")
        assert pushed_tag in registry_tags(registry, repository), reference
    final = summary["pushed"][-1]
    assert final["digest"].startswith("sha256:") and final["layers"] > 0
    # The release image shares every layer but its last ones with the stages pushed before it.
    assert "already there" in output
    assert "pushing" in output, "the push shows its progress"


def test_the_pulled_image_is_the_checked_one_and_passes_its_checks(client, x86_build, registry, pushed):
    reference = pushed[0]["pushed"][-1]["reference"]
    client.images.remove(reference)  # only the name: the image keeps its release tag
    pulled = subprocess.run(["docker", "pull", reference], capture_output=True, text=True, timeout=600)
    assert pulled.returncode == 0, pulled.stderr
    assert client.images.get(reference).id == client.images.get(x86_build["final_image"]).id
    # The very image ID whose every check passed in this session (x86_build, --recheck): the checks
    # run again under the pulled name, but for those that take a minute together and read only the
    # image's content (the examples, torch.compile, an export of the whole file system, the runs
    # under a CPU limit and in restricted pods).
    slow = ("every_example", "torch_compile", "ca_bundles", "threads", "restricted_pod", "noexec_tmp")
    checked = run_build_py("test", reference, "-k", " and ".join(f"not {name}" for name in slow))
    said = checked.stdout[-3000:] + checked.stderr[-3000:]
    assert checks_passed(checked, x86_build) and "passed" in checked.stdout + checked.stderr, said


def test_inspect_reads_the_build_manifest_and_sbom_of_a_pulled_image(x86_build, pushed):
    reference = pushed[0]["pushed"][-1]["reference"]
    shown = run_build_py("inspect", reference)
    assert shown.returncode == 0, shown.stderr[-3000:]
    assert f"release tag   {x86_build['release_tag']}\n" in shown.stdout, shown.stdout
    assert "sbom          CycloneDX 1.6," in shown.stdout and "Debian packages" in shown.stdout, shown.stdout
    report = json.loads(run_build_py("inspect", reference, "--json").stdout)
    assert report["labels_agree"] and report["build_info"]["release_tag"] == x86_build["release_tag"]
    assert report["sbom"]["key_versions"]["torch"] == report["build_info"]["torch_version"]
    assert report["sbom"]["debian_packages"] > 50 and report["sbom"]["python_packages"] > 5
    assert report["build_info"]["toolkit"]["revision"], "the toolkit's revision is in the build manifest"
    # The copy next to the build log is the image's own.
    assert Path(x86_build["sbom"]).read_text().startswith("{") and Path(x86_build["sbom"]).name.endswith(".sbom.cdx.json")


def test_a_registry_that_needs_a_login_is_refused_before_any_work(client, locked_registry, tmp_path):
    """No credentials in a new Docker config: the push is refused in one line (exit 2) before any
    stage is built, not after an hour's build."""
    config = tmp_path / "docker-config"
    config.mkdir()
    result = run_build_py(*X86_ARGS, "--push", "--registry", f"{locked_registry}/ml", env={"DOCKER_CONFIG": str(config)})
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stdout[-2000:] + result.stderr[-2000:]
    assert result.stderr.strip().splitlines() == [
        f"torchstack: error: --push: the registry {locked_registry} asks for a login and this host stored none: "
        f"log in with `docker login {locked_registry}` or `podman login {locked_registry}`"
    ], result.stderr
    assert "base image" not in result.stdout + result.stderr


def test_a_registry_that_does_not_answer_is_refused_before_any_work(client):
    address = f"127.0.0.1:{free_port()}"
    result = run_build_py(*X86_ARGS, "--push", "--registry", f"{address}/ml")
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    assert result.stderr.strip().splitlines() == [
        f"torchstack: error: --push: the registry {address} does not answer (connection refused): check --registry, or start the registry"
    ], result.stderr
    assert "base image" not in result.stdout + result.stderr


@pytest.mark.emulated
def test_manifest_joins_the_x86_64_and_the_emulated_arm64_image(
    client, x86_build, arm64_build, arm64_pushed, registry, pushed, cosign_keys
):
    """The two images CI builds, one multi-architecture tag, signed with each image in it, verified;
    refused while an architecture is missing."""
    x86, arm64 = pushed[0]["pushed"][-1]["reference"], arm64_pushed
    target = f"{registry}/ml/torchstack:r26.11-multiarch"
    both = ["--arch", "x86_64", "--arch", "aarch64"]

    refused = run_build_py("manifest", target, x86, *both)
    assert refused.returncode == 2 and refused.stderr.strip().splitlines() == [
        f"torchstack: error: no image for aarch64 among the sources; {target} was not made"
    ], refused.stderr
    assert "r26.11-multiarch" not in registry_tags(registry, "ml/torchstack")
    twice = run_build_py("manifest", target, x86, x86, *both)
    assert twice.returncode == 2 and "both x86_64 images" in twice.stderr, twice.stderr

    made = run_build_py("manifest", target, x86, arm64, *both, "--sign", str(cosign_keys["ours"][0]), env=cosign_keys["env"])
    assert made.returncode == 0, made.stderr[-3000:]
    assert listed_architectures(registry, "ml/torchstack", "r26.11-multiarch") == ["amd64", "arm64"]
    # Each image of the list verifies: the list's signature and each image's (--recursive), and the
    # SBOM and provenance each image's own build attested.
    verified = run_build_py("verify", target, "--key", str(cosign_keys["ours"][1]))
    assert verified.returncode == 0, verified.stderr[-2000:]
    assert verified.stdout.strip() == made.stdout.strip().replace(":r26.11-multiarch@", "@"), (verified.stdout, made.stdout)
    assert sorted(line.split()[2] for line in verified.stderr.splitlines() if "verified" in line) == ["linux/amd64", "linux/arm64"]
    # Pulled for arm64, the tag gives the arm64 image itself.
    client.images.remove(arm64)
    pulled = subprocess.run(["docker", "pull", "--platform", "linux/arm64", target], capture_output=True, text=True, timeout=900)
    try:
        assert pulled.returncode == 0, pulled.stderr
        assert client.images.get(target).id == client.images.get(arm64_build["final_image"]).id
    finally:
        untag(client, f"{registry}/")


def test_inspect_of_an_image_that_is_not_here_or_not_ours_is_one_line(client, x86_build):
    missing = run_build_py("inspect", "torchstack:no-such-tag")
    assert missing.returncode == 2 and missing.stderr.strip().splitlines() == [
        "torchstack: error: torchstack:no-such-tag: no such image here (docker pull it first)"
    ], missing.stderr
    base = client.images.get(x86_build["stages"][0]["image"])  # a stage of ours, with the label
    foreign = run_build_py("inspect", x86_build["stages"][0]["image"])
    assert foreign.returncode == 0 and "sbom          none in this image" in foreign.stdout, foreign.stdout + foreign.stderr
    assert base.labels["io.torchstack.stage"] == "base"


def _put_image(address: str, repository: str, manifest_type: str, layer_type: str, config: bytes) -> str:
    """An image put into the registry over its HTTP API, as a push leaves one: its blobs (the layer's
    bytes do not matter to the registry), then its manifest. Returns the manifest's digest."""

    def blob(data: bytes) -> dict:
        digest = f"sha256:{hashlib.sha256(data).hexdigest()}"
        request = urllib.request.Request(f"http://{address}/v2/{repository}/blobs/uploads/", method="POST")
        with urllib.request.urlopen(request, timeout=10) as answer:
            location = answer.headers["Location"]
        upload = f"{location}{'&' if '?' in location else '?'}digest={digest}"
        octets = {"Content-Type": "application/octet-stream"}
        urllib.request.urlopen(urllib.request.Request(upload, data=data, method="PUT", headers=octets), timeout=10).close()
        return {"digest": digest, "size": len(data)}

    oci = manifest_type.startswith("application/vnd.oci")
    config_type = "application/vnd.oci.image.config.v1+json" if oci else "application/vnd.docker.container.image.v1+json"
    manifest = {
        "schemaVersion": 2,
        "mediaType": manifest_type,
        "config": {"mediaType": config_type, **blob(config)},
        "layers": [{"mediaType": layer_type, **blob(uuid.uuid4().bytes * 64)}],
    }
    body = json.dumps(manifest).encode()
    request = urllib.request.Request(
        f"http://{address}/v2/{repository}/manifests/latest", data=body, method="PUT", headers={"Content-Type": manifest_type}
    )
    urllib.request.urlopen(request, timeout=10).close()
    return f"sha256:{hashlib.sha256(body).hexdigest()}"


def test_a_podman_push_the_registry_holds_as_another_image_is_refused_with_what_to_do(registry):
    """What Podman before 4.6 leaves in a registry when its blob-info cache names zstd layers of
    the same content there (an earlier --compression zstd push): an OCI manifest with zstd layers
    and a rewritten configuration. Read back after the push, it is refused in one line; the image
    as built is not; a registry that cannot be read back is said, and the push stands."""
    built = json.dumps({"architecture": "amd64", "os": "linux", "config": {}, "rootfs": {"type": "layers", "diff_ids": []}}).encode()
    image_id = f"sha256:{hashlib.sha256(built).hexdigest()}"
    docker_gzip = ("application/vnd.docker.distribution.manifest.v2+json", "application/vnd.docker.image.rootfs.diff.tar.gzip")
    as_built = _put_image(registry, "as-built/torchstack", *docker_gzip, built)
    rewritten = _put_image(
        registry,
        "rewritten/torchstack",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.oci.image.layer.v1.tar+zstd",
        json.dumps(json.loads(built)).encode() + b"\n",
    )
    said: list[str] = []
    pushing._as_checked(f"{registry}/as-built/torchstack@{as_built}", image_id, said.append)
    assert said == []
    with pytest.raises(pushing.PushFailed) as refused:
        pushing._as_checked(f"{registry}/rewritten/torchstack@{rewritten}", image_id, said.append)
    line = str(refused.value)
    assert "\n" not in line and f"is not the checked image {image_id}" in line, line
    assert "application/vnd.oci.image.layer.v1.tar+zstd layers" in line and "blob-info-cache-v1.boltdb" in line, line
    nowhere = f"127.0.0.1:{free_port()}/as-built/torchstack@{as_built}"
    pushing._as_checked(nowhere, image_id, said.append)
    assert len(said) == 1 and said[0].startswith(f"torchstack: {nowhere} could not be read back"), said
