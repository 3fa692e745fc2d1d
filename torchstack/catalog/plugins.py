"""Wheels built on torch (vendor plugins, --with libraries): what each needs from torch, refused before a build if it cannot work.

What each registers is read too.

What --plugin-wheel names is read here: a wheel's Requires-Dist on torch, its entry points in
PyTorch's groups, and what the catalog (plugins.yaml) knows of it.
"""

from __future__ import annotations

import email.parser
import functools
import hashlib
import io
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from torchstack.base.errors import UsageProblem
from torchstack.catalog.component import Plugin
from torchstack.catalog.model import Catalog
from torchstack.catalog.wheels import local_wheels

# PyTorch's entry point groups: a torch.compile backend (torch/_dynamo/backends/registry.py) and
# a device extension loaded at `import torch` (torch/__init__.py, _import_device_backends).
COMPILE_GROUP = "torch_dynamo_backends"
DEVICE_GROUP = "torch.backends"

_PIN = re.compile(r"(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[A-Za-z0-9][A-Za-z0-9.!+_-]*)")
# A project's name as PEP 508 writes one (PEP 503 then compares them canonicalized).
_PROJECT_NAME = re.compile(r"[A-Z0-9]|[A-Z0-9][A-Z0-9._-]*[A-Z0-9]", re.IGNORECASE)
# What a wheel's file name is made of (the binary distribution format): NAME-VERSION[-BUILD]-PY-ABI-PLATFORM.whl.
_WHEEL_FILE = re.compile(r"[A-Za-z0-9_.+!-]+\.whl")


@dataclass(frozen=True)
class PluginSpec:
    """One --plugin-wheel: a .whl file, a folder of plugin wheels, or NAME==VERSION from the index."""

    kind: str  # file | dir | pin
    where: str

    @classmethod
    def parse(cls, text: str) -> PluginSpec:
        pin = _PIN.fullmatch(text)
        if pin:
            try:
                Version(pin["version"])
            except InvalidVersion:
                raise UsageProblem(f"--plugin-wheel {text!r}: {pin['version']!r} is not a version (PEP 440)") from None
            return cls("pin", text)
        local = local_wheels(text)
        if local:
            return cls(*local)
        raise UsageProblem(f"--plugin-wheel {text!r}: not a .whl file, a folder of wheels, or NAME==VERSION")


@dataclass(frozen=True)
class PluginWheel:
    """A plugin wheel file as its own metadata describes it, plus what the catalog knows of it."""

    path: Path
    name: str  # as its METADATA spells it
    version: str
    module: str  # what `import` names
    summary: str
    home_page: str
    requires_torch: tuple[str, ...]  # its Requires-Dist on torch that apply to the image
    compile_backends: tuple[str, ...]  # entry points in COMPILE_GROUP, and known ones
    device_entry_points: tuple[str, ...]  # entry points in DEVICE_GROUP
    devices: tuple[str, ...]  # known device names
    requirements: tuple[str, ...]  # pinned dependencies the catalog knows
    vendor: str | None
    sha256: str
    needs: tuple[str, ...] = ()  # the shared libraries its compiled modules need (ELF DT_NEEDED)
    checks: tuple[str, ...] = ()  # the catalog's check files for it (tests/image/final/)

    @property
    def key(self) -> str:
        return canonicalize_name(self.name)

    def record(self) -> dict:
        """How the build-info records it."""
        return {
            "name": self.name,
            "version": self.version,
            "module": self.module,
            "vendor": self.vendor,
            "summary": self.summary,
            "home_page": self.home_page,
            "file": self.path.name,
            "sha256": self.sha256,
            "requires_torch": list(self.requires_torch),
            "compile_backends": list(self.compile_backends),
            "device_entry_points": list(self.device_entry_points),
            "devices": list(self.devices),
            "checks": list(self.checks),
        }


@dataclass(frozen=True)
class PluginChoice:
    """A plugin the final image installs: its wheel when at hand, else the pin to download."""

    key: str  # canonical distribution name
    requirement: str  # NAME==VERSION
    why: str  # --plugin-wheel, or the backend that installs it
    wheel: PluginWheel | None = None
    requirements: tuple[str, ...] = ()  # its dependencies' pins the catalog knows (pip constraints)


