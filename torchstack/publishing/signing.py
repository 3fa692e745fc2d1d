"""Cosign signatures on pushed images, their SBOM, provenance attested with them, offline: made after the push, verified before use.

Keys are cosign's: a key file (its password in COSIGN_PASSWORD, which cosign reads itself) or any
key reference cosign accepts (awskms://, gcpkms://, hashivault://, k8s://, env://). Nothing here
writes a key or its password anywhere: cosign gets the reference, the environment its password.
No transparency log: signing and verifying work with no network beyond the registry. The forms
(a Sigstore bundle as a referrer, the legacy tags) are those the host's cosign makes (cosign.py)."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from torchstack.base.errors import ToolkitError, UsageProblem
from torchstack.making.sbom import BUILD_INFO_LABEL
from torchstack.publishing import cosign, lazy, provenance
from torchstack.registries import registry
from torchstack.request.plan import Plan
from torchstack.request.run_settings import RunOptions

# cosign's --type for each attestation, and the predicate type its statement then names.
ATTESTATIONS = {"cyclonedx": "https://cyclonedx.org/bom", "slsaprovenance1": "https://slsa.dev/provenance/v1"}
VERSION_LABEL = "org.opencontainers.image.version"
KEY_SCHEMES = ("awskms://", "gcpkms://", "azurekms://", "hashivault://", "k8s://", "env://", "pkcs11:")
BUNDLE_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"
FORM_WORDS = {"bundle": "a Sigstore bundle (OCI referrer)", "legacy": "the legacy .sig/.att tags"}
# What a bundle that is a signature (not an attestation) names as its predicate type.
SIGNATURE_PREDICATE = "https://sigstore.dev/cosign/sign/v1"


class SigningFailed(ToolkitError):
    """cosign could not sign or attest a pushed image."""

    exit_code = 2


class NotVerified(ToolkitError):
    """An image's signature or attestations do not hold."""


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
    cosign.found(option)
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


def check_signer(key: str, asked: str) -> str:
    """--sign's key as check_key takes it, and --signature-format `asked` of the host's cosign: each refused in one line before any work."""
    found = check_key(key, "--sign", private=True)
    cosign.found("--sign").forms(asked)
    return found


def forms_said(signed: dict, asked: str) -> str:
    """The forms a signing made, in words, with the one the host's cosign could not make where `asked` was both."""
    made = " and ".join(FORM_WORDS[form] for form in signed["forms"])
    if asked == "both" and len(signed["forms"]) < len(cosign.FORMS):
        made += f" (cosign {cosign.found('--sign').said} makes no Sigstore bundle: cosign 3 makes both forms)"
    return made


