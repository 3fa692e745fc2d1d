"""What makes one request, from the same inputs, give the same images bit for bit.

Each image's own date (its config's and history's `created`, hence the SBOM's) is the build's
SOURCE_DATE_EPOCH: the environment's where it is set (reproducible-builds.org's convention), else
the toolkit revision's commit time, else its release's date; never the clock. Every file in every
layer, the OS tarball's among them, has one fixed time, FILE_EPOCH. What varies from run to run
(when, on which host, how long) goes into the build's log, its summary and its signed provenance.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path

from torchstack.base.errors import UsageProblem

RELEASED = 1795305600  # 2026-11-22: torchstack 0.1.0 (r26.11), for an installed toolkit without its git history
# Every file's time in the layers BuildKit builds is clamped to this one date, whatever the
# inputs' SOURCE_DATE_EPOCH: the clamp is part of each step's command, and a date that moved with
# every toolkit revision or archive state would make every compiled layer be built again.
FILE_EPOCH = 1704067200  # 2024-01-01
# Every step's environment, on every engine: compilers' __DATE__, useradd's password date and
# Python's byte code (checked by the source's hash, not its time, so that the files' clamped times
# leave it valid) take FILE_EPOCH; Python's string hashing is fixed (the order of sets it writes).
STEP_ENVIRONMENT = {"SOURCE_DATE_EPOCH": str(FILE_EPOCH), "PYTHONHASHSEED": "0"}


def clamping_shell() -> str:
    """A step's command as BuildKit's SHELL runs it (the command is $1), in STEP_ENVIRONMENT; then
    every file newer than FILE_EPOCH on the step's own file system gets that time. The engine's
    mounts (/proc, /sys, secrets, caches, /etc/hosts) are no part of the layer: they are left out
    by the mount table."""
    mounts = """$(awk '$5 != "/" { printf "! -path %s ", $5 }' /proc/self/mountinfo)"""
    environment = " ".join(f"{name}={value}" for name, value in STEP_ENVIRONMENT.items())
    return (
        f'{environment} /bin/bash -o pipefail -c "$1" '
        f"&& find / -xdev -newermt @{FILE_EPOCH} {mounts}-exec touch --no-dereference --date=@{FILE_EPOCH} {{}} +"
    )


def source_date_epoch(toolkit: dict, environ: Mapping[str, str] = os.environ) -> tuple[int, str]:
    """The build's SOURCE_DATE_EPOCH and where it comes from, in words; `toolkit` is
    metadata.toolkit_revision()."""
    given = environ.get("SOURCE_DATE_EPOCH", "").strip()
    if given:
        if not given.isdigit():
            raise UsageProblem(f"SOURCE_DATE_EPOCH={given}: not a whole number of seconds since 1970 (unset it to take the toolkit's)")
        return int(given), "SOURCE_DATE_EPOCH in the environment"
    if toolkit.get("committed"):
        return toolkit["committed"], f"the commit time of torchstack {toolkit['revision']}"
    return RELEASED, f"the release date of torchstack {toolkit['version']}"


def described(epoch: int) -> str:
    return f"{epoch} ({datetime.fromtimestamp(epoch, timezone.utc):%Y-%m-%d %H:%M:%S} UTC)"


def set_times(folder: Path) -> None:
    """Every file and folder of a build context gets FILE_EPOCH: what a step COPYs keeps its time
    (a fresh clone's files have their checkout's)."""
    for path in (folder, *folder.rglob("*")):
        os.utime(path, (FILE_EPOCH, FILE_EPOCH), follow_symlinks=False)