def _known(catalog: Catalog, name: str) -> Plugin | None:
    """What plugins.yaml knows of a distribution, however its name is spelled."""
    key = canonicalize_name(name)
    return catalog.plugins.get(name) or next((p for p in catalog.plugins.values() if canonicalize_name(p.name) == key), None)


def _check_pairing(known: Plugin | None, what: str, version: str, torch_version: str) -> None:
    """A known plugin pairs with torch releases (its versions are <torch version>.<n>, or a table
    its project publishes): refuse one built for another torch."""
    if known is None or known.pairs(version, torch_version):
        return
    paired = known.version_for(torch_version)
    hint = f"{known.name}=={paired} pairs with it" if paired else f"no pinned {known.name} pairs with it (pinned: {known.pairings()})"
    how = known.pairing_from or "its versions are <torch version>.<n>"
    lines = " or ".join(known.torch_lines_of(version) or ())
    raise UsageProblem(f"plugin {what} is built for torch {lines} ({how}), and this image's torch is {torch_version}: {hint}")


def _entry_points(text: str) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    group = None
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("[") and line.endswith("]"):
            group = line[1:-1].strip()
        elif "=" in line and group and not line.startswith(("#", ";")):
            groups.setdefault(group, []).append(line.split("=", 1)[0].strip())
    return groups


def _needed(data: bytes) -> list[str]:
    """The shared libraries an ELF file needs (its dynamic section's DT_NEEDED); none for a non-ELF."""
    # Imported here: 70 ms that every other command would pay at start-up.
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    try:
        dynamic = ELFFile(io.BytesIO(data)).get_section_by_name(".dynamic")
        return [tag.needed for tag in dynamic.iter_tags() if tag.entry.d_tag == "DT_NEEDED"] if dynamic else []
    except ELFError:
        return []


@functools.lru_cache(maxsize=32)
def _read(path: Path, size: int, mtime_ns: int) -> tuple[dict, str]:
    try:
        with zipfile.ZipFile(path) as wheel:
            names = wheel.namelist()
            info = next((n for n in names if re.fullmatch(r"[^/]+\.dist-info/METADATA", n)), None)
            if info is None:
                raise UsageProblem(f"--plugin-wheel {path.name}: not a wheel (no .dist-info/METADATA)")
            folder = info.rsplit("/", 1)[0]
            metadata = email.parser.Parser().parsestr(wheel.read(info).decode("utf-8", "replace"))
            entry = wheel.read(f"{folder}/entry_points.txt").decode() if f"{folder}/entry_points.txt" in names else ""
            top = wheel.read(f"{folder}/top_level.txt").decode().split() if f"{folder}/top_level.txt" in names else []
            packages = sorted({n.split("/", 1)[0] for n in names if "/" in n and not n.split("/", 1)[0].endswith((".dist-info", ".data"))})
            needs = sorted({lib for n in names if re.search(r"\.so(\.|$)", n) for lib in _needed(wheel.read(n))})
    except zipfile.BadZipFile:
        raise UsageProblem(f"--plugin-wheel {path.name}: not a wheel (not a zip file)") from None
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    fields = {
        "name": metadata.get("Name", ""),
        "version": metadata.get("Version", ""),
        "summary": " ".join((metadata.get("Summary", "") or "").split()),  # one line, however its METADATA folds it
        "home_page": metadata.get("Home-page", "") or next(iter(metadata.get_all("Project-URL") or []), ""),
        "requires": metadata.get_all("Requires-Dist") or [],
        "entry_points": _entry_points(entry),
        "modules": top or packages,
        "needs": needs,
    }
    return fields, digest


def _fits(path: Path, arch: str, python: str) -> bool:
    """Whether the wheel's file name says it installs on `arch` with `python`; refused where it is no wheel's name."""
    try:
        if not _WHEEL_FILE.fullmatch(path.name):
            raise InvalidWheelFilename("only letters, digits and _ . + ! - make up a wheel's file name")
        _, _, _, wheel_tags = parse_wheel_filename(path.name)
    except InvalidWheelFilename as exc:
        raise UsageProblem(f"--plugin-wheel {path.name!r}: {exc}") from None
    cp = "cp" + python.replace(".", "")
    return any(
        (t.interpreter in (cp, "py3", f"py{python.replace('.', '')}") or (t.abi == "abi3" and t.interpreter.startswith("cp3")))
        and (t.platform == "any" or t.platform.endswith(f"_{arch}"))
        for t in wheel_tags
    )