def _cosign(what: str, *args: str, failure: type[ToolkitError] = SigningFailed) -> str:
    result = subprocess.run([cosign.found("cosign " + args[0]).path, *args], capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if result.returncode != 0:
        said = [line.removeprefix("Error: ") for line in result.stderr.splitlines() if line.startswith("Error: ")]
        message = " ".join((said[-1] if said else result.stderr.strip()[-300:] or "no reason given").split())
        raise failure(f"{what}: {message[:300]}")
    return result.stdout


def sign(reference: str, key: str, sbom: Path | None, attested: dict | None, recursive: bool = False, asked: str = "both") -> dict:
    """Sign `reference` (REPOSITORY@sha256:...), a list with each image in it when `recursive`, and
    attach the SBOM and the provenance predicate (`attested`) as attestations with the same key, in
    each form --signature-format `asked` makes with the host's cosign. What was signed, as the JSON summary records it (no key)."""
    tool = cosign.found("--sign")
    forms = tool.forms(asked)
    for form in forms:
        options = (*tool.sign_options(form), *(["--recursive"] if recursive else []))
        _cosign(f"signing {reference} ({form} form)", "sign", "--key", key, *options, reference)
    attached = []
    with tempfile.TemporaryDirectory(prefix="torchstack-attest-") as work:
        for kind, predicate in (("cyclonedx", sbom), ("slsaprovenance1", attested)):
            if predicate is None:
                continue
            if isinstance(predicate, dict):
                (Path(work) / "provenance.json").write_text(json.dumps(predicate, indent=1))
                predicate = Path(work) / "provenance.json"
            for form in forms:
                options = ("--type", kind, "--predicate", str(predicate))
                _cosign(
                    f"attesting {kind} to {reference} ({form} form)", "attest", "--key", key, *tool.sign_options(form), *options, reference
                )
            attached.append(ATTESTATIONS[kind])
    return {"reference": reference, "recursive": recursive, "attestations": attached, "forms": list(forms)}


def sign_release(plan: Plan, info: dict, pinned: str, run: RunOptions, sbom: Path | None, record: dict, started: datetime) -> dict:
    """--sign: the release image as pushed (`pinned`, REPOSITORY@sha256:...), signed in the forms
    --signature-format asks for, with its SBOM and its provenance (with `info`, the image's build-info
    label, and `record`, what makes the build again) attested."""
    predicate = provenance.predicate(plan, info, record, started, datetime.now(timezone.utc))
    return sign(pinned, run.sign, sbom, predicate, asked=run.signature_format)


@dataclass
class Verified:
    reference: str  # REPOSITORY@sha256:... to pull
    images: list[str] = field(default_factory=list)  # each image verified (a list's images), with its platform
    lazy: dict[str, list[str]] = field(default_factory=dict)  # each image's SOCI indexes (lazy.py), each signed
    forms: list[str] = field(default_factory=list)  # the signature forms found on `reference` and verified


def forms_found(where: registry.Registry, repository: str, digest: str) -> tuple[str, ...]:
    """The forms in which `digest` holds a signature: a Sigstore bundle among its referrers (cosign's
    referrers tag lists a bundle as an empty artifact: its manifest says which it is), the legacy `.sig` tag."""
    found = []
    for entry in where.referrers(repository, digest):
        if entry.get("artifactType") != BUNDLE_TYPE:
            if not registry.DIGEST.fullmatch(str(entry.get("digest"))):
                continue
            _, _, body = where.manifest_bytes(repository, entry["digest"])
            entry = json.loads(body)
        said = (entry.get("annotations") or {}).get("dev.sigstore.bundle.predicateType")
        if entry.get("artifactType") == BUNDLE_TYPE and said == SIGNATURE_PREDICATE:
            found.append(cosign.BUNDLE)
            break
    try:
        where.manifest_bytes(repository, f"{registry.referrers_tag(digest)}.sig")
        found.append(cosign.LEGACY)
    except registry.NotInRegistry:
        pass
    return tuple(found)


def _statements(pinned: str, key: str, kind: str, form: str) -> list[dict]:
    tool = cosign.found("verify")
    out = _cosign(
        f"{pinned}: no {kind} attestation verifies with this key ({form} form)",
        "verify-attestation",
        "--key",
        key,
        *tool.verify_options(form),
        "--type",
        kind,
        pinned,
        failure=NotVerified,
    )
    found = []
    for line in out.splitlines():
        if line.strip().startswith("{"):
            envelope = json.loads(line)
            found.append(json.loads(base64.b64decode(envelope["payload"])))
    return found


def _verify_signature(
    where: registry.Registry, pinned: str, key: str, unsigned: str = "unsigned, or signed with another"
) -> tuple[str, ...]:
    """The forms of the signatures on `pinned` that the host's cosign reads, each verified with `key`."""
    tool = cosign.found("verify")
    ref = registry.parse(pinned)
    present = forms_found(where, ref.repository, ref.digest)
    read = tuple(form for form in present if form in cosign.READS[tool.major])
    if present and not read:
        raise NotVerified(
            f"{pinned}: signed only as a Sigstore bundle, which cosign {tool.said} does not read offline: verify with cosign 3"
        )
    for form in read or (cosign.LEGACY,):
        _cosign(
            f"{pinned}: no signature verifies with this key ({unsigned})",
            "verify",
            "--key",
            key,
            *tool.verify_options(form),
            pinned,
            failure=NotVerified,
        )
    return read


def _verify_lazy(where: registry.Registry, ref: registry.Reference, digest: str, key: str) -> list[str]:
    """The SOCI indexes of the image `digest`, each signed with `key`: a lazy node reads the image's
    files through the one it finds, so one that nobody signed is refused as an unsigned image is."""
    found = lazy.indexes(where, ref.repository, digest)
    for index in found:
        why = f"it is a SOCI index of {digest}, through which a lazy node reads the image's files: sign it, or delete it"
        _verify_signature(where, f"{ref.name}@{index}", key, why)
    return found


def _verify_image(
    where: registry.Registry, ref: registry.Reference, digest: str, manifest: dict, key: str, tag: str | None
) -> tuple[str, tuple]:
    """One image (not a list): its signature, its two attestations, each about this digest, in each
    form found, and its provenance about what its labels say. The image's platform, and the forms."""
    pinned = f"{ref.name}@{digest}"
    forms = _verify_signature(where, pinned, key)
    config = where.config(ref.repository, manifest)
    labels = config.get("config", {}).get("Labels") or {}
    if tag and labels.get(VERSION_LABEL) != tag:
        built_as = labels.get(VERSION_LABEL) or "no release of ours"
        raise NotVerified(f"{ref}: the tag points at an image built as {built_as} ({digest}); verify a release tag or a digest")
    for form, (kind, predicate_type) in ((f, k) for f in forms for k in ATTESTATIONS.items()):
        statements = _statements(pinned, key, kind, form)
        about = [
            s
            for s in statements
            if s.get("predicateType") == predicate_type
            and any(f"sha256:{sub.get('digest', {}).get('sha256')}" == digest for sub in s.get("subject", []))
        ]
        if not about:
            raise NotVerified(f"{pinned}: its {kind} attestation ({form} form) is about another image, not this digest")
        if kind == "slsaprovenance1":
            described = about[-1]["predicate"].get("buildDefinition", {}).get("internalParameters", {}).get("build_info")
            if BUILD_INFO_LABEL not in labels or described != json.loads(labels[BUILD_INFO_LABEL]):
                raise NotVerified(f"{pinned}: its provenance describes another build than the image's build-info label")
    return f"{config.get('os', 'linux')}/{config.get('architecture', '?')}", forms


def verify(text: str, key: str) -> Verified:
    """Check what `text` (a registry reference) names now: the signature of it (and, for a list, of
    each image in it), its attestations, its provenance against its labels, in each form found that
    the host's cosign reads. NotVerified in one line."""
    ref = registry.parse(text)
    where = registry.Registry(ref.host)
    digest, manifest = where.manifest(ref)
    pinned = f"{ref.name}@{digest}"
    found = Verified(reference=pinned)
    if "manifests" in manifest:  # a list: signed with --recursive, each image attested by its own build
        found.forms = list(_verify_signature(where, pinned, key))
        for entry in manifest["manifests"]:
            child_digest, child = where.manifest(registry.Reference(ref.host, ref.repository, None, entry["digest"]))
            platform, _ = _verify_image(where, ref, child_digest, child, key, None)
            found.images.append(f"{platform} {child_digest}")
            found.lazy[child_digest] = _verify_lazy(where, ref, child_digest, key)
    else:
        platform, forms = _verify_image(where, ref, digest, manifest, key, ref.tag if not ref.digest else None)
        found.images.append(f"{platform} {digest}")
        found.forms = list(forms)
        found.lazy[digest] = _verify_lazy(where, ref, digest, key)
    return found


def signed_as_asked(pinned: str, key: str, asked: str) -> bool:
    """Whether `pinned` (REPOSITORY@sha256:..., published before) verifies with the public half of
    the --sign `key` in every form --signature-format `asked` makes: a release an older run or another
    tool left unsigned (or signed in one form) is signed by the next run that asks."""
    wanted = cosign.found("--sign").forms(asked)
    with tempfile.TemporaryDirectory(prefix="torchstack-public-") as work:
        public = Path(work) / "cosign.pub"
        public.write_text(_cosign(f"--sign {key}: cosign cannot give its public key", "public-key", "--key", key, failure=UsageProblem))
        try:
            found = verify(pinned, str(public))
        except NotVerified:
            return False
    return set(wanted) <= set(found.forms)
