"""Prebuilt torch wheels: where one comes from, what it is built for, what it contains."""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import os
import re
import socket
import subprocess
import sys
import urllib.parse
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from torchstack.base import redact, sharing
from torchstack.base.errors import ToolkitError, UsageProblem

# torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl
_WHEEL = re.compile(r"(?P<name>[^-]+)-(?P<version>[^-]+)(?:-\d[^-]*)?-(?P<python>[^-]+)-(?P<abi>[^-]+)-(?P<platform>[^-]+)\.whl")


@dataclass(frozen=True)
class WheelSpec:
    """What --torch-wheel named: a file, a wheelhouse folder, the URL of a wheel, or an index: pip's
    simple index at a URL, or `index` (where = None), the catalog's own (PyTorch's CPU builds)."""

    kind: str  # file | dir | url | index
    where: str | None

    @classmethod
    def parse(cls, text: str | None) -> WheelSpec:
        if text is None or text == "index":
            return cls("index", None)
        if not text.strip():
            raise UsageProblem(
                "--torch-wheel '': empty; name a .whl file, a folder of wheels, the URL of a wheel or of an index, "
                "or leave the option out for PyTorch's CPU wheel index"
            )
        if re.match(r"(https?|file)://", text):
            check_transport(text, "--torch-wheel")
            kind = "url" if text.split("#")[0].endswith(".whl") else "index"
            if kind == "url":
                expected_sha256(text)  # a fragment that says no sha256 is refused here
            return cls(kind, text)
        local = local_wheels(text)
        if local:
            return cls(*local)
        raise UsageProblem(f"--torch-wheel {text!r}: not a .whl file, a folder of wheels, the URL of a wheel or of an index, or 'index'")


def expected_sha256(url: str) -> str | None:
    """The sha256 a wheel URL's #sha256=HEX names (pip's form), else None; another fragment is refused."""
    fragment = urllib.parse.urlsplit(url).fragment
    if not fragment:
        return None
    named = re.fullmatch(r"sha256=([0-9a-fA-F]{64})", fragment)
    if not named:
        raise UsageProblem(f"--torch-wheel {redact.url(url)}: its #{fragment} is not #sha256= and 64 hex digits, the one hash it checks")
    return named[1].lower()


def _this_host(name: str | None) -> bool:
    """Whether `name` is this host: loopback, or an address of its own (the engine's bridge, where build steps reach it)."""
    if name == "localhost":
        return True
    try:
        address = ipaddress.ip_address(name or "")
    except ValueError:
        return False
    if address.is_loopback:
        return True
    with socket.socket(socket.AF_INET6 if address.version == 6 else socket.AF_INET) as probe:
        try:
            probe.bind((str(address), 0))  # only an address of this host's own can be bound
        except OSError:
            return False
    return True


def check_transport(url: str, option: str) -> None:
    """Plain http only to this host: to another one its packages, and any login, would cross the network
    unchecked and in clear (pip's trusted-host, which a plain-http index needs, checks nothing)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "http" and not _this_host(parts.hostname):
        raise UsageProblem(
            f"{option} {redact.url(url)}: plain http to another host; use https (plain http is taken only from this host: "
            "loopback or one of its own addresses)"
        )


def local_wheels(text: str) -> tuple[str, str] | None:
    """("file", path) for a .whl file, ("dir", path) for a folder of wheels, else None."""
    path = Path(text).expanduser()
    if path.is_dir():
        return "dir", str(path.resolve())
    if path.is_file() and path.suffix == ".whl":
        return "file", str(path.resolve())
    return None


@dataclass(frozen=True)
class WheelName:
    filename: str
    version: str
    python: str
    platform: str

    @classmethod
    def parse(cls, filename: str) -> WheelName:
        match = _WHEEL.fullmatch(filename)
        if not match or match["name"] != "torch":
            raise UsageProblem(f"{filename}: not a torch wheel file name")
        return cls(filename, match["version"], match["python"], match["platform"])

    def fits(self, arch: str, python: str) -> bool:
        return self.platform.endswith(f"_{arch}") and self.python == "cp" + python.replace(".", "")


@functools.lru_cache(maxsize=1)
def wheelhouse_wheels() -> tuple[WheelName, ...]:
    """The torch wheels in the local folders pip's find-links names (PIP_FIND_LINKS, pip's
    configuration): what pip takes first, offline, for a wheel from the index."""
    result = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True)
    folders = [
        Path(value.removeprefix("file://"))
        for line in result.stdout.splitlines()
        if line.split("=", 1)[0].endswith(".find-links")
        for value in line.split("=", 1)[1].strip("'\"").split()
    ]
    found = {p.name for folder in folders if folder.is_dir() for p in folder.glob("torch-*.whl")}
    return tuple(WheelName.parse(name) for name in sorted(found))


def pick_from_folder(folder: Path, arch: str, python: str, version: str | None) -> Path:
    """The newest torch wheel in `folder` for this architecture and Python (and version, if given)."""
    candidates = []
    for path in folder.glob("torch-*.whl"):
        name = WheelName.parse(path.name)
        if name.fits(arch, python) and (version is None or name.version.split("+")[0] == version.split("+")[0]):
            candidates.append((name.version, path))
    if not candidates:
        wanted = f"torch {version or '(any version)'} for cp{python.replace('.', '')} {arch}"
        raise UsageProblem(f"--torch-wheel {folder}: no {wanted} in that folder")
    return max(candidates)[1]


def _index_settings(index_url: str) -> dict[str, str]:
    """pip's settings for a package index: a plain-http one must also be named a trusted host, or pip ignores it."""
    parts = urllib.parse.urlsplit(index_url)
    settings = {"index-url": index_url}
    if parts.scheme == "http":
        settings["trusted-host"] = parts.hostname + (f":{parts.port}" if parts.port else "")
    return settings


