"""--sign and verify against the loopback registry: the README's image as the session pushed it
(signed, its SBOM and provenance attested, `pushed`), verified before use; the ways it must fail."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import urllib.request
from pathlib import Path

import pytest

from tests.engine.conftest import copy_into
from tests.engine.images import X86_ARGS, run_build_py, x86_wheelhouse

pytestmark = pytest.mark.engine


def cosign_release(binary: str) -> int:
    """3 where `binary` signs into Sigstore bundles by default (cosign 3), else 2: what its `sign` options say."""
    said = subprocess.run([binary, "sign", "--help"], capture_output=True, text=True, timeout=60).stdout
    return 3 if "--use-signing-config=true" in said else 2


# The tests' cosign 3 (scripts/setup-host.sh --tests) and the host's own cosign (2.5 on Debian 12 and 13),
# with the forms --sign makes by default with the host's.
COSIGN3 = Path("/usr/local/lib/torchstack/cosign3")
HOST_COSIGN = shutil.which("cosign")
HOST_FORMS = ("bundle", "legacy") if HOST_COSIGN and cosign_release(HOST_COSIGN) == 3 else ("legacy",)


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


def pulled_with_policy(skopeo: str, registry: str, reference: str, key: Path, folder: Path) -> subprocess.CompletedProcess:
    """`reference` copied by trixie's skopeo under what `./build.py policy` writes for `key` (in `folder`),
    as a Podman or CRI-O node enforces it on a pull from the loopback registry."""
    if not folder.exists():
        made = run_build_py("policy", "--registry", f"{registry}/{reference.split('/')[1]}", "--key", str(key), "--output", str(folder))
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


def test_the_pushed_release_is_signed_its_attestations_describe_it_and_verify_gives_its_digest(client, x86_build, pushed, cosign_keys):
    tagged, digest = release(pushed)
    repository = tagged.rpartition(":")[0]
    summary, output = pushed
    assert summary["signed"] == [
        {
            "reference": f"{repository}@{digest}",
            "recursive": False,
            "attestations": ["https://cyclonedx.org/bom", "https://slsa.dev/provenance/v1"],
            "forms": list(HOST_FORMS),
        },
        {"reference": f"{repository}@{summary['lazy']['index']}", "recursive": False, "attestations": [], "forms": list(HOST_FORMS)},
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
        return pulled_with_policy(skopeo, registry, reference, key, tmp_path / key.stem)

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


def tags_of(registry: str, repository: str) -> list[str]:
    with urllib.request.urlopen(f"http://{registry}/v2/{repository}/tags/list") as listed:
        return json.load(listed)["tags"] or []


def first_on_path(folder: Path) -> dict:
    return {"PATH": f"{folder}{os.pathsep}{os.environ['PATH']}"}


def signed_push(registry: str, namespace: str, cosign_keys: dict, folder: Path, env: dict | None = None) -> tuple:
    """The README's request again (a no-op rebuild: its checks not run again) pushed to `namespace` and
    signed; its exit status, output and JSON summary."""
    summary = folder / f"{namespace}.json"
    result = run_build_py(
        *X86_ARGS,
        "--torch-wheel",
        x86_wheelhouse(),
        "--push",
        "--registry",
        f"{registry}/{namespace}",
        "--sign",
        str(cosign_keys["ours"][0]),
        "--json",
        str(summary),
        env={**cosign_keys["env"], **(env or {})},
    )
    return result, result.stdout + result.stderr, json.loads(summary.read_text()) if result.returncode == 0 else None


def verified(reference: str, public_key: Path, env: dict | None = None) -> str:
    """What `./build.py verify` says of `reference` with the cosign first on PATH; it must pass."""
    result = run_build_py("verify", reference, "--key", str(public_key), env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stderr


@pytest.mark.skipif(not (COSIGN3 / "cosign").exists(), reason="scripts/setup-host.sh --tests installs the tests' cosign 3")
def test_with_cosign_3_first_on_path_the_release_is_signed_in_both_forms_each_cosign_verifies_and_podman_admits_it(
    x86_build, pushed, registry, cosign_keys, skopeo, tmp_path
):
    result, output, summary = signed_push(registry, "c3", cosign_keys, tmp_path, first_on_path(COSIGN3))
    assert result.returncode == 0, output[-3000:]
    release = summary["pushed"][-1]
    repository, tag = release["reference"].split("/", 1)[1].rpartition(":")[::2]
    hexdigest = release["digest"].removeprefix("sha256:")
    assert summary["signed"][0]["forms"] == ["bundle", "legacy"]
    assert "a Sigstore bundle (OCI referrer) and the legacy .sig/.att tags" in output
    # The bundles through the referrers tag (Distribution 2.8 has no referrers API), the legacy tags, and the
    # release tag put last, at the dated tag's image.
    listed = tags_of(registry, repository)
    assert {tag, f"sha256-{hexdigest}", f"sha256-{hexdigest}.sig", f"sha256-{hexdigest}.att"} <= set(listed), listed
    (dated,) = [t for t in listed if t.startswith(f"{tag}-")]
    assert output.index(f"signed {registry}/{repository}@{release['digest']}") < output.index(f"tagged {release['reference']}")
    assert summary["pushed"][-2]["reference"].endswith(f":{dated}") and summary["pushed"][-2]["digest"] == release["digest"]

    public = cosign_keys["ours"][1]
    said = verified(release["reference"], public, first_on_path(COSIGN3))
    assert "signed as: a Sigstore bundle (OCI referrer), the legacy .sig/.att tags; cosign 3" in said, said
    said = verified(release["reference"], public)  # the host's cosign
    assert "the legacy .sig/.att tags" in said, said
    # cosign 3 reads what the host's cosign signed in the session's first push.
    said = verified(pushed[0]["pushed"][-1]["reference"], public, first_on_path(COSIGN3))
    assert "signed as: the legacy .sig/.att tags" in said or HOST_FORMS == ("bundle", "legacy"), said
    # Podman's and CRI-O's policy.json admits the legacy form cosign 3 made.
    admitted = pulled_with_policy(skopeo, registry, release["reference"], public, tmp_path / "policy")
    assert admitted.returncode == 0, admitted.stderr[-2000:]

    # Only a bundle (--signature-format bundle, here on the libs stage, which no other test signs): cosign 3
    # verifies its signature; a cosign 2 says in one line that it reads no bundle.
    stage = next(p for p in pushed[0]["pushed"] if "/torchstack-libs:" in p["reference"])
    staged = f"{stage['reference'].rpartition(':')[0]}@{stage['digest']}"
    options = ["--use-signing-config=false", "--tlog-upload=false", "--yes"]
    made = subprocess.run(
        [str(COSIGN3 / "cosign"), "sign", "--key", str(cosign_keys["ours"][0]), *options, staged],
        env={**os.environ, **cosign_keys["env"]},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert made.returncode == 0, made.stderr
    if HOST_FORMS == ("legacy",):
        refused = run_build_py("verify", staged, "--key", str(public))
        assert refused.returncode == 1 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
        assert "signed only as a Sigstore bundle, which cosign 2" in refused.stderr and "verify with cosign 3" in refused.stderr


def test_a_signing_that_fails_after_the_push_leaves_the_release_tag_unset_and_the_same_command_again_completes_it(
    x86_build, pushed, registry, cosign_keys, tmp_path
):
    failing = tmp_path / "failing"
    failing.mkdir()
    (failing / "cosign").write_text(
        f'#!/bin/sh\nif [ "$1" = attest ]; then echo "Error: connection reset by peer" >&2; exit 1; fi\nexec {HOST_COSIGN} "$@"\n'
    )
    (failing / "cosign").chmod(0o755)
    result, output, _ = signed_push(registry, "half", cosign_keys, tmp_path, first_on_path(failing))
    assert result.returncode == 2, output[-3000:]
    (line,) = [line for line in result.stderr.strip().splitlines() if "error" in line]
    assert "connection reset by peer" in line and "is left where it was: the same command again signs" in line, line
    assert "Traceback" not in output
    listed = tags_of(registry, "half/torchstack")
    release_tag = pushed[0]["pushed"][-1]["reference"].rpartition(":")[2]
    assert release_tag not in listed and [t for t in listed if t.startswith(f"{release_tag}-")], listed

    result, output, summary = signed_push(registry, "half", cosign_keys, tmp_path)
    assert result.returncode == 0, output[-3000:]
    assert "holds this release already (an earlier run pushed it): not pushed again" in output
    assert summary["pushed"][-1]["reference"].endswith(f":{release_tag}")
    verified(summary["pushed"][-1]["reference"], cosign_keys["ours"][1])


def test_a_release_published_unsigned_is_signed_by_the_next_run_that_asks_for_it(x86_build, pushed, registry, cosign_keys, tmp_path):
    """The session's release under its tag in another repository, without its signatures (another tool
    pushed it): the same request with --sign signs it, and pushes nothing."""
    release = pushed[0]["pushed"][-1]
    source, tag = release["reference"].split("/", 1)[1].rpartition(":")[::2]
    copy_into(registry, source, "unsigned/torchstack", release["digest"], tag)
    result, output, summary = signed_push(registry, "unsigned", cosign_keys, tmp_path)
    assert result.returncode == 0, output[-3000:]
    assert "already holds this release, not signed as --sign asks: signing it (nothing new to push)" in output
    assert summary["pushed"] == [] and summary["signed"][0]["reference"] == f"{registry}/unsigned/torchstack@{release['digest']}"
    verified(f"{registry}/unsigned/torchstack:{tag}", cosign_keys["ours"][1])
