"""What the release image says of itself is what it holds: its build-info (label and file) and
SBOM name each component at the version dpkg or the venv reads, each package once with its
purl; its apt sources name the suites it was built from, so an image built on it upgrades."""

import json
import re

import pytest

from torchstack.base import layout


def _dpkg(host) -> dict[str, str]:
    listed = host.run("dpkg-query -W -f '${Package} ${Version} ${db:Status-Status}\\n'").stdout.splitlines()
    return {line.split()[0]: line.split()[1] for line in listed if line.endswith(" installed")}


def _venv(python) -> dict[str, str]:
    found = json.loads(
        python(
            "import importlib.metadata as m, json, sys; "
            "print(json.dumps({d.metadata['Name']: d.version for d in m.distributions(path=sys.path)}))"
        )
    )
    return {re.sub(r"[-_.]+", "-", name).lower(): version for name, version in found.items()}


def test_the_build_info_file_is_the_label_and_names_the_versions_the_image_holds(host, python, ours):
    assert json.loads(host.file(layout.BUILD_INFO).content_string) == ours, "the build-info file and label differ"
    dpkg, venv = _dpkg(host), _venv(python)
    for name, component in ours["components"].items():
        if component["method"] == "distro":
            held = {p: dpkg.get(p) for p in component["packages"]}
            assert component["debian_packages"] == held, f"{name}: recorded {component['debian_packages']}, dpkg says {held}"
            assert component["version"] == next(iter(held.values())), name
        elif name in venv:
            assert component["version"] == venv[name], f"{name}: recorded {component['version']}, the venv holds {venv[name]}"


def test_the_sbom_lists_each_package_once_with_its_purl_at_the_version_installed(host, python):
    bom = json.loads(host.file(layout.TOOLKIT_DIR + "/sbom.cdx.json").content_string)
    components = bom["components"]
    assert all(c.get("purl") for c in components), [c["name"] for c in components if not c.get("purl")]
    keys = [(c["purl"].split("@")[0]) for c in components]
    assert len(keys) == len(set(keys)), f"listed twice: {sorted({k for k in keys if keys.count(k) > 1})}"
    dpkg, venv = _dpkg(host), _venv(python)
    debian = {c["name"]: c["version"] for c in components if c["purl"].startswith("pkg:deb/")}
    assert debian == dpkg, {p: (v, dpkg.get(p)) for p, v in debian.items() if dpkg.get(p) != v}
    pypi = {re.sub(r"[-_.]+", "-", c["name"]).lower(): c["version"] for c in components if c["purl"].startswith("pkg:pypi/")}
    assert pypi == venv, {p: (v, venv.get(p)) for p, v in pypi.items() if venv.get(p) != v}


def test_the_apt_sources_name_the_suites_it_was_built_from(host, ours):
    """The release, -updates and -security (or the release alone, --no-security-updates): what an
    image built on this one upgrades from; the live suites where the build took a --debian-snapshot.
    A --base-image of the user's keeps its own."""
    if not ours.get("apt_sources"):
        pytest.skip("built on a --base-image of the user's: its apt sources are its own")
    named = ours["apt_sources"]
    if ours.get("debian_snapshot") and len(named) > 1:  # refreshed: the live suites (with one, no refresh layer)
        named = ours["debian_snapshot"]["image_apt_sources"]
    sources = [line for line in host.file("/etc/apt/sources.list").content_string.splitlines() if line.startswith("deb ")]
    assert sources == named, f"the image's apt sources {sources}, expected {named}"
    upgraded = host.file(layout.APT_UPGRADES)
    assert upgraded.exists or len(sources) == 1, f"no {layout.APT_UPGRADES}: the release image was not refreshed from its suites"
