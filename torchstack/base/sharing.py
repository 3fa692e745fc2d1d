"""One build host shared by many runs: what a run owns, the locks runs wait on, what a killed run left.

Every container a run starts carries its owner (this host, the run's pid and the pid's start
time), so the run removes its own however it ends, and a later run removes what a SIGKILL left
(an owner whose process is gone). Work that equal runs would do twice (an image built from the
same inputs, a wheel downloaded into the same folder) is done under a lock file, which the kernel
releases when its holder dies.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import hashlib
import os
import re
import secrets
import shutil
import signal
import socket
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Protocol

LABEL = "io.torchstack.owner"
WORK_REPOSITORY = "torchstack-work"  # work_tag
ENV = "TORCHSTACK_OWNER"
PR_SET_PDEATHSIG = 1  # the owner a run hands to the processes it starts (the checks' pytest)


class Engine(Protocol):
    """What this module asks of an engine (engines/engine.py's Engine, connected): its containers, its images' names."""

    def containers_labelled(self, label: str) -> list[tuple[str, Mapping[str, str]]]: ...

    def remove_container(self, container_id: str) -> None: ...

    def images_named(self, repository: str) -> list: ...

    def remove_image(self, name: str, prune: bool = False) -> bool: ...


class Terminated(KeyboardInterrupt):
    """SIGTERM, as a CI runner cancelling a job sends it: unwinds like Ctrl-C, exits 143."""

    exit_code = 143


def exit_code(interruption: BaseException) -> int:
    return getattr(interruption, "exit_code", 130)


def _raise_terminated(signum, frame) -> None:
    raise Terminated()


def handle_signals() -> None:
    """Ctrl-C and SIGTERM unwind the run (every `finally` runs) instead of ending it where it stands.
    SIGINT is set too: a background job of a non-interactive shell starts with it ignored."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _raise_terminated)


def die_with_parent() -> None:
    """For a child process (subprocess's preexec_fn): end with SIGTERM when the run that started it
    dies, even of SIGKILL, instead of running on unowned (Linux's PR_SET_PDEATHSIG)."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _started(pid: int) -> str | None:
    """When process `pid` started (clock ticks since boot, /proc/PID/stat), None if there is none."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rpartition(")")[2].split()[19]


def identity(pid: int | None = None) -> str:
    pid = pid or os.getpid()
    return f"{socket.gethostname()}/{pid}/{_started(pid)}"


def owner() -> str:
    """This run's owner: the one it was handed by the run that started it, else its own."""
    return os.environ.get(ENV) or identity()


def labels() -> dict[str, str]:
    return {LABEL: owner()}


def gone(who: str) -> bool:
    """Whether `who` (an owner) is known to have ended: a process of this host that is not running
    (or a new process under its pid). One of another host cannot be judged here: not gone."""
    host, _, rest = who.partition("/")
    pid, _, started = rest.partition("/")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    return _started(int(pid)) != started


def work_tag() -> str:
    """A tag of this run's own (in WORK_REPOSITORY) for an image it builds FROM for a moment:
    BuildKit reads an image ID as a registry's name. A run that ended without removing it leaves
    it to the next run's sweep."""
    pid = os.getpid()
    return f"{WORK_REPOSITORY}:{pid}-{_started(pid)}-{secrets.token_hex(4)}"


def remove_containers(engine: Engine, who: str | None = None) -> int:
    """Remove the containers of owner `who` (default: this run's); how many."""
    found = engine.containers_labelled(f"{LABEL}={who or owner()}")
    for container_id, _ in found:
        engine.remove_container(container_id)
    return len(found)


def private_folder(parent: Path, name: str) -> Path:
    """A new folder under `parent` that only this run writes to (its name says whose it is)."""
    folder = parent / f"{identity().replace('/', '+')}+{name}"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def remove_leftovers(engine: Engine, folders: Path) -> list[str]:
    """Remove what runs that ended without cleaning up (SIGKILL) left: their containers, their work
    tags (work_tag) and their private folders under `folders`. What was removed, one phrase each."""
    removed = []
    ended = {labels[LABEL] for _, labels in engine.containers_labelled(LABEL) if gone(labels.get(LABEL, ""))}
    for who in sorted(ended):
        removed.append(f"{remove_containers(engine, who)} container(s) of {who}")
    for image in engine.images_named(WORK_REPOSITORY):
        for name in image.tags:
            pid, _, started = name.partition(":")[2].rpartition("-")[0].partition("-")
            if name.startswith(f"{WORK_REPOSITORY}:") and gone(f"{socket.gethostname()}/{pid}/{started}") and engine.remove_image(name):
                removed.append(name)
    for folder in sorted(folders.glob("*+*+*+*")) if folders.is_dir() else ():
        host, pid, started, _ = folder.name.split("+", 3)
        if gone(f"{host}/{pid}/{started}"):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(f"{folder}")
    return removed


def sweep(engine: Engine, folders: Path) -> list[str]:
    """remove_leftovers, said in one line for the run's output (no line when nothing was left)."""
    left = remove_leftovers(engine, folders)
    return [f"torchstack: removed what ended runs left behind: {'; '.join(left)}"] if left else []


@contextlib.contextmanager
def lock(folder: Path, name: str, waiting: Callable[[str], None], doing: str | None = None) -> Iterator[None]:
    """Hold the lock `name` (an image or folder name) among this host's runs; `waiting` is told
    once, in one line, when another run holds it (`doing`: what that run does, default building
    `name`) and this one waits."""
    folder.mkdir(parents=True, exist_ok=True)
    readable = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)
    if len(readable) > 200:  # a file name holds 255 bytes: a long engine socket and image name, shortened
        readable = f"{readable[:180]}-{hashlib.sha256(name.encode()).hexdigest()[:16]}"
    path = folder / (readable + ".lock")
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            handle.seek(0)
            holder = handle.read().strip() or "another run"
            waiting(f"torchstack: waiting for {holder}, which is {doing or f'building {name}'} on this host")
            fcntl.flock(handle, fcntl.LOCK_EX)
        handle.seek(0)
        handle.truncate()
        handle.write(f"run {os.getpid()}")
        handle.flush()
        try:
            yield
        finally:
            handle.truncate(0)
            fcntl.flock(handle, fcntl.LOCK_UN)
