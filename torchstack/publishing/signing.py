"""Cosign signatures on pushed images, their SBOM, provenance attested with them, offline: made after the push, verified before use.

Keys are cosign's: a key file (its password in COSIGN_PASSWORD, which cosign reads itself) or any
key reference cosign accepts (awskms://, gcpkms://, hashivault://, k8s://, env://). Nothing here
writes a key or its password anywhere: cosign gets the reference, the environment its password.
No transparency log: signing and verifying work with no network beyond the registry."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from torchstack.base.errors import HostNotReady, ToolkitError, UsageProblem
from torchstack.build.sbom import BUILD_INFO_LABEL
from torchstack.publishing import lazy, provenance
from torchstack.registries import registry
from torchstack.request.plan import Plan

OFFLINE_SIGN = ("--tlog-upload=false", "--yes")
OFFLINE_VERIFY = ("--insecure-ignore-tlog=true",)
# cosign's --type for each attestation, and the predicate type its statement then names.
ATTESTATIONS = {"cyclonedx": "https://cyclonedx.org/bom", "slsaprovenance1": "https://slsa.dev/provenance/v1"}
VERSION_LABEL = "org.opencontainers.image.version"
KEY_SCHEMES = ("awskms://", "gcpkms://", "azurekms://", "hashivault://", "k8s://", "env://", "pkcs11:")


class SigningFailed(ToolkitError):
    """cosign could not sign or attest a pushed image."""


class NotVerified(ToolkitError):
    """An image's signature or attestations do not hold."""


def require_cosign(option: str) -> None:
    if not shutil.which("cosign"):
        raise HostNotReady(f"missing cosign, for {option}: bash scripts/setup-host.sh installs it (Debian trixie's package)")


def check_key(key: str, option: str, private: bool) -> str:
    """A key reference cosign takes, on a host that has cosign: a KMS-style URI as it is, else a key
    file, which must exist. Refused in one line before any work."""
    if key.startswith(KEY_SCHEMES):
        found = key
    else:
        path = Path(key).expanduser()
        if not path.is_file():
            kind = "a cosign private key (cosign generate-key-pair)" if private else "a public key (cosign.pub)"
            raise UsageProblem(f"{option} {key}: no such file; give {kind} or a KMS reference ({', '.join(KEY_SCHEMES[:4])}...)")
        found = str(path.resolve())
    require_cosign(option)
    if private and not key.startswith(KEY_SCHEMES[:5]):  # a file or env://, loaded here; a KMS is asked when signing
        if "COSIGN_PASSWORD" not in os.environ:
            raise UsageProblem(f"{option} {key}: set COSIGN_PASSWORD to its password (empty for none): cosign would ask on a terminal")
        _cosign(
            f"{option} {key}: cosign cannot load it as a private key with the COSIGN_PASSWORD given",
            "public-key",
            "--key",
            found,
            failure=UsageProblem,
        )
    return found


