"""An empty containerd node with SOCI's snapshotter, as a Kubernetes node that lazily pulls images
runs it: containerd 2 and soci-snapshotter-grpc (setup-host.sh --lazy puts Debian forky's in
/usr/local/lib/torchstack/soci) on sockets and roots of their own under a folder, nothing of the
host's. It pulls an image plainly (`ctr images pull`, unpacked into overlayfs) or lazily (`soci image
rpull` with the image's SOCI index: the layers mounted over FUSE, fetched as they are read), and runs
a command in it. Used by the engine test of --lazy and by benchmarks/lazy.py.

The node reaches the registry as a node reaches a real one: over TLS, at an address that is not
loopback. SOCI 0.4.1's snapshotter resolves the SOCI index over HTTPS whatever its resolver's
`insecure` setting says, and fetches layers over plain HTTP from any loopback address (tried here:
from the plain-HTTP loopback registry the index was not found and every layer fell back to a whole
fetch; from a TLS server on 127.0.0.1 the layer fetches went to plain HTTP and failed). So a second
server of the loopback registry's data answers over TLS on the address of a network bridge of its
own (10.213.80.1: no route leads there from elsewhere), with a certificate for that address that only the node's processes trust
(SSL_CERT_FILE, --tlscacert)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from tests.engine.hosts import DATA_ROOTS, running_registry, stop
from torchstack.publishing import lazy

SNAPSHOTTER = "soci"  # the proxy plugin's name in the node's containerd
VIEW_ADDRESS = "10.213.80.1"  # the TLS view's, on a bridge of its own (one node at a time)


@contextlib.contextmanager
def _tls_view(folder: Path, registry: str) -> Iterator[tuple[str, Path]]:
    """The loopback `registry`'s data served over TLS at VIEW_ADDRESS: its address and the certificate
    to trust. The bridge and the server are removed afterwards."""
    link = f"tsl{os.getpid() % 100000}"
    for step in (["link", "add", link, "type", "bridge"], ["addr", "add", f"{VIEW_ADDRESS}/32", "dev", link], ["link", "set", link, "up"]):
        subprocess.run(["ip", *step], check=True, capture_output=True)
    try:
        cert, key = folder / "registry.crt", folder / "registry.key"
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", f"/CN={VIEW_ADDRESS}"]
            + ["-addext", f"subjectAltName=IP:{VIEW_ADDRESS}", "-keyout", str(key), "-out", str(cert)],
            check=True,
            capture_output=True,
        )
        (folder / "view").mkdir()
        with running_registry(folder / "view", auth=False, tls=(VIEW_ADDRESS, cert, key, DATA_ROOTS[registry])) as view:
            yield view, cert
    finally:
        subprocess.run(["ip", "link", "delete", link], capture_output=True)


def _mounts_under(folder: Path) -> list[str]:
    with open("/proc/self/mounts") as mounts:
        return [line.split()[1] for line in mounts if line.split()[1].startswith(f"{folder}/")]


class Node:
    def __init__(self, folder: Path, socket: Path, registry: str, view: str, cert: Path):
        self.folder = folder
        self.registry, self.view = registry, view
        self.namespace = f"torchstack-{uuid.uuid4().hex[:8]}"
        self.ctr = [lazy.tool("ctr"), "--address", str(socket), "--namespace", self.namespace]
        self.soci_address = ["--address", str(socket), "--namespace", self.namespace]
        self.trust = ["--tlscacert", str(cert)]

    def there(self, reference: str) -> str:
        """`reference` (in the loopback registry) as the node names it: in the registry's TLS view."""
        return reference.replace(self.registry, self.view, 1)

    def _run(self, command: list[str], timeout: int = 600) -> str:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        assert done.returncode == 0, f"{' '.join(command[:8])}: {done.stderr[-2000:]}"
        return done.stdout

    def pull(self, reference: str) -> None:
        """A plain pull: every layer fetched and unpacked before anything runs."""
        self._run([*self.ctr, "images", "pull", self.there(reference)])

    def rpull(self, reference: str, index: str) -> None:
        """A lazy pull: the image's SOCI index fetched, its layers mounted, not fetched."""
        command = [*self.soci_address, "image", "rpull", *self.trust, "--snapshotter", SNAPSHOTTER, "--soci-index-digest", index]
        self._run(lazy.private_soci(self.folder, *command, self.there(reference)))

    def run(self, reference: str, command: list[str], lazily: bool) -> str:
        """`command` in a new container of `reference`, with no network; what it printed."""
        snapshotter = ["--snapshotter", SNAPSHOTTER] if lazily else []
        name = f"run-{uuid.uuid4().hex[:8]}"
        runc_root = ["--runc-root", str(self.folder / "runc")]  # not under /run/containerd
        return self._run([*self.ctr, "run", "--rm", *runc_root, *snapshotter, self.there(reference), name, *command])

    def lazy_layers(self) -> int:
        """How many layers the snapshotter has mounted over FUSE (fetched as they are read)."""
        with open("/proc/self/mounts") as mounts:
            fields = [line.split() for line in mounts]
        return sum(1 for f in fields if f[1].startswith(f"{self.folder}/soci-root/") and f[2].startswith("fuse"))


@contextlib.contextmanager
def _snapshotter(folder: Path, cert: Path) -> Iterator[Path]:
    """soci-snapshotter-grpc with its defaults, its root under `folder`, trusting `cert`: its socket.
    Stopped afterwards, what it left mounted undone."""
    socket = folder / "soci.sock"
    (folder / "soci.toml").write_text("")
    command = [lazy.tool("soci-snapshotter-grpc"), "-address", str(socket), "-root", str(folder / "soci-root")]
    command += ["-config", str(folder / "soci.toml"), "-log-level", "info"]
    environment = {**os.environ, "PATH": f"{lazy.TOOLS_DIR}:{os.environ['PATH']}", "SSL_CERT_FILE": str(cert)}
    with open(folder / "soci.log", "w") as log:
        snapshotter = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=environment)
    try:
        for _ in range(300):
            if socket.exists() or snapshotter.poll() is not None:
                break
            time.sleep(0.1)
        assert socket.exists(), f"soci-snapshotter-grpc did not start: {(folder / 'soci.log').read_text()[-2000:]}"
        yield socket
    finally:
        stop(snapshotter)
        for mount in sorted(_mounts_under(folder), reverse=True):
            subprocess.run(["umount", "--lazy", mount], check=False)


@contextlib.contextmanager
def lazy_node(folder: Path, registry: str) -> Iterator[Node]:
    """An empty node under `folder` (which the caller removes) that pulls from `registry` (one
    hosts.running_registry started) through its TLS view: SOCI's snapshotter, then a containerd with
    it as its proxy plugin `soci`. Stopped afterwards, its mounts undone."""
    with (
        _tls_view(folder, registry) as (view, cert),
        _snapshotter(folder, cert) as snapshotter,
        lazy.own_containerd(folder, snapshotter, {"SSL_CERT_FILE": str(cert)}) as socket,
    ):
        yield Node(folder, socket, registry, view, cert)
