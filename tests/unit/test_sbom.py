"""The SBOM document: valid CycloneDX 1.6, every package with its purl, what was compiled here
with its source and patches, and the same bytes for the same image. The inventory is read from
real images in the engine tests (the final image's checks and `inspect` on a pulled image)."""

import json
from datetime import datetime, timezone

from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

from torchstack.making.sbom import document, summary
from torchstack.request.metadata import build_info

FOUND = {
    "python": [["numpy", "2.3.5", None], ["torch", "2.13.0", "BSD-3-Clause"], ["typing_extensions", "4.15.0", "PSF-2.0"]],
    "debian": [
        ["libgomp1", "12.2.0-14", "amd64", "gcc-12"],
        ["libopenblas0-pthread", "0.3.21+ds-4", "amd64", "openblas"],
        ["zlib1g", "1:1.2.13.dfsg-1", "amd64", "zlib"],
    ],
}
CREATED = datetime(2026, 11, 22, 12, 0, tzinfo=timezone.utc)


def make(plan):
    return document(FOUND, build_info(plan), CREATED)


def test_the_document_is_valid_cyclonedx(plan_for):
    text = make(plan_for(backend="onednn", arch="x86_64", release="r26.11"))
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(text) is None


def test_every_package_has_its_purl_and_the_release_is_the_subject(plan_for):
    plan = plan_for(backend="onednn", arch="x86_64", release="r26.11")
    bom = json.loads(make(plan))
    purls = {c["name"]: c.get("purl") for c in bom["components"]}
    assert purls["torch"] == "pkg:pypi/torch@2.13.0" and purls["typing_extensions"] == "pkg:pypi/typing-extensions@4.15.0"
    assert purls["zlib1g"] == "pkg:deb/debian/zlib1g@1:1.2.13.dfsg-1?arch=amd64&distro=debian-trixie"
    assert bom["metadata"]["component"]["version"] == plan.release_tag
    assert bom["metadata"]["timestamp"].startswith("2026-11-22T12:00:00")


def test_what_was_compiled_here_names_its_source_and_sha256(plan_for):
    plan = plan_for(backend="onednn", arch="x86_64", release="r26.11")
    compiled = {c["name"]: c for c in json.loads(make(plan))["components"] if c["bom-ref"].startswith("compiled:")}
    source = plan.component("openblas").source
    assert compiled["openblas"]["version"] == plan.component("openblas").version
    reference = compiled["openblas"]["externalReferences"][0]
    assert reference["url"] == source.url and reference["hashes"][0]["content"] == source.sha256


def test_the_same_image_gives_the_same_bytes(plan_for):
    plan = plan_for(backend="onednn", arch="x86_64", release="r26.11")
    first, again = make(plan), make(plan)
    assert first == again
    other = document({**FOUND, "python": FOUND["python"][:2]}, build_info(plan), CREATED)
    assert json.loads(other)["serialNumber"] != json.loads(first)["serialNumber"]


def test_the_summary_counts_what_users_ask_about(plan_for):
    described = summary(make(plan_for(backend="onednn", arch="x86_64", release="r26.11")))
    assert described["format"] == "CycloneDX 1.6" and described["python_packages"] == 3
    assert described["debian_packages"] == 3 and described["key_versions"] == {"torch": "2.13.0", "numpy": "2.3.5"}
    assert "openblas" in described["compiled_here"]


def test_each_package_appears_once_with_its_purl_a_compiled_one_with_its_source(plan_for):
    """numpy compiled here is the venv's numpy: one component, its pypi purl, its source on it."""
    plan = plan_for(backend="onednn", arch="x86_64", release="r26.11")
    components = json.loads(make(plan))["components"]
    names = [c["name"].lower() for c in components]
    assert len(names) == len(set(names)) and all(c.get("purl") for c in components)
    numpy = next(c for c in components if c["name"] == "numpy")
    assert numpy["purl"] == "pkg:pypi/numpy@2.3.5"
    assert numpy["externalReferences"][0]["url"] == plan.component("numpy").source.url
