"""What nodes need to admit only our signed images: containers-policy.json with registries.d, a Kyverno policy."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import yaml

from torchstack.publishing.provenance import PREDICATE_TYPE

POLICY = "policy.json"
REGISTRIES_D = "registries.d/torchstack.yaml"
KYVERNO = "kyverno-policy.yaml"


def containers_policy(scope: str, public_key: bytes) -> dict:
    """containers-policy.json (Podman, CRI-O, skopeo; OpenShift's ClusterImagePolicy writes the same on
    each node): images under `scope` (a registry, or registry/namespace) need a cosign signature by the
    key, for the repository they are pulled from (cosign signs the repository, not the tag:
    matchRepository); anything else as a default installation accepts it."""
    rule = {"type": "sigstoreSigned", "keyData": base64.b64encode(public_key).decode(), "signedIdentity": {"type": "matchRepository"}}
    return {"default": [{"type": "insecureAcceptAnything"}], "transports": {"docker": {scope: [rule]}}}


def registries_d(scope: str) -> dict:
    """registries.d: where the signatures of `scope` are (cosign's attachments in the registry itself)."""
    return {"docker": {scope: {"use-sigstore-attachments": True}}}


def kyverno(scope: str, public_key: bytes) -> dict:
    """A Kyverno ClusterPolicy: pods may run images under `scope` only if signed by the key, with a
    provenance attestation, checked offline (no transparency log, no certificate timestamps), and by
    digest (Kyverno pins the tag it verified)."""

    def attestor() -> dict:  # one per place: YAML would otherwise write an anchor and an alias
        return {
            "entries": [{"keys": {"publicKeys": public_key.decode().strip(), "rekor": {"ignoreTlog": True}, "ctlog": {"ignoreSCT": True}}}]
        }

    return {
        "apiVersion": "kyverno.io/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": "torchstack-signed-images"},
        "spec": {
            "validationFailureAction": "Enforce",
            "webhookTimeoutSeconds": 30,
            "rules": [
                {
                    "name": "signed-by-the-torchstack-key",
                    "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
                    "verifyImages": [
                        {
                            "imageReferences": [f"{scope}/*"],
                            "mutateDigest": True,
                            "verifyDigest": True,
                            "required": True,
                            "attestors": [attestor()],
                            "attestations": [{"type": PREDICATE_TYPE, "attestors": [attestor()]}],
                        }
                    ],
                }
            ],
        },
    }


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (a PEM key) as YAML's literal blocks, as people write them."""


_Dumper.add_representer(
    str, lambda dumper, text: dumper.represent_scalar("tag:yaml.org,2002:str", text, style="|" if "\n" in text else None)
)


def write(folder: Path, scope: str, public_key: Path) -> list[Path]:
    """The three files in `folder`; their paths."""
    key = public_key.read_bytes()
    files = {
        folder / POLICY: json.dumps(containers_policy(scope, key), indent=2) + "\n",
        folder / REGISTRIES_D: yaml.dump(registries_d(scope), Dumper=_Dumper, sort_keys=False),
        folder / KYVERNO: yaml.dump(kyverno(scope, key), Dumper=_Dumper, sort_keys=False),
    }
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return list(files)