def pip_index_settings(index_url: str) -> dict[str, str]:
    """pip's settings for a package index (--pip-index-url), an http(s) URL."""
    parts = urllib.parse.urlsplit(index_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageProblem(f"--pip-index-url {redact.url(index_url)!r}: not an http(s) URL")
    return _index_settings(index_url)


def pip_index_env(index_url: str | None) -> dict[str, str]:
    """The environment of a pip command on the host: this process's, with the index (when one is given) in
    pip's own variables, PIP_INDEX_URL and PIP_TRUSTED_HOST. Never in pip's arguments: every user of the
    host reads a command line (/proc/PID/cmdline), only the process's own user its environment."""
    env = dict(os.environ)
    if index_url:
        settings = _index_settings(index_url)
        env["PIP_INDEX_URL"] = settings["index-url"]
        if "trusted-host" in settings:  # added to the hosts pip is told to trust already, as pip's --trusted-host adds
            env["PIP_TRUSTED_HOST"] = " ".join(filter(None, (os.environ.get("PIP_TRUSTED_HOST"), settings["trusted-host"])))
    return env


def pip_conf_text(index_url: str) -> str:
    """The same settings as a pip configuration file, for pip inside build steps."""
    return "[global]\n" + "".join(f"{key} = {value}\n" for key, value in pip_index_settings(index_url).items())


def download_from_index(dest: Path, arch: str, python: str, version: str, torch_index: str) -> tuple[Path, str]:
    """torch==version for the image's platform, and where it came from: a local wheelhouse pip is
    configured with (PIP_FIND_LINKS, or find-links in pip's configuration) wins, offline; else
    `torch_index`. Failing both is one line naming the index and how to point at a wheelhouse."""
    requirement = f"torch=={version}"
    try:
        download_wheel(dest, arch, python, requirement, offline=True)
        return pick_from_folder(dest, arch, python, version), "a local wheelhouse (pip's find-links)"
    except DownloadFailed:
        pass
    try:
        download_wheel(dest, arch, python, requirement, torch_index)
    except DownloadFailed as exc:
        raise ToolkitError(
            f"no {requirement} wheel for {arch} cp{python.replace('.', '')} in a local wheelhouse nor at {redact.url(torch_index)} "
            f"({exc.detail}); point at a wheelhouse with PIP_FIND_LINKS=DIR or --torch-wheel DIR, "
            "or at a mirror of the index with --torch-wheel URL"
        ) from None
    return pick_from_folder(dest, arch, python, version), torch_index


class DownloadFailed(ToolkitError):
    def __init__(self, message: str, detail: str):
        super().__init__(message)
        self.detail = detail


def download_wheel(dest: Path, arch: str, python: str, requirement: str, index_url: str | None = None, offline: bool = False) -> None:
    """pip download of one NAME==VERSION wheel (no dependencies) for the image's platform and Python, from
    `index_url` (given to pip in its environment: pip_index_env), else pip's own index; `offline`: from
    the local wheelhouse pip's find-links names alone."""
    dest.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--quiet",
        "--no-deps",
        "--only-binary=:all:",
        "--platform",
        f"manylinux_2_28_{arch}",
        "--platform",
        f"manylinux2014_{arch}",
        "--python-version",
        python,
        "--dest",
        str(dest),
        *(["--no-index"] if offline else []),
        requirement,
    ]
    # One pip at a time into a folder: another run's pip may be writing the very file.
    with sharing.lock(dest, ".download", lambda line: print(line, file=sys.stderr), f"downloading into {dest}"):
        result = subprocess.run(command, capture_output=True, text=True, env=pip_index_env(index_url))
    if result.returncode != 0:
        last = redact.url((result.stderr.strip().splitlines() or ["no output"])[-1])
        raise DownloadFailed(f"pip could not download {requirement} for {arch} cp{python.replace('.', '')}: {last}", last)