def _cosign(what: str, *args: str, failure: type[ToolkitError] = SigningFailed) -> str:
    result = subprocess.run(["cosign", *args], capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if result.returncode != 0:
        said = [line.removeprefix("Error: ") for line in result.stderr.splitlines() if line.startswith("Error: ")]
        message = " ".join((said[-1] if said else result.stderr.strip()[-300:] or "no reason given").split())
        raise failure(f"{what}: {message[:300]}")
    return result.stdout


def sign(reference: str, key: str, sbom: Path | None, provenance: dict | None, recursive: bool = False) -> dict:
    """Sign `reference` (REPOSITORY@sha256:...), a list with each image in it when `recursive`, and
    attach the SBOM and the provenance as attestations with the same key. What was signed, as the
    JSON summary records it (no key)."""
    _cosign(f"signing {reference}", "sign", "--key", key, *OFFLINE_SIGN, *(["--recursive"] if recursive else []), reference)
    attached = []
    with tempfile.TemporaryDirectory(prefix="torchstack-attest-") as work:
        for kind, predicate in (("cyclonedx", sbom), ("slsaprovenance1", provenance)):
            if predicate is None:
                continue
            if isinstance(predicate, dict):
                (Path(work) / "provenance.json").write_text(json.dumps(predicate, indent=1))
                predicate = Path(work) / "provenance.json"
            _cosign(
                f"attesting {kind} to {reference}",
                "attest",
                "--key",
                key,
                *OFFLINE_SIGN,
                "--type",
                kind,
                "--predicate",
                str(predicate),
                reference,
            )
            attached.append(ATTESTATIONS[kind])
    return {"reference": reference, "recursive": recursive, "attestations": attached}


def sign_release(
    plan: Plan,
    info: dict,
    pushed: list,
    registry_name: str,
    key: str,
    sbom: Path | None,
    record: dict,
    started: datetime,
) -> dict:
    """--sign: the release image as pushed (by digest), signed, with its SBOM and its provenance
    (with `info`, the image's build-info label, and `record`, what makes the build again) attested."""
    remote = f"{registry_name}/{plan.top_image}"
    done = next(p for p in pushed if p.reference == remote)
    predicate = provenance.predicate(plan, info, record, started, datetime.now(timezone.utc))
    return sign(f"{remote.rpartition(':')[0]}@{done.digest}", key, sbom, predicate)


@dataclass
class Verified:
    reference: str  # REPOSITORY@sha256:... to pull
    images: list[str] = field(default_factory=list)  # each image verified (a list's images), with its platform
    lazy: dict[str, list[str]] = field(default_factory=dict)  # each image's SOCI indexes (lazy.py), each signed


def _statements(reference: str, key: str, kind: str) -> list[dict]:
    out = _cosign(
        f"{reference}: no {kind} attestation verifies with this key",
        "verify-attestation",
        "--key",
        key,
        *OFFLINE_VERIFY,
        "--type",
        kind,
        reference,
        failure=NotVerified,
    )
    found = []
    for line in out.splitlines():
        if line.strip().startswith("{"):
            envelope = json.loads(line)
            found.append(json.loads(base64.b64decode(envelope["payload"])))
    return found


def _verify_signature(pinned: str, key: str, unsigned: str = "unsigned, or signed with another") -> None:
    _cosign(
        f"{pinned}: no signature verifies with this key ({unsigned})",
        "verify",
        "--key",
        key,
        *OFFLINE_VERIFY,
        pinned,
        failure=NotVerified,
    )


def _verify_lazy(where: registry.Registry, ref: registry.Reference, digest: str, key: str) -> list[str]:
    """The SOCI indexes of the image `digest`, each signed with `key`: a lazy node reads the image's
    files through the one it finds, so one that nobody signed is refused as an unsigned image is."""
    found = lazy.indexes(where, ref.repository, digest)
    for index in found:
        why = f"it is a SOCI index of {digest}, through which a lazy node reads the image's files: sign it, or delete it"
        _verify_signature(f"{ref.name}@{index}", key, why)
    return found


def _verify_image(where: registry.Registry, ref: registry.Reference, digest: str, manifest: dict, key: str, tag: str | None) -> str:
    """One image (not a list): its signature, its two attestations, each about this digest, and its
    provenance about what its labels say. The image's platform."""
    pinned = f"{ref.name}@{digest}"
    _verify_signature(pinned, key)
    config = where.config(ref.repository, manifest)
    labels = config.get("config", {}).get("Labels") or {}
    if tag and labels.get(VERSION_LABEL) != tag:
        built_as = labels.get(VERSION_LABEL) or "no release of ours"
        raise NotVerified(f"{ref}: the tag points at an image built as {built_as} ({digest}); verify a release tag or a digest")
    for kind, predicate_type in ATTESTATIONS.items():
        statements = _statements(pinned, key, kind)
        about = [
            s
            for s in statements
            if s.get("predicateType") == predicate_type
            and any(f"sha256:{sub.get('digest', {}).get('sha256')}" == digest for sub in s.get("subject", []))
        ]
        if not about:
            raise NotVerified(f"{pinned}: its {kind} attestation is about another image, not this digest")
        if kind == "slsaprovenance1":
            described = about[-1]["predicate"].get("buildDefinition", {}).get("internalParameters", {}).get("build_info")
            if BUILD_INFO_LABEL not in labels or described != json.loads(labels[BUILD_INFO_LABEL]):
                raise NotVerified(f"{pinned}: its provenance describes another build than the image's build-info label")
    return f"{config.get('os', 'linux')}/{config.get('architecture', '?')}"


def verify(text: str, key: str) -> Verified:
    """Check what `text` (a registry reference) names now: the signature of it (and, for a list, of
    each image in it), its attestations, its provenance against its labels. NotVerified in one line."""
    ref = registry.parse(text)
    where = registry.Registry(ref.host)
    digest, manifest = where.manifest(ref)
    pinned = f"{ref.name}@{digest}"
    found = Verified(reference=pinned)
    if "manifests" in manifest:  # a list: signed with --recursive, each image attested by its own build
        _verify_signature(pinned, key)
        for entry in manifest["manifests"]:
            child_digest, child = where.manifest(registry.Reference(ref.host, ref.repository, None, entry["digest"]))
            found.images.append(f"{_verify_image(where, ref, child_digest, child, key, None)} {child_digest}")
            found.lazy[child_digest] = _verify_lazy(where, ref, child_digest, key)
    else:
        found.images.append(f"{_verify_image(where, ref, digest, manifest, key, ref.tag if not ref.digest else None)} {digest}")
        found.lazy[digest] = _verify_lazy(where, ref, digest, key)
    return found
