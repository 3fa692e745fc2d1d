"""What this test session makes on the host, so that its end finds what it left, and only that.

A build host is shared: other builds, and other test sessions, run beside this one. The session
therefore judges only what it made itself:
- its own temporary root (TMPDIR for the session and every process it starts), and the mounts in it;
- the containers that carry an owner label (torchstack.base.sharing) of the session: its own, or one of
  the build.py runs it started (`popen` records each);
- the image names that hold one of its tokens (its id, in every tag the tests make; the addresses of
  its loopback registries);
- the toolkit's build contexts of those owners, and the processes still running under it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
import uuid
from pathlib import Path

import docker

from torchstack.base import sharing
from torchstack.base.state import state_dir

ID = uuid.uuid4().hex[:8]  # in every image tag the session makes
# The Docker engine's handle on the host's network namespace: its first container or build step on
# the host's network bind-mounts it under the engine's exec root, for the engine's life and after.
ENGINE_OWN_MOUNTS = {"/run/docker/netns/default", "/var/run/docker/netns/default"}

# Each session's root holds this file: the pid and start time of the process that made it. A root whose
# process is gone is a session killed before its end (a CI job at its time limit), which removed nothing.
OWNER_FILE = ".session-owner"
ROOTS = Path("/var/tmp")

_owners: set[str] = set()
_tokens: set[str] = {ID}
_lock = threading.Lock()
_root: Path | None = None


def start() -> Path:
    """The session's temporary root, made once (under /var/tmp: engines' storage does not fit a
    tmpfs), and named as TMPDIR for the session and every process it starts. The roots earlier
    sessions left when they were killed are removed first: their engines' storage, tens of GB."""
    global _root
    if _root is None:
        _remove_roots_of_killed_sessions()
        _root = Path(tempfile.mkdtemp(prefix="tst-", dir=ROOTS))
        (_root / OWNER_FILE).write_text(f"{os.getpid()} {_started(os.getpid())}\n")
        os.environ["TMPDIR"] = str(_root)
        tempfile.tempdir = str(_root)
        _owners.add(sharing.identity())
    return _root


def _started(pid: int) -> str:
    """When the process `pid` started, in clock ticks since boot (/proc/PID/stat's 22nd field)."""
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[19]


def _remove_roots_of_killed_sessions() -> None:
    """Every root under ROOTS whose OWNER_FILE names a process that no longer runs: its mounts
    detached, its files removed. A root without that file is not a session's, or one being made."""
    for root in ROOTS.glob("tst-*"):
        owner = root / OWNER_FILE
        try:
            pid, started = owner.read_text().split()
        except (OSError, ValueError):  # not a session's root, one being made, or one its session is removing
            continue
        try:
            if _started(int(pid)) == started:
                continue  # its session runs
        except (OSError, ValueError, IndexError):
            pass  # no such process: gone
        for mount in sorted(_mounts_under(root), reverse=True):
            subprocess.run(["umount", "--lazy", mount], capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


def _mounts_under(root: Path) -> set[str]:
    """The mount points below `root`, as this process's mount table lists them."""
    mounts = {line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()}
    return {m for m in mounts if m.startswith(f"{root}/")}


def finish() -> None:
    """The temporary root removed (once the leftovers were looked at)."""
    if _root is not None:
        tempfile.tempdir = None
        shutil.rmtree(_root, ignore_errors=True)


def popen(args: list[str], **kwargs) -> subprocess.Popen:
    """A process of the session (a build.py run): the owner its containers and contexts carry is recorded."""
    process = subprocess.Popen(args, **kwargs)
    with _lock:
        _owners.add(sharing.identity(process.pid))
    return process


def run(args: list[str], timeout: float | None = None, **kwargs) -> subprocess.CompletedProcess:
    """subprocess.run through `popen`: its output captured as text."""
    with popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs) as process:
        try:
            out, err = process.communicate(timeout=timeout)
        except BaseException:
            process.terminate()
            process.wait()
            raise
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def owners() -> set[str]:
    """The owners recorded so far: the session's own, and one per process it started."""
    with _lock:
        return set(_owners)


def mark(token: str) -> None:
    """Image names holding `token` (a loopback registry's address, say) are the session's too."""
    with _lock:
        _tokens.add(token)


def labels() -> dict[str, str]:
    """The label a container the tests start themselves carries."""
    return sharing.labels()


def _children() -> set[str]:
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
            if fields[1] == str(os.getpid()):
                found.add(f"pid {stat.parent.name}: {(stat.parent / 'cmdline').read_bytes().replace(bytes(1), b' ').decode()[:120]}")
        except OSError:
            continue
    return found


def leftovers() -> dict[str, list[str]]:
    """What the session made and did not remove, by kind (empty kinds left out)."""
    with _lock:
        owners, tokens = set(_owners), set(_tokens)
    root = _root
    found: dict[str, set[str]] = {"processes": _children()}
    if root is not None:
        kept = {p for p in root.iterdir() if not p.name.startswith("pytest-of-") and p.name != OWNER_FILE} if root.is_dir() else set()
        found["temporary files"] = {str(p) for p in kept}
        found["mounts"] = _mounts_under(root) - ENGINE_OWN_MOUNTS
    prefixes = tuple(who.replace("/", "+") + "+" for who in owners)
    found["build contexts"] = {str(p) for p in (state_dir() / "contexts").glob("*") if p.name.startswith(prefixes)}
    try:
        client = docker.from_env(timeout=30)
        client.ping()
    except docker.errors.DockerException:
        return {kind: sorted(items) for kind, items in found.items() if items}
    found["containers"] = {
        f"{c.short_id} {c.name} ({' '.join(c.attrs['Config']['Cmd'] or [])[:60]})"
        for c in client.containers.list(all=True, filters={"label": sharing.LABEL}, ignore_removed=True)
        if c.labels.get(sharing.LABEL) in owners
    }
    # The engine's listing as it answers it: the SDK's images.list() asks for each image again, and fails
    # on one that another session (a build beside this one) removed in between.
    listed = client.api.images()
    found["image names"] = {t for image in listed for t in image.get("RepoTags") or () if any(token in t for token in tokens)}
    return {kind: sorted(items) for kind, items in found.items() if items}
