"""Per-architecture images in a registry, joined as one multi-architecture tag through the registry's API.

No engine CLI is asked (`docker manifest` reaches a TLS registry on loopback over plain HTTP, and
Docker 20.10's cannot read an OCI image): the toolkit's registry client reads each source, with the
login as the engines find it, and writes the list. Every engine's pull reads it the same way."""

from __future__ import annotations

import json
from collections.abc import Callable

from torchstack.base.errors import UsageProblem
from torchstack.registries import registry

DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_IMAGE = "application/vnd.docker.distribution.manifest.v2+json"
# The platform BuildKit gives the attestation manifest it puts beside an image in an index (its
# provenance or SBOM, annotated vnd.docker.reference.type: attestation-manifest): no architecture.
ATTESTATION_PLATFORM = "unknown"


def _images_of(where: registry.Registry, source: registry.Reference) -> list[dict]:
    """The descriptor, with its platform, of each image `source` names: itself, or each image of a
    list (an attestation left out)."""
    try:
        digest, media_type, body = where.manifest_bytes(source.repository, source.digest or source.tag or "latest")
    except registry.NotInRegistry as exc:
        raise UsageProblem(f"{source}: not in the registry ({exc})") from None
    manifest = json.loads(body)
    if "manifests" in manifest:
        return [m for m in manifest["manifests"] if m.get("platform", {}).get("architecture") != ATTESTATION_PLATFORM]
    config = where.config(source.repository, manifest)
    platform = {"architecture": config.get("architecture", "?"), "os": config.get("os", "linux")}
    platform |= {"variant": config["variant"]} if config.get("variant") else {}
    return [{"mediaType": media_type or manifest.get("mediaType", ""), "digest": digest, "size": len(body), "platform": platform}]


def _into(where: registry.Registry, source: registry.Reference, image: dict, repository: str) -> None:
    """The image `image` of `source` made present in `repository` (a list names images of its own
    repository): its blobs mounted from the source's, then its manifest. Refused in one line where
    the registry will not mount them."""
    if source.repository == repository:
        return
    _, media_type, body = where.manifest_bytes(source.repository, image["digest"])
    manifest = json.loads(body)
    for blob in [manifest["config"], *manifest.get("layers", [])]:
        if not where.mount_blob(repository, blob["digest"], source.repository):
            raise UsageProblem(f"{source}: the registry would not lend its layers to {where.host}/{repository}: push it there first")
    where.put_manifest(repository, image["digest"], body, media_type)


def join_architectures(target: str, sources: list[str], expected: dict[str, str], say: Callable[[str], None]) -> str:
    """One multi-architecture tag, `target`, over per-architecture images already in its registry.

    `expected` maps each architecture the tag must hold to its Docker name (aarch64: arm64). A
    source the registry lacks, two sources of one architecture, an architecture missing or one
    not asked for: refused in one line, nothing made. Returns the digest of the pushed list."""
    goal = registry.parse(target)
    where = registry.Registry(goal.host)
    wanted_by_docker = {docker_arch: name for name, docker_arch in expected.items()}
    found: dict[str, tuple[str, registry.Reference, dict]] = {}
    for source in sources:
        named = registry.parse(source)
        if named.host != goal.host:
            raise UsageProblem(f"{source}: not in {goal.host}, where {target} goes; push it there first")
        for image in _images_of(where, named):
            platform = image.get("platform", {}).get("architecture", "?")
            arch = wanted_by_docker.get(platform)
            if arch is None:
                raise UsageProblem(f"{source} is a {platform} image; asked for {', '.join(expected)} only (--arch)")
            if arch in found:
                raise UsageProblem(f"{source} and {found[arch][0]} are both {arch} images: one per architecture")
            found[arch] = (source, named, image)
    missing = [arch for arch in expected if arch not in found]
    if missing:
        raise UsageProblem(f"no image for {', '.join(missing)} among the sources; {target} was not made")
    say(f"torchstack: joining {', '.join(f'{arch} ({found[arch][0]})' for arch in expected)} as {target}")
    for _, named, image in found.values():
        _into(where, named, image, goal.repository)
    images = [found[arch][2] for arch in expected]
    kind = DOCKER_LIST if all(image["mediaType"] == DOCKER_IMAGE for image in images) else registry.OCI_INDEX
    listed = {"schemaVersion": 2, "mediaType": kind, "manifests": images}
    body = json.dumps(listed, indent=3).encode()
    where.put_manifest(goal.repository, goal.tag or "latest", body, kind)
    return registry.digest_of(body)
