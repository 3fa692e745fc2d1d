"""--sign and verify against the loopback registry: the README's image as the session pushed it
(signed, its SBOM and provenance attested, `pushed`), verified before use; the ways it must fail."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.engine.conftest import copy_into
from tests.engine.images import X86_ARGS, run_build_py, x86_wheelhouse

pytestmark = pytest.mark.engine


def release(pushed) -> tuple[str, str]:
    """(the release image's name in the registry with its tag, its digest), as the push reported them."""
    summary, _ = pushed
    final = summary["pushed"][-1]
    return final["reference"], final["digest"]


def attestation(reference: str, public_key: Path, kind: str) -> dict:
    """The in-toto statement of the `kind` attestation cosign verifies on `reference`."""
    out = subprocess.run(
        ["cosign", "verify-attestation", "--key", str(public_key), "--insecure-ignore-tlog=true", "--type", kind, reference],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(base64.b64decode(json.loads(out.stdout.splitlines()[0])["payload"]))


def test_the_pushed_release_is_signed_its_attestations_describe_it_and_verify_gives_its_digest(client, x86_build, pushed, cosign_keys):
    tagged, digest = release(pushed)
    repository = tagged.rpartition(":")[0]
    summary, output = pushed
    assert summary["signed"] == [
        {
            "reference": f"{repository}@{digest}",
            "recursive": False,
            "attestations": ["https://cyclonedx.org/bom", "https://slsa.dev/provenance/v1"],
        },
        {"reference": f"{repository}@{summary['lazy']['index']}", "recursive": False, "attestations": []},  # --lazy soci
    ]
    assert f"torchstack: signed {repository}@{digest}" in output
    assert str(cosign_keys["ours"][0]) not in json.dumps(summary) and cosign_keys["env"]["COSIGN_PASSWORD"] not in output

    verified = run_build_py("verify", tagged, "--key", str(cosign_keys["ours"][1]), "--pull")
    assert verified.returncode == 0, verified.stderr[-2000:]
    assert verified.stdout.strip() == f"{repository}@{digest}"
    assert f"torchstack: pulled {repository}@{digest} (docker)" in verified.stderr
    assert client.images.get(f"{repository}@{digest}").id == client.images.get(x86_build["final_image"]).id

    # The provenance names what the image's build-info names, by the same sha256, and the torch
    # wheel and the OS image the build used.
    statement = attestation(f"{repository}@{digest}", cosign_keys["ours"][1], "slsaprovenance1")
    assert statement["subject"][0]["digest"]["sha256"] == digest.removeprefix("sha256:")
    inputs = {d["name"]: d["digest"]["sha256"] for d in statement["predicate"]["buildDefinition"]["resolvedDependencies"]}
    info = json.loads(client.images.get(x86_build["final_image"]).labels["io.torchstack.build-info"])
    numpy = info["components"]["numpy"]
    assert inputs[f"numpy-{numpy['version']}"] == numpy["source"]["sha256"]
    (wheel,) = Path(x86_wheelhouse()).glob("torch-*x86_64.whl")
    assert inputs[wheel.name] == hashlib.sha256(wheel.read_bytes()).hexdigest()
    (os_image,) = [name for name in inputs if name.startswith("torchstack-os:")]
    assert inputs[os_image] == client.images.get(os_image).id.removeprefix("sha256:")
    sbom = attestation(f"{repository}@{digest}", cosign_keys["ours"][1], "cyclonedx")
    assert sbom["predicate"]["bomFormat"] == "CycloneDX" and sbom["subject"][0]["digest"]["sha256"] == digest.removeprefix("sha256:")


def test_verify_refuses_a_wrong_key_an_unsigned_image_a_moved_tag_and_another_images_attestation(registry, pushed, cosign_keys):
    tagged, digest = release(pushed)
    repository = tagged.rpartition(":")[0]
    summary, _ = pushed
    stage = next(p for p in summary["pushed"] if "/torchstack-dev:" in p["reference"])  # pushed by --push-stages, not signed
    ours, other = cosign_keys["ours"][1], cosign_keys["other"][1]

    def refused(reference: str, key: Path) -> str:
        result = run_build_py("verify", reference, "--key", str(key))
        assert result.returncode == 1 and result.stdout == "", (result.stdout, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
        return result.stderr

    assert "no signature verifies with this key" in refused(tagged, other)
    assert "no signature verifies with this key" in refused(stage["reference"], ours)
    # Another release's tag moved onto this (signed) image: the image says what it was built as.
    moved = f"r99.99-{tagged.rpartition(':')[2].split('-', 1)[1]}"
    copy_into(registry, "ml/torchstack", "ml/torchstack", digest, moved)
    said = refused(f"{repository}:{moved}", ours)
    assert f"the tag points at an image built as {tagged.rpartition(':')[2]}" in said, said
    # The dev stage signed with our key, and the release image's attestations copied onto it.
    staged = f"{stage['reference'].rpartition(':')[0]}@{stage['digest']}"
    signed = subprocess.run(
        ["cosign", "sign", "--key", str(cosign_keys["ours"][0]), "--tlog-upload=false", "--yes", staged],
        env={**os.environ, **cosign_keys["env"]},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert signed.returncode == 0, signed.stderr
    dev_repository = staged.split("/", 1)[1].split("@")[0]
    attached = f"sha256-{digest.removeprefix('sha256:')}.att"
    # The attestations live beside the release image, in its repository: copied blob by blob is what a
    # registry user would do; here the dev stage's repository mounts them from it.
    copy_into(registry, "ml/torchstack", dev_repository, attached, f"sha256-{stage['digest'].removeprefix('sha256:')}.att")
    assert "attestation" in refused(staged, ours)


def test_podmans_policy_json_admits_the_signed_release_and_refuses_a_wrong_key_an_unsigned_image_and_another_repository(
    client, registry, pushed, cosign_keys, skopeo, tmp_path
):
    """What `./build.py policy` writes, as Podman, CRI-O and OpenShift nodes read it (/etc/containers/
    policy.json, registries.d), enforced by trixie's skopeo on a pull from the loopback registry."""
    tagged, digest = release(pushed)
    summary, _ = pushed
    stage = next(p for p in summary["pushed"] if "/torchstack-tools:" in p["reference"])  # no one signed it
    # The release image and its signature, in another repository of the same registry (a copy
    # with its signature: cosign signed the repository it was pushed to).
    source, tag = tagged.split("/", 1)[1].rpartition(":")[::2]
    signature = f"sha256-{digest.removeprefix('sha256:')}.sig"
    copy_into(registry, source, "ml/elsewhere", digest, tag)
    copy_into(registry, source, "ml/elsewhere", signature, signature)

    def pull(reference: str, key: Path) -> subprocess.CompletedProcess:
        folder = tmp_path / key.stem
        if not folder.exists():
            made = run_build_py("policy", "--registry", f"{registry}/ml", "--key", str(key), "--output", str(folder))
            assert made.returncode == 0, made.stderr
        return subprocess.run(
            [
                "docker",
                "run",
                "--rm",
                "--network",
                "host",
                "-v",
                f"{folder}:/policy:ro",
                "--tmpfs",
                "/pulled",
                skopeo,
                "skopeo",
                "--policy",
                "/policy/policy.json",
                "--registries.d",
                "/policy/registries.d",
                "copy",
                "--src-tls-verify=false",
                f"docker://{reference}",
                "dir:/pulled/image",
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )

    ours, other = cosign_keys["ours"][1], cosign_keys["other"][1]
    accepted = pull(tagged, ours)
    assert accepted.returncode == 0, accepted.stderr[-2000:]
    for reference, key, why in (
        (tagged, other, "cryptographic signature verification failed"),
        (stage["reference"], ours, "A signature was required, but no signature exists"),
        (f"{registry}/ml/elsewhere:{tag}", ours, '/ml/torchstack\\" is not accepted'),
    ):
        refused = pull(reference, key)
        assert refused.returncode != 0 and why in refused.stderr, (reference, refused.stderr[-2000:])


def test_a_rebuild_that_changes_nothing_pushes_and_signs_nothing_new(x86_build, pushed, registry, cosign_keys):
    """A scheduled rebuild of the same request, when neither the stack nor Debian's suites moved: the
    same release image, which the registry already holds under its tag, so no push and no signature."""
    summary, _ = pushed
    again = run_build_py(
        *X86_ARGS,
        "--torch-wheel",
        x86_wheelhouse(),
        "--push",
        "--push-stages",
        "--registry",
        f"{registry}/ml",
        "--sign",
        str(cosign_keys["ours"][0]),
        "--lazy",
        "soci",
        env=cosign_keys["env"],
    )
    assert again.returncode == 0, again.stderr[-3000:]
    release_reference = summary["pushed"][-1]["reference"]
    assert (
        f"torchstack: {release_reference} already holds this release: the same records and packages at the same versions; "
        "nothing new to push or sign" in again.stdout + again.stderr
    )
    assert "torchstack: signed" not in again.stdout + again.stderr
    assert f"has a SOCI index already ({summary['lazy']['index']}): nothing new to index" in again.stdout + again.stderr