def _identity(path: Path, fields: dict) -> tuple[str, str]:
    """The wheel's project name (as its METADATA spells it) and its version (normalized), each as PEP 508
    and PEP 440 read them and as its file name says: nothing else of them reaches a Dockerfile or a tag."""
    named, version, _, _ = parse_wheel_filename(path.name)
    name = fields["name"] or str(named)
    if not _PROJECT_NAME.fullmatch(name):
        raise UsageProblem(f"--plugin-wheel {path.name}: its METADATA Name {name!r} is not a project name (PEP 508)")
    try:
        said = Version(fields["version"]) if fields["version"] else version
    except InvalidVersion:
        raise UsageProblem(f"--plugin-wheel {path.name}: its METADATA Version {fields['version']!r} is not a version (PEP 440)") from None
    if canonicalize_name(name) != named or said != version:
        raise UsageProblem(f"--plugin-wheel {path.name}: its METADATA says {name} {said}, its file name {named} {version} (pip refuses it)")
    return name, str(said)


def read_wheel(path: Path, catalog: Catalog, arch: str, python: str) -> PluginWheel:
    """The wheel's metadata, checked to install on the image's platform and Python."""
    if not _fits(path, arch, python):
        raise UsageProblem(f"--plugin-wheel {path.name}: not for {arch} with Python {python}")
    stat = path.stat()
    fields, digest = _read(path.resolve(), stat.st_size, stat.st_mtime_ns)
    name, version = _identity(path, fields)
    known = _known(catalog, name)
    environment = {
        **default_environment(),
        "python_version": python,
        "python_full_version": f"{python}.0",
        "platform_machine": arch,
        "sys_platform": "linux",
        "platform_system": "Linux",
    }
    requires_torch = []
    for text in fields["requires"]:
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            continue
        if canonicalize_name(requirement.name) == "torch" and (requirement.marker is None or requirement.marker.evaluate(environment)):
            requires_torch.append(str(requirement))
    modules = [m for m in fields["modules"] if m.isidentifier()]
    module = known.import_name if known else (modules[0] if len(modules) == 1 else canonicalize_name(name).replace("-", "_"))
    groups = fields["entry_points"]
    return PluginWheel(
        path=path,
        name=name,
        version=version,
        module=module,
        summary=fields["summary"],
        home_page=fields["home_page"],
        requires_torch=tuple(requires_torch),
        compile_backends=tuple(dict.fromkeys([*groups.get(COMPILE_GROUP, []), *(known.compile_backends if known else ())])),
        device_entry_points=tuple(groups.get(DEVICE_GROUP, [])),
        devices=known.devices if known else (),
        requirements=known.requirements if known else (),
        vendor=known.vendor if known else None,
        sha256=digest,
        needs=tuple(fields["needs"]),
        checks=known.checks if known else (),
    )


def check_torch(wheel: PluginWheel, torch_version: str, catalog: Catalog) -> None:
    """Refuse a plugin that cannot work with the image's torch: one whose Requires-Dist on torch
    excludes it, one built against a CUDA torch (its metadata cannot say so: the libraries its
    compiled modules need do), or a known plugin whose version pairs with another torch release."""
    torch = catalog.components["torch"]
    cuda = [lib for lib in wheel.needs if lib.startswith(torch.wheel_excludes)]
    if cuda:
        raise UsageProblem(
            f"plugin {wheel.name} {wheel.version} is built against a CUDA torch (its compiled modules need "
            f"{', '.join(cuda)}), and this image's torch {torch_version} is a CPU build: it would import, then fail "
            f"at its first operator. Use its CPU build (PyTorch's CPU index: {torch.alternatives['wheel'].index})"
        )
    for text in wheel.requires_torch:
        specifier = Requirement(text).specifier
        if not specifier.contains(torch_version, prereleases=True):
            raise UsageProblem(
                f"plugin {wheel.name} {wheel.version} requires {text}, and this image's torch is {torch_version}: "
                f"it would fail at import. Use the plugin's release for torch {torch_version}, or a --torch-version it admits"
            )
    _check_pairing(_known(catalog, wheel.key), f"{wheel.name} {wheel.version}", wheel.version, torch_version)


