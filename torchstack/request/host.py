"""What the build host is: its architecture, CPU (for `native`), cores, memory."""

from __future__ import annotations

import os
import platform
import re
from pathlib import Path

from torchstack.base.errors import UsageProblem
from torchstack.catalog.model import Catalog, Target

_ARCH_ALIASES = {"amd64": "x86_64", "arm64": "aarch64"}


def host_arch() -> str:
    machine = platform.machine().lower()
    return _ARCH_ALIASES.get(machine, machine)


def _cpuinfo_fields(text: str) -> dict[str, str]:
    """The first value of each field in /proc/cpuinfo (all cores of a host are alike here)."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip().lower(), value.strip())
    return fields


def cpu_features(cpuinfo: str) -> set[str]:
    """The CPU's features: the `flags` (x86), `Features` (Arm) or `features` (IBM Z) of /proc/cpuinfo."""
    fields = _cpuinfo_fields(cpuinfo)
    return set((fields.get("flags") or fields.get("features") or "").split())


def _matches(target: Target, fields: dict[str, str], text: str) -> bool:
    native = target.native
    if native is None:
        return False
    if native.implementer is not None:
        implementer = fields.get("cpu implementer", "").lower()
        part = fields.get("cpu part", "").lower()
        return implementer == native.implementer.lower() and part in {p.lower() for p in native.parts}
    if native.machine_types:
        machines = set(re.findall(r"machine\s*[=:]\s*(\w+)", text))
        return bool(machines & set(native.machine_types))
    if native.x86_vendor is not None and fields.get("vendor_id") != native.x86_vendor:
        return False
    return native.features and set(target.cpu_features) <= cpu_features(text)


def resolve_native(catalog: Catalog, arch: str, cpuinfo: str) -> Target:
    """The most specific target of `arch` whose `native` rule matches this /proc/cpuinfo.

    Targets are tried from the last listed to the first, so a table ordered from oldest to
    newest picks the newest level a CPU supports (x86-64-v4 before v3 before v2).
    """
    fields = _cpuinfo_fields(cpuinfo)
    for target in reversed(catalog.targets_for(arch)):
        if _matches(target, fields, cpuinfo):
            return target
    known = ", ".join(t.name for t in catalog.targets_for(arch) if t.native)
    seen = fields.get("cpu part") or fields.get("model name") or next(iter(re.findall(r"machine\s*=\s*\w+", cpuinfo)), "?")
    raise UsageProblem(
        f"--build-target native: this {arch} CPU ({seen}) matches none of {known}; pick a target with --build-target, or generic"
    )


def read_cpuinfo(path: Path = Path("/proc/cpuinfo")) -> str:
    return path.read_text()


def cores() -> int:
    return len(os.sched_getaffinity(0))


def memory_gib() -> float:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30


def default_jobs(gib_per_job: float, cpu_count: int | None = None, mem_gib: float | None = None) -> int:
    """Parallel compile jobs bounded by cores and by memory (PyTorch needs about 3 GiB a job)."""
    cpu_count = cores() if cpu_count is None else cpu_count
    mem_gib = memory_gib() if mem_gib is None else mem_gib
    return max(1, min(cpu_count, int(mem_gib // gib_per_job)))
