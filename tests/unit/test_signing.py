"""--sign, verify and policy without a registry: the provenance a build attests, the policy files nodes
read, the names verify takes, and the one-line refusals before any work."""

import base64
import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
from datetime import datetime, timezone

import pytest
import yaml
from click.testing import CliRunner

from torchstack.base.errors import UsageProblem
from torchstack.cli import make_cli
from torchstack.publishing import policy, provenance
from torchstack.registries import registry
from torchstack.request.metadata import build_info

PUBLIC_KEY = b"-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----\n"
STARTED, FINISHED = datetime(2026, 11, 25, 10, tzinfo=timezone.utc), datetime(2026, 11, 25, 11, tzinfo=timezone.utc)


def test_the_provenance_names_every_compiled_source_with_the_sha256_the_build_info_records(plan_for):
    plan = plan_for(backend="onednn-acl", build_target="neoverse-v1", release="r26.11")
    found = provenance.predicate(plan, build_info(plan), {"base_image_id": "sha256:" + "ab" * 32}, STARTED, FINISHED)
    inputs = {d["name"]: d["digest"]["sha256"] for d in found["buildDefinition"]["resolvedDependencies"]}
    recorded = build_info(plan)["components"]
    compiled = {name: c["source"]["sha256"] for name, c in recorded.items() if c["method"] == "source"}
    assert compiled and {"torch", "openblas", "acl", "numpy"} <= set(compiled)
    for name, sha256 in compiled.items():
        assert inputs[f"{name}-{recorded[name]['version']}"] == sha256, name
    assert inputs[plan.base_image] == "ab" * 32  # the OS image, by its image ID
    assert all(len(v) == 64 for v in inputs.values())
    # What verify compares with the image's label, and the run's own facts.
    assert found["buildDefinition"]["internalParameters"]["build_info"] == build_info(plan)
    assert found["buildDefinition"]["externalParameters"]["release_tag"] == plan.release_tag
    assert found["runDetails"]["metadata"] == {"startedOn": "2026-11-25T10:00:00+00:00", "finishedOn": "2026-11-25T11:00:00+00:00"}
    assert found["runDetails"]["builder"]["version"]["builder"] == plan.builder


def test_the_provenance_names_the_torch_wheel_by_its_sha256(plan_for, tmp_path):
    plan = plan_for(methods={"torch": "wheel", "openblas": "distro"}, torch_wheel="index", release="r26.11")
    wheel = tmp_path / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    wheel.write_bytes(b"not really a wheel, but a file with a digest")
    plan = dataclasses.replace(plan, torch_wheel_file=wheel)
    inputs = {d["name"]: d["digest"]["sha256"] for d in provenance.inputs(plan, "sha256:" + "cd" * 32)}
    assert inputs[wheel.name] == hashlib.sha256(wheel.read_bytes()).hexdigest()


def test_the_containers_policy_asks_for_a_cosign_signature_of_the_repository_by_this_key():
    found = policy.containers_policy("registry.example/ml", PUBLIC_KEY)
    (rule,) = found["transports"]["docker"]["registry.example/ml"]
    assert rule["type"] == "sigstoreSigned" and base64.b64decode(rule["keyData"]) == PUBLIC_KEY
    assert rule["signedIdentity"] == {"type": "matchRepository"}  # cosign signs the repository, not the tag
    assert found["default"] == [{"type": "insecureAcceptAnything"}]  # other images as the node had them
    assert policy.registries_d("registry.example/ml") == {"docker": {"registry.example/ml": {"use-sigstore-attachments": True}}}


def test_the_policy_command_writes_the_three_files_nodes_read(catalog, tmp_path):
    key = tmp_path / "cosign.pub"
    key.write_bytes(PUBLIC_KEY)
    result = CliRunner().invoke(
        make_cli(catalog), ["policy", "--registry", "registry.example/ml", "--key", str(key), "--output", str(tmp_path / "out")]
    )
    assert result.exit_code == 0, result.output
    assert result.output.split() == [str(tmp_path / "out" / name) for name in (policy.POLICY, policy.REGISTRIES_D, policy.KYVERNO)]
    assert json.loads((tmp_path / "out" / policy.POLICY).read_text())["transports"]["docker"]["registry.example/ml"]
    kyverno = yaml.safe_load((tmp_path / "out" / policy.KYVERNO).read_text())
    (rule,) = kyverno["spec"]["rules"]
    (images,) = rule["verifyImages"]
    assert images["imageReferences"] == ["registry.example/ml/*"] and images["verifyDigest"] and images["required"]
    keys = images["attestors"][0]["entries"][0]["keys"]
    assert keys["publicKeys"] == PUBLIC_KEY.decode().strip()
    assert keys["rekor"] == {"ignoreTlog": True} and keys["ctlog"] == {"ignoreSCT": True}  # offline
    assert images["attestations"][0]["type"] == provenance.PREDICATE_TYPE


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "127.0.0.1:5000/ml/torchstack:r26.11-torch-2.13.0-onednn",
            ("127.0.0.1:5000", "ml/torchstack", "r26.11-torch-2.13.0-onednn", None),
        ),
        ("ghcr.io/acme/torchstack@sha256:" + "0" * 64, ("ghcr.io", "acme/torchstack", None, "sha256:" + "0" * 64)),
        ("localhost/torchstack", ("localhost", "torchstack", "latest", None)),
    ],
)
def test_verify_reads_a_registry_reference(text, expected):
    found = registry.parse(text)
    assert (found.host, found.repository, found.tag, found.digest) == expected


