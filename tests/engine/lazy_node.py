"""An empty containerd node with SOCI's snapshotter, as a Kubernetes node that lazily pulls images
runs it: containerd 2 and soci-snapshotter-grpc (setup-host.sh --lazy puts Debian forky's in
/usr/local/lib/torchstack/soci) on sockets and roots of their own under a folder, nothing of the
host's. It pulls an image plainly (`ctr images pull`, unpacked into overlayfs) or lazily (`soci image
rpull` with the image's SOCI index: the layers mounted over FUSE, fetched as they are read), and runs
a command in it. Used by the engine test of --lazy and by benchmarks/lazy.py."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from torchstack import lazy

SNAPSHOTTER = "soci"  # the proxy plugin's name in the node's containerd


def _config(registry: str) -> str:
    """soci-snapshotter-grpc's settings: the loopback registry over plain HTTP, as the engines reach it."""
    return f'[[resolver.host."{registry}".mirrors]]\nhost = "{registry}"\ninsecure = true\n'


def _mounts_under(folder: Path) -> list[str]:
    with open("/proc/self/mounts") as mounts:
        return [line.split()[1] for line in mounts if line.split()[1].startswith(f"{folder}/")]


class Node:
    def __init__(self, folder: Path, socket: Path, registry: str):
        self.folder = folder
        self.registry = registry
        self.namespace = f"torchstack-{uuid.uuid4().hex[:8]}"
        self.ctr = [lazy.tool("ctr"), "--address", str(socket), "--namespace", self.namespace]
        self.soci_address = ["--address", str(socket), "--namespace", self.namespace]

    def _run(self, command: list[str], timeout: int = 600) -> str:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        assert done.returncode == 0, f"{' '.join(command[:8])}: {done.stderr[-2000:]}"
        return done.stdout

    def pull(self, reference: str) -> None:
        """A plain pull: every layer fetched and unpacked before anything runs."""
        self._run([*self.ctr, "images", "pull", "--plain-http", reference])

    def rpull(self, reference: str, index: str) -> None:
        """A lazy pull: the image's SOCI index fetched, its layers mounted, not fetched."""
        command = [*self.soci_address, "image", "rpull", "--plain-http", "--snapshotter", SNAPSHOTTER, "--soci-index-digest", index]
        self._run(lazy.private_soci(self.folder, *command, reference))

    def run(self, reference: str, command: list[str], lazily: bool) -> str:
        """`command` in a new container of `reference`, with no network; what it printed."""
        snapshotter = ["--snapshotter", SNAPSHOTTER] if lazily else []
        name = f"run-{uuid.uuid4().hex[:8]}"
        return self._run([*self.ctr, "run", "--rm", *snapshotter, reference, name, *command])

    def lazy_layers(self) -> int:
        """How many layers the snapshotter has mounted over FUSE (fetched as they are read)."""
        with open("/proc/self/mounts") as mounts:
            fields = [line.split() for line in mounts]
        return sum(1 for f in fields if f[1].startswith(f"{self.folder}/soci-root/") and f[2].startswith("fuse"))


@contextlib.contextmanager
def lazy_node(folder: Path, registry: str) -> Iterator[Node]:
    """An empty node under `folder` (which the caller removes): SOCI's snapshotter, then a containerd
    with it as its proxy plugin `soci`. Stopped afterwards, its mounts undone."""
    (folder / "soci.toml").write_text(_config(registry))
    snapshotter_socket = folder / "soci.sock"
    log = open(folder / "soci.log", "w")
    snapshotter = subprocess.Popen(
        [
            lazy.tool("soci-snapshotter-grpc"),
            "-address",
            str(snapshotter_socket),
            "-root",
            str(folder / "soci-root"),
            "-config",
            str(folder / "soci.toml"),
            "-log-level",
            "warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "PATH": f"{lazy.TOOLS_DIR}:{os.environ['PATH']}"},
    )
    try:
        for _ in range(300):
            if snapshotter_socket.exists() or snapshotter.poll() is not None:
                break
            time.sleep(0.1)
        assert snapshotter_socket.exists(), f"soci-snapshotter-grpc did not start: {(folder / 'soci.log').read_text()[-2000:]}"
        with lazy.own_containerd(folder, snapshotter_socket) as socket:
            yield Node(folder, socket, registry)
    finally:
        snapshotter.terminate()
        try:
            snapshotter.wait(timeout=30)
        except subprocess.TimeoutExpired:
            snapshotter.kill()
            snapshotter.wait()
        log.close()
        for mount in sorted(_mounts_under(folder), reverse=True):  # what the snapshotter left mounted
            subprocess.run(["umount", "--lazy", mount], check=False)
