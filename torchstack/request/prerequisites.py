"""What this build host must have installed for a plan, with one line naming whatever it lacks."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from torchstack.base.errors import HostNotReady, UsageProblem
from torchstack.catalog.model import COMMAND
from torchstack.engines import buildkit
from torchstack.request import host
from torchstack.request.plan import RELEASE_STAGE, Plan

BINFMT = Path("/proc/sys/fs/binfmt_misc")
SETUP_HOST = "scripts/setup-host.sh"


@dataclass(frozen=True)
class Missing:
    what: str  # the tool, and what the plan needs it for
    install: str  # the command that installs it


def binfmt_ready(entry: Path) -> bool:
    """A qemu-user binfmt entry that is enabled and has flag F (the interpreter opened at
    registration, so it works inside containers, whose root holds no qemu binary)."""
    if not entry.is_file():
        return False
    text = entry.read_text()
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags:")), [])
    return text.startswith("enabled") and any("F" in flag for flag in flags)


def missing_for(plan: Plan, bootstrap: bool) -> list[Missing]:
    """What this host lacks to carry out `plan`; `bootstrap`: its base OS image is to be made here."""
    missing = []
    entry = BINFMT / f"qemu-{plan.arch.qemu}"
    if plan.emulated and not binfmt_ready(entry):
        missing.append(
            Missing(
                f"qemu emulation of {plan.arch.name} on this {plan.host_arch} host (no enabled binfmt entry {entry} with flag F)",
                "bash scripts/setup-host.sh (it installs qemu-user and registers it), or: apt-get install qemu-user-static binfmt-support",
            )
        )
    if bootstrap and shutil.which("mmdebstrap") is None:
        missing.append(Missing("mmdebstrap, to bootstrap the Debian base image", "apt-get install mmdebstrap"))
    if bootstrap and plan.emulated and shutil.which("arch-test") is None:
        missing.append(
            Missing(
                f"arch-test, which mmdebstrap needs to bootstrap a foreign architecture ({plan.arch.debian})",
                "apt-get install arch-test",
            )
        )
    if plan.step_mounts and not buildkit.available():
        missing.append(
            Missing(
                "docker buildx, for --builder buildx",
                f"apt-get install docker-buildx (Debian 13, Ubuntu), or {SETUP_HOST} (which also installs it on Debian 12)",
            )
        )
    return missing


def require(plan: Plan, bootstrap: bool) -> None:
    """Stop, in one line, before any work when this host lacks what `plan` needs."""
    missing = missing_for(plan, bootstrap)
    if missing:
        raise HostNotReady(
            "this host is not set up for this build: "
            + "; ".join(f"missing {m.what}: {m.install}" for m in missing)
            + f" (or run {SETUP_HOST}, which installs all of it)"
        )


def lacking_cpu_features(plan: Plan, cpuinfo: str | None = None) -> list[str]:
    """The target's CPU features this host's CPU lacks (none for an emulated build: qemu runs the
    target's code whatever this CPU has, and an emulated CPU lists no features)."""
    if plan.emulated:
        return []
    have = host.cpu_features(cpuinfo if cpuinfo is not None else host.read_cpuinfo())
    return [f for f in plan.target.cpu_features if f not in have]


def require_cpu_for_checks(plan: Plan, checks: bool, cpuinfo: str | None = None) -> list[str]:
    """Refuse, before any work, a checked release build whose image cannot start on this CPU (its
    entry point refuses a CPU that lacks a target feature, so every check would fail an hour in).
    Returns notes for a build that can go ahead on this host but runs less than it should."""
    lacking = lacking_cpu_features(plan, cpuinfo)
    if not lacking:
        return []
    said = f"this host's CPU lacks {', '.join(lacking)}, which {plan.target.name} code ({plan.target.flag}) may use"
    if checks and plan.build_type == RELEASE_STAGE:
        raise UsageProblem(
            f"{said}: the image would not start here, so its checks cannot run; build with --no-test "
            f"and check it where it runs ({COMMAND} test IMAGE)"
        )
    return [f"torchstack: note: {said}; the build compiles for it without running it", *host_run_notes(plan)]


def host_run_notes(plan: Plan) -> list[str]:
    """What the compiled components' builds run on this host, and what becomes of each on a CPU
    that cannot execute the target's code (components.yaml host_runs): one line each."""
    built = {s.name for s in plan.stages}
    return [
        f"torchstack: note: {c.name}'s build runs {run.runs} on this host: {run.without_the_target_cpu}"
        for c in plan.components
        if c.stage in built
        for run in c.host_runs
    ]