@contextlib.contextmanager
def _opened(path: Path) -> Iterator[zipfile.ZipFile]:
    """The wheel as the zip archive it is; one that is not (cut short, or no wheel at all) is one line."""
    try:
        with zipfile.ZipFile(path) as wheel:
            yield wheel
    except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
        raise UsageProblem(f"{path}: not a wheel that can be read ({exc}); remove it, or download it again") from None


@functools.lru_cache(maxsize=8)
def _read_wheel(path: Path, size: int, mtime_ns: int) -> tuple[frozenset[str], str | None]:
    """A wheel's file base names and its torch/version.py, read in one pass over its index (a
    torch wheel is hundreds of MB; size and mtime in the key: a replaced file is read again)."""
    with _opened(path) as wheel:
        names = wheel.namelist()
        version_py = wheel.read("torch/version.py").decode() if "torch/version.py" in names else None
    return frozenset(name.rsplit("/", 1)[-1] for name in names), version_py


def _wheel(path: Path) -> tuple[frozenset[str], str | None]:
    stat = path.stat()
    return _read_wheel(path.resolve(), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _complex_dot_defect(path: Path, size: int, mtime_ns: int) -> str | None:
    with _opened(path) as wheel:
        names = wheel.namelist()
        bundled = sorted(n.rsplit("/", 1)[-1] for n in names if n.rsplit("/", 1)[-1].startswith("libopenblas"))
        if not bundled or "torch/lib/libtorch_cpu.so" not in names:
            return None
        fortran = cblas = False
        tail = b""
        with wheel.open("torch/lib/libtorch_cpu.so") as library:
            for block in iter(lambda: library.read(1 << 24), b""):
                window = tail + block
                fortran = fortran or b"\0zdotu_\0" in window
                cblas = cblas or b"\0cblas_zdotu_sub\0" in window
                tail = window[-32:]
    if not fortran or cblas:
        return None
    return (
        f"{path.name} calls BLAS's complex dot as zdotu_(&result, ...) (built without BLAS_USE_CBLAS_DOT: its "
        f"libtorch_cpu.so imports zdotu_ and no cblas_zdotu_sub), while the OpenBLAS it bundles ({bundled[0]}) returns "
        "the result: torch.dot and torch.vdot of complex tensors are wrong (0)"
    )


def complex_dot_defect(path: Path) -> str | None:
    """Why a torch wheel's complex dot products are wrong, or None: read from the wheel itself,
    where PyTorch's configure-time probe (cmake/BLAS_ABI.cmake) chose the Fortran convention for a
    bundled OpenBLAS, which returns complex results by value (patches/torch/0001 fixes our builds)."""
    stat = path.stat()
    return _complex_dot_defect(path.resolve(), stat.st_size, stat.st_mtime_ns)


def torch_version_of(path: Path) -> str:
    """torch.__version__ as the wheel will report it (torch/version.py), e.g. 2.8.0+cpu.

    It can differ from the file name: PyPI's aarch64 torch-2.8.0 wheel reports 2.8.0+cpu.
    """
    text = _wheel(path)[1]
    if text is None:
        return WheelName.parse(path.name).version
    match = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", text, re.MULTILINE)
    return match[1] if match else WheelName.parse(path.name).version


def check_contents(path: Path, backend: str, markers: tuple[str, ...], excludes: tuple[str, ...]) -> None:
    """Refuse a wheel whose contents would make the tag a lie.

    Every marker must start the name of a file in the wheel (e.g. libarm_compute: ACL is
    inside); no exclude may (e.g. libtorch_cuda: a CUDA build, which needs the CUDA toolkit).
    """
    basenames = _wheel(path)[0]
    missing = [m for m in markers if not any(n.startswith(m) for n in basenames)]
    if missing:
        raise UsageProblem(f"{path.name} is not a {backend} build (it lacks {', '.join(missing)}); tagging it {backend} would be false")
    found = [e for e in excludes if any(n.startswith(e) for n in basenames)]
    if found:
        raise UsageProblem(
            f"{path.name} is not a CPU-only build (it has {', '.join(found)}); its dependencies include the CUDA "
            "toolkit. Use a CPU wheel (e.g. from PyTorch's CPU index), another --torch-version, or --torch-from source"
        )
