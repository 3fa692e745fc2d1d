#!/usr/bin/env python3
"""Make a torch release's entry for torchstack/data/torch.yaml from PyPI's metadata.

    .venv/bin/python scripts/catalog-torch.py 2.16.0            # print the entry
    .venv/bin/python scripts/catalog-torch.py 2.16.0 --write    # and add it to torch.yaml

For a maintainer, on the day a release is out (docs/maintaining/torch-releases.md). It reads, from
PyPI (or --pypi, a mirror of it that serves the same JSON API and files):
- the Python versions the release has Linux wheels for (its manylinux files on PyPI; PyTorch's CPU
  index carries the same set as `+cpu` builds);
- the release's Requires-Dist, from the wheel's METADATA (PEP 658's `.metadata` file where the index
  serves one, else the METADATA member read out of the wheel with HTTP range requests, a few hundred
  kB of a wheel of hundreds of MB), CUDA's packages left out (a CPU build does not declare them);
- pins for every package that Requires-Dist pulls in, resolved by pip for each Python a Debian
  release of platforms.yaml has, and refused where two Pythons resolve differently.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import urllib.parse
import urllib.request
import zipfile
from datetime import date
from pathlib import Path

import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
RELEASES = ROOT / "torchstack" / "data" / "torch.yaml"
PLATFORMS = ROOT / "torchstack" / "data" / "platforms.yaml"
# PyPI's Linux torch wheels declare these for CUDA; PyTorch's `+cpu` wheels of the same release do not.
CUDA_PACKAGES = re.compile(r"^(cuda-|nvidia-|triton$)")


class Refused(Exception):
    """One line for the maintainer."""


def _get(url: str, headers: dict[str, str] | None = None) -> bytes:
    request = urllib.request.Request(url, headers={"User-Agent": "torchstack-catalog", **(headers or {})})
    with urllib.request.urlopen(request, timeout=60) as response:
        return response.read()


class _RangeFile(io.RawIOBase):
    """A remote file read through HTTP range requests, enough for zipfile to find one member."""

    def __init__(self, url: str, size: int):
        self.url, self.size, self.position = url, size, 0

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self.position = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.size}[whence] + offset
        return self.position

    def tell(self) -> int:
        return self.position

    def readinto(self, buffer) -> int:
        end = min(self.position + len(buffer), self.size) - 1
        if end < self.position:
            return 0
        data = _get(self.url, {"Range": f"bytes={self.position}-{end}"})
        buffer[: len(data)] = data
        self.position += len(data)
        return len(data)


def release_files(pypi: str, version: str) -> list[dict]:
    """PyPI's files of torch `version` (the project's JSON API; URLs made absolute)."""
    url = f"{pypi}/pypi/torch/json"
    project = json.loads(_get(url))
    files = project["releases"].get(version)
    if not files:
        newest = project["info"]["version"]
        raise Refused(f"PyPI has no torch {version} (its newest release is {newest})")
    return [{**f, "url": urllib.parse.urljoin(url, f["url"])} for f in files]


def pythons(files: list[dict]) -> list[str]:
    """The Python versions with a manylinux wheel for both x86_64 and aarch64 (free-threaded ones left out)."""
    seen: dict[str, set[str]] = {}
    for f in files:
        match = re.fullmatch(r"torch-[^-]+-cp(\d)(\d+)-cp\d+-manylinux_\d+_\d+_(x86_64|aarch64)\.whl", f["filename"])
        if match:
            seen.setdefault(f"{match[1]}.{match[2]}", set()).add(match[3])
    return sorted((p for p, arches in seen.items() if arches == {"x86_64", "aarch64"}), key=lambda p: int(p.split(".")[1]))


def metadata(files: list[dict]) -> tuple[str, str]:
    """The METADATA of one x86_64 wheel of the release, and the file it was read from."""
    wheel = next((f for f in files if f["filename"].endswith("manylinux_2_28_x86_64.whl")), None)
    if wheel is None:
        raise Refused("the release has no manylinux_2_28 x86_64 wheel on PyPI to read its metadata from")
    try:
        return _get(wheel["url"] + ".metadata").decode(), wheel["filename"]
    except OSError:
        pass  # no PEP 658 file here: read the member out of the wheel itself
    with zipfile.ZipFile(io.BufferedReader(_RangeFile(wheel["url"], wheel["size"]), buffer_size=1 << 18)) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        return archive.read(name).decode(), wheel["filename"]


def requires_dist(text: str) -> tuple[list[str], list[str]]:
    """The release's Requires-Dist for a CPU build (no extras), and the CUDA packages left out."""
    kept, cuda = [], []
    for line in text.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        requirement = Requirement(line.split(":", 1)[1].strip())
        if requirement.marker and "extra" in str(requirement.marker):
            continue
        (cuda if CUDA_PACKAGES.match(canonicalize_name(requirement.name)) else kept).append(str(requirement))
    return kept, sorted({canonicalize_name(Requirement(c).name) for c in cuda})


