"""The release image's software bill of materials, in CycloneDX, read from the image itself.

What is installed is asked of the image (its venv's Python distributions, dpkg's database); what
was compiled here, from which source and with which patches, comes from its build-info label.
cyclonedx-python-lib writes the document. The same image gives the same document, byte for byte:
its serial number is derived from the content, its time is the image's creation time.
"""

from __future__ import annotations

import json
import re
import uuid
from datetime import datetime
from pathlib import Path

from cyclonedx.model import ExternalReference, ExternalReferenceType, HashAlgorithm, HashType, Property, XsUri
from cyclonedx.model.bom import Bom
from cyclonedx.model.component import Component, ComponentType
from cyclonedx.output.json import JsonV1Dot6
from packageurl import PackageURL

from torchstack.base.layout import TOOLKIT_DIR, VENV
from torchstack.engines.engine import Engine, Image

SBOM = f"{TOOLKIT_DIR}/sbom.cdx.json"  # in the release image
BUILD_INFO_LABEL = "io.torchstack.build-info"
# Run in the image by its venv's Python, standard library only: what is installed, as JSON.
_INVENTORY = r"""
import importlib.metadata, json, subprocess, sys
python = sorted(
    {(d.metadata["Name"], d.version): d.metadata.get("License-Expression") for d in importlib.metadata.distributions(path=sys.path)}.items()
)
fields = "${Package}\t${Version}\t${Architecture}\t${source:Package}\t${db:Status-Status}\n"
listed = subprocess.run(["dpkg-query", "-W", "-f", fields], capture_output=True, text=True, check=True).stdout
debian = sorted(line.split("\t")[:4] for line in listed.splitlines() if line.endswith("\tinstalled"))
print(json.dumps({"python": [[n, v, lic] for (n, v), lic in python], "debian": debian}))
"""


def inventory(engine: Engine, image: str, platform: str) -> dict:
    """What `image` holds: [name, version, license expression] per Python distribution of its
    venv, [package, version, architecture, source package] per installed Debian package."""
    output = engine.output_of(image, [f"{VENV}/bin/python3", "-c", _INVENTORY], entrypoint=[], platform=platform, network_mode="none")
    return json.loads(output.decode().strip().splitlines()[-1])


def document(found: dict, info: dict, created: datetime) -> str:
    """The CycloneDX 1.6 JSON document for an image with build-info `info` holding `found`. The image is
    named by its release tag alone: not by the engine's repository (--repository) or a registry's, which
    are where it is kept, not what it holds (an image built again under another name is the same)."""
    bom = Bom()
    release = Component(
        type=ComponentType.CONTAINER,
        name="torchstack",
        version=info["release_tag"],
        bom_ref=f"image:{info['release_tag']}",
        properties=[
            Property(name=f"torchstack:{key}", value=str(info[key]))
            for key in ("arch", "backend", "target", "target_flag", "distribution", "torch_version")
        ],
    )
    bom.metadata.component = release
    bom.metadata.timestamp = created
    toolkit = info.get("toolkit", {})
    bom.metadata.tools.components.add(
        Component(type=ComponentType.APPLICATION, name="torchstack", version=toolkit.get("revision") or toolkit.get("version", ""))
    )
    # What was compiled here: its source, sha256 and patches, on the very package that holds it
    # (numpy, torch: the venv's distribution), else as a package of its own with a generic purl.
    compiled = {name: c for name, c in info["components"].items() if c["method"] == "source"}
    parts = []
    for name, version, license_expression in found["python"]:
        purl = PackageURL(type="pypi", name=re.sub(r"[-_.]+", "-", name).lower(), version=version)
        properties = [Property(name="torchstack:license-expression", value=license_expression)] if license_expression else []
        part = Component(
            type=ComponentType.LIBRARY, name=name, version=version, purl=purl, bom_ref=f"pypi:{purl.name}@{version}", properties=properties
        )
        if purl.name in compiled:
            _compiled_here(part, compiled.pop(purl.name))
        parts.append(part)
    distro = f"debian-{info['distribution']}"
    for package, version, arch, source in found["debian"]:
        purl = PackageURL(type="deb", namespace="debian", name=package, version=version, qualifiers={"arch": arch, "distro": distro})
        properties = [Property(name="torchstack:debian-source", value=source)] if source and source != package else []
        parts.append(
            Component(
                type=ComponentType.LIBRARY,
                name=package,
                version=version,
                purl=purl,
                bom_ref=f"deb:{package}@{version}:{arch}",
                properties=properties,
            )
        )
    for name, component in compiled.items():
        purl = PackageURL(type="generic", name=name, version=component["version"], qualifiers={"download_url": component["source"]["url"]})
        part = Component(type=ComponentType.LIBRARY, name=name, version=component["version"], purl=purl, bom_ref=f"compiled:{name}")
        parts.append(_compiled_here(part, component))
    for part in parts:
        bom.components.add(part)
    bom.register_dependency(release, parts)
    bom.serial_number = uuid.uuid5(uuid.NAMESPACE_URL, "torchstack:" + json.dumps([found, info], sort_keys=True))
    return JsonV1Dot6(bom).output_as_string(indent=1)


def _compiled_here(part: Component, component: dict) -> Component:
    """`part` with where it was compiled from: the source's URL and sha256, the patches applied."""
    source = component["source"]
    digest = HashType(alg=HashAlgorithm.SHA_256, content=source["sha256"])
    part.description = f"compiled from source here, installed in {component['prefix'] or VENV}"
    part.hashes.add(digest)
    part.external_references.add(
        ExternalReference(
            type=ExternalReferenceType.DISTRIBUTION,
            url=XsUri(source["url"]),
            hashes=[digest],
            comment=f"sha256 from {source['sha256_from']}",
        )
    )
    for p in component["patches"]:
        part.properties.add(Property(name="torchstack:patch", value=f"{p['name']} sha256:{p['sha256']}"))
    part.properties.add(Property(name="torchstack:compiled-here", value="true"))
    return part


def summary(text: str) -> dict:
    """What `inspect` says of an SBOM: its format, counts, and the versions users ask about first."""
    bom = json.loads(text)
    components = bom.get("components", [])
    python = {c["name"].lower(): c["version"] for c in components if c.get("purl", "").startswith("pkg:pypi/")}
    debian = [c for c in components if c.get("purl", "").startswith("pkg:deb/")]
    compiled = [c["name"] for c in components if {"name": "torchstack:compiled-here", "value": "true"} in c.get("properties", [])]
    return {
        "format": f"{bom.get('bomFormat')} {bom.get('specVersion')}",
        "serial_number": bom.get("serialNumber"),
        "python_packages": len(python),
        "debian_packages": len(debian),
        "compiled_here": compiled,
        "key_versions": {name: python[name] for name in ("torch", "numpy", "zentorch") if name in python},
    }


def write(text: str, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def read_image(engine: Engine, image: str) -> tuple[Image, dict, str | None]:
    """An image's build-info label and its SBOM file, from the image alone (no container runs):
    what `inspect` shows, for an image built here or pulled from a registry."""
    found = engine.image(image)
    info = json.loads(found.labels[BUILD_INFO_LABEL])
    files = engine.files_of(found.id, [SBOM]).get(SBOM)
    return found, info, files[0].decode() if files else None