@pytest.mark.parametrize("text", ["torchstack:r26.11", "ghcr.io/acme/torchstack@sha256:abc"])
def test_a_name_verify_cannot_check_is_a_usage_error(text):
    with pytest.raises(UsageProblem):
        registry.parse(text)


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--sign", "cosign.key"], "--sign signs what --push sends: add --push and --registry"),
        (["--compression", "zstd"], "--compression zstd applies to what --push sends: add --push and --registry"),
        (
            ["--sign", "/nonexistent/cosign.key", "--push", "--registry", "registry.example/ml"],
            "--sign /nonexistent/cosign.key: no such file; give a cosign private key",
        ),
        (["verify", "torchstack:r26.11", "--key", "awskms://alias/torchstack"], "torchstack:r26.11: name the registry too"),
        (["verify", "registry.example/ml/torchstack:r26.11", "--key", "/nonexistent.pub"], "--key /nonexistent.pub: no such file"),
        (["verify", "torchstack:r26.11", "--key", "cosign.pub", "--archive-keyring", __file__], "and --json go with --rebuild"),
    ],
)
def test_signing_options_are_refused_in_one_line_before_any_work(catalog, args, said):
    result = CliRunner().invoke(
        make_cli(catalog), ["--torch-from", "wheel", "--openblas-from", "distro", *args] if args[0].startswith("--") else args
    )
    assert result.exit_code == 2, result.output
    assert said in result.output and len(result.output.strip().splitlines()) == 1, result.output


@pytest.fixture(scope="module")
def cosign_pair(tmp_path_factory):
    """A real cosign key pair with a password (cosign is what --sign runs: setup-host.sh installs it)."""
    if not shutil.which("cosign"):  # a host with the toolkit alone (setup-host.sh --toolkit-only): CI's quick checks
        pytest.skip("cosign is missing: scripts/setup-host.sh installs it")
    folder = tmp_path_factory.mktemp("cosign")
    made = subprocess.run(
        ["cosign", "generate-key-pair", "--output-key-prefix", str(folder / "k")],
        env={**os.environ, "COSIGN_PASSWORD": "right"},
        capture_output=True,
        timeout=60,
    )
    assert made.returncode == 0, made.stderr
    (folder / "not-a-key").write_text("not a key\n")
    return folder


@pytest.mark.parametrize(
    ("key", "password", "said"),
    [
        ("k.key", "wrong", "--sign {key}: cosign cannot load it as a private key with the COSIGN_PASSWORD given: decrypt:"),
        ("k.pub", "right", "--sign {key}: cosign cannot load it as a private key with the COSIGN_PASSWORD given: unsupported pem type"),
        ("not-a-key", "right", "--sign {key}: cosign cannot load it as a private key with the COSIGN_PASSWORD given: invalid pem block"),
        ("k.key", None, "--sign {key}: set COSIGN_PASSWORD to its password (empty for none)"),
    ],
)
def test_a_key_cosign_cannot_load_is_refused_before_any_work(catalog, cosign_pair, monkeypatch, key, password, said):
    """Before the registry is asked and before any stage: nothing is built for a signature that would fail."""
    asked = []
    monkeypatch.setattr("torchstack.registries.registry.check_push_access", asked.append)
    if password is None:
        monkeypatch.delenv("COSIGN_PASSWORD", raising=False)
    else:
        monkeypatch.setenv("COSIGN_PASSWORD", password)
    path = cosign_pair / key
    args = ["--torch-from", "wheel", "--openblas-from", "distro", "--push", "--registry", "registry.example/ml", "--sign", str(path)]
    result = CliRunner().invoke(make_cli(catalog), args)
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
    assert said.format(key=path) in result.output, result.output
    assert asked == [], "the registry was asked before the key was refused"


def test_a_key_cosign_loads_passes_the_settling_step(catalog, cosign_pair, monkeypatch):
    monkeypatch.setattr("torchstack.registries.registry.check_push_access", lambda remote: None)
    monkeypatch.setenv("COSIGN_PASSWORD", "right")
    key = cosign_pair / "k.key"
    result = CliRunner().invoke(make_cli(catalog), ["--dry-run", "--push", "--registry", "registry.example/ml", "--sign", str(key)])
    assert result.exit_code == 0, result.output
    assert "sign          the pushed release image" in result.output