def resolve(requirements: list[str], python: str, pypi: str) -> list[str]:
    """NAME==VERSION for every package `requirements` pull in, as pip resolves them for Linux `python`."""
    # This resolution, not a host's constraints or wheelhouse: none of pip's settings but its CA bundle.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") or k == "PIP_CERT"}
    env["PIP_CONFIG_FILE"] = os.devnull
    with tempfile.TemporaryDirectory() as target:
        command = [
            *(sys.executable, "-m", "pip", "install", "--quiet", "--dry-run", "--ignore-installed", "--only-binary=:all:"),
            *("--python-version", python, "--platform", "manylinux_2_28_x86_64", "--target", target),
            *("--index-url", f"{pypi}/simple", "--report", "-", *requirements),
        ]
        result = subprocess.run(command, capture_output=True, text=True, env=env)
    if result.returncode != 0:
        raise Refused(f"pip could not resolve {' '.join(requirements)} for Python {python}: {result.stderr.strip()[-400:]}")
    report = json.loads(result.stdout)
    return sorted(f"{canonicalize_name(i['metadata']['name'])}=={i['metadata']['version']}" for i in report["install"])


def entry(version: str, pypi: str) -> dict:
    """The release's entry for torch.yaml."""
    files = release_files(pypi, version)
    text, read_from = metadata(files)
    kept, cuda = requires_dist(text)
    debian = sorted({d["python"] for d in yaml.safe_load(PLATFORMS.read_text())["distributions"].values()})
    offered = pythons(files)
    resolved = {p: resolve(kept, p, pypi) for p in debian if p in offered}
    if not resolved:
        raise Refused(f"torch {version} has no wheel for a Python a Debian release has ({', '.join(debian)}); it has {', '.join(offered)}")
    if len({tuple(r) for r in resolved.values()}) > 1:
        apart = "; ".join(f"Python {p}: {' '.join(r)}" for p, r in resolved.items())
        raise Refused(f"pip resolves torch {version}'s requirements differently per Python ({apart}): pin them by hand")
    released = min(f["upload_time"] for f in files)[:10]
    return {
        "released": released,
        "pythons": offered,
        "requires_dist": kept,
        "requires_dist_from": f"PyPI, {read_from} METADATA; CUDA's left out: {', '.join(cuda) or 'none'}",
        "runtime_requirements": next(iter(resolved.values())),
        "resolved": f"pip's resolver on PyPI for Python {', '.join(resolved)} (Linux), {date.today().isoformat()}",
    }


def as_yaml(version: str, found: dict) -> str:
    def flow(items: list[str]) -> str:
        return "[" + ", ".join(json.dumps(i) for i in items) + "]"

    return (
        f'  "{version}":\n'
        f"    released: {found['released']}\n"
        f"    pythons: {flow(found['pythons'])}\n"
        f"    requires_dist: {flow(found['requires_dist'])}\n"
        f"    requires_dist_from: {json.dumps(found['requires_dist_from'])}\n"
        f"    runtime_requirements: {flow(found['runtime_requirements'])}\n"
        f"    resolved: {json.dumps(found['resolved'])}\n"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("version", help="the torch release, e.g. 2.16.0")
    parser.add_argument("--pypi", default="https://pypi.org", help="PyPI or a mirror of it (default: %(default)s)")
    parser.add_argument("--write", action="store_true", help=f"add the entry to {RELEASES.relative_to(ROOT)}")
    args = parser.parse_args()
    if not re.fullmatch(r"\d+\.\d+\.\d+", args.version):
        print(f"catalog-torch: {args.version!r} is not a release version (X.Y.Z)", file=sys.stderr)
        return 2
    known = yaml.safe_load(RELEASES.read_text())["releases"] if RELEASES.exists() else {}
    if args.write and args.version in known:
        print(f"catalog-torch: {RELEASES.relative_to(ROOT)} has torch {args.version} already", file=sys.stderr)
        return 2
    try:
        text = as_yaml(args.version, entry(args.version, args.pypi.rstrip("/")))
    except (Refused, OSError) as exc:
        print(f"catalog-torch: {exc}", file=sys.stderr)
        return 1
    print(text, end="")
    if args.write:  # newest first: right under `releases:`
        head, tail = RELEASES.read_text().split("\nreleases:\n", 1)
        RELEASES.write_text(f"{head}\nreleases:\n{text}{tail}")
        print(f"catalog-torch: added torch {args.version} to {RELEASES.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