def wheels_in(folder: Path, catalog: Catalog, arch: str, python: str) -> list[PluginWheel]:
    """Every plugin wheel in `folder` that installs on the image (others are not this image's)."""
    found = []
    for path in sorted(folder.glob("*.whl")):
        try:
            fits = _fits(path, arch, python)
        except UsageProblem:
            continue  # not a wheel's name: no wheel pip would install
        if fits:  # one that fits is read, and refused where its metadata is not a wheel's
            found.append(read_wheel(path, catalog, arch, python))
    if not found:
        raise UsageProblem(f"--plugin-wheel {folder}: no wheel in that folder installs on {arch} with Python {python}")
    return found


def choose(
    catalog: Catalog, texts: tuple[str, ...], named: dict[str, str], arch: str, python: str, torch_version: str, cached: Path | None
) -> tuple[PluginChoice, ...]:
    """The plugins the final image installs, each checked against torch where its wheel is at hand.

    --plugin-wheel entries come first; each plugin `named` (name -> who asks: a backend's own
    plugin, such as zentorch for zendnn, or a domain library --with names) is added at its pinned
    version for this torch unless a --plugin-wheel already brings it. A pin whose wheel is in
    `cached` (a folder of earlier downloads) is read from there.
    """
    chosen: dict[str, PluginChoice] = {}

    def add(wheel: PluginWheel, why: str) -> None:
        check_torch(wheel, torch_version, catalog)
        if wheel.key in chosen:
            raise UsageProblem(f"--plugin-wheel: {wheel.name} is named twice ({chosen[wheel.key].requirement}, {wheel.version})")
        chosen[wheel.key] = PluginChoice(wheel.key, f"{wheel.name}=={wheel.version}", why, wheel, wheel.requirements)

    def pinned(requirement: str, why: str) -> None:
        match = _PIN.fullmatch(requirement)
        key = canonicalize_name(match["name"])
        known = _known(catalog, match["name"])
        _check_pairing(known, requirement, match["version"], torch_version)
        if known and not known.on_pypi:
            raise UsageProblem(f"plugin {known.name} is not on a package index: bring its wheel, --plugin-wheel FILE")
        wheel = next((w for w in _cached(cached, key, match["version"], catalog, arch, python)), None)
        if wheel is not None:
            add(wheel, why)
        elif key in chosen:
            raise UsageProblem(f"--plugin-wheel: {match['name']} is named twice")
        else:
            chosen[key] = PluginChoice(key, requirement, why, None, known.requirements if known else ())

    for text in texts:
        spec = PluginSpec.parse(text)
        if spec.kind == "file":
            add(read_wheel(Path(spec.where), catalog, arch, python), "--plugin-wheel")
        elif spec.kind == "dir":
            for wheel in wheels_in(Path(spec.where), catalog, arch, python):
                add(wheel, "--plugin-wheel")
        else:
            pinned(spec.where, "--plugin-wheel")
    for name, why in named.items():
        plugin = catalog.plugins[name]
        if canonicalize_name(name) in chosen:
            continue
        version = plugin.version_for(torch_version)
        if version is None:
            raise UsageProblem(
                f"{why} installs {name}, and none of its pinned versions ({plugin.pairings()}) pairs with torch "
                f"{torch_version}{f' ({plugin.pairing_from})' if plugin.pairing_from else ''}; bring one with "
                "--plugin-wheel FILE|NAME==VERSION, or choose another --torch-version"
            )
        pinned(f"{name}=={version}", why)
    return tuple(chosen.values())


def _cached(folder: Path | None, key: str, version: str, catalog: Catalog, arch: str, python: str) -> list[PluginWheel]:
    if folder is None or not folder.is_dir():
        return []
    found = []
    for path in folder.glob("*.whl"):
        try:
            name, wheel_version, _, _ = parse_wheel_filename(path.name)
        except InvalidWheelFilename:
            continue
        if name == key and str(wheel_version) == version:
            try:
                found.append(read_wheel(path, catalog, arch, python))
            except UsageProblem:
                continue
    return found
