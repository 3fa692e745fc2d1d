"""Lazily pulled images: a SOCI index beside a pushed image in its registry, for nodes that start it before its pull ends.

A containerd node with AWS's SOCI snapshotter starts a container from such an image before its pull
ends: it mounts the layers the index covers over the network and fetches the parts of them the
container reads. The image is not changed: its digest, its signature and every other engine's pull
stay as they were. The index is an OCI artifact whose subject is the image, found through the
registry's referrers API or, where a registry lacks that API (Distribution 2.8), the referrers tag
(`sha256-HEX`) that pushers keep instead. It is made here by `soci create` from the image as pushed,
imported into a containerd of the toolkit's own (its own root and sockets under a temporary folder,
stopped and removed afterwards), pushed beside the image, and signed with the release's key. Every
byte to and from the registry goes through the toolkit's registry client (registry.py: the login
as the engines find it, helpers asked): containerd and soci never reach the registry, so no login
goes on a command line, where any user of the host could read it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from torchstack.base.errors import HostNotReady, ToolkitError, UsageProblem
from torchstack.registries import registry

SOCI_INDEX = "application/vnd.amazon.soci.index.v1+json"  # the index's artifactType
TOOLS_DIR = Path("/usr/local/lib/torchstack/soci")  # where setup-host.sh --lazy puts Debian forky's soci and containerd
NEEDED = ("soci", "containerd", "ctr")
# Every layer gets a zTOC: a layer without one is fetched whole before the container starts, and
# SOCI's default floor (10 MiB) would leave the small top layers of our images so.
MIN_LAYER_SIZE = 0
# soci's own store of what it made (an OCI layout), under the folder private_soci mounts on /var/lib.
SOCI_STORE = "soci-snapshotter-grpc/content"


class IndexFailed(ToolkitError):
    """soci or containerd could not index or push the pushed image."""


def tool(name: str) -> str | None:
    """`name` as setup-host.sh installed it for lazy images, else as PATH has it."""
    mine = TOOLS_DIR / name
    return str(mine) if os.access(mine, os.X_OK) else shutil.which(name)


def check(lazy: str | None, push: bool, compression: str) -> None:
    """Before any work: what --lazy needs besides the image (one line, exit 2)."""
    if not lazy:
        return
    if not push:
        raise UsageProblem(f"--lazy {lazy} indexes what --push sends: add --push and --registry")
    if compression != "gzip":
        raise UsageProblem(f"--lazy {lazy} is made and tried with gzip layers only, not {compression}: drop --compression {compression}")
    missing = [name for name in NEEDED if tool(name) is None]
    if missing:
        raise HostNotReady(
            f"missing {', '.join(missing)}, which make --lazy {lazy}'s index: bash scripts/setup-host.sh --lazy installs them"
        )
    if os.geteuid() != 0:
        raise HostNotReady(f"--lazy {lazy} runs a containerd of its own to index the pushed image, which needs root: run the build as root")


def _run(what: str, command: list[str], **options) -> str:
    done = subprocess.run(command, capture_output=True, text=True, stdin=subprocess.DEVNULL, **options)
    if done.returncode != 0:
        said = " ".join((done.stderr.strip() or done.stdout.strip() or "no reason given").split())
        raise IndexFailed(f"{what}: {said[-300:]}")
    return done.stdout


def containerd_config(work: Path, snapshotter: Path | None = None) -> str:
    """containerd 2's configuration for one of the toolkit's own under `work`: root, state and
    sockets there, none of the host's, and no Kubernetes (CRI) service. With `snapshotter` (a
    socket), SOCI's snapshotter is its proxy plugin `soci`."""
    lines = [
        "version = 3",
        f'root = "{work}/root"',
        f'state = "{work}/state"',
        'disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.cri.v1.images", "io.containerd.cri.v1.runtime", '
        '"io.containerd.nri.v1.nri", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]',
        "[grpc]",
        f'  address = "{work}/containerd.sock"',
        "[ttrpc]",
        f'  address = "{work}/containerd.sock.ttrpc"',
        "[debug]",
        f'  address = "{work}/debug.sock"',
        "[plugins.'io.containerd.internal.v1.opt']",
        f'  path = "{work}/opt"',
    ]
    if snapshotter:
        lines += ["[proxy_plugins.soci]", '  type = "snapshot"', f'  address = "{snapshotter}"']
    return "\n".join(lines) + "\n"


@contextlib.contextmanager
def own_containerd(work: Path, snapshotter: Path | None = None, environment: dict[str, str] | None = None) -> Iterator[Path]:
    """A containerd of the toolkit's own under `work` (containerd_config), with `environment` besides
    the toolkit's, its socket while it runs; stopped afterwards (the caller removes `work`). Its runc
    shim is looked for where setup-host.sh put containerd, then on PATH."""
    (work / "config.toml").write_text(containerd_config(work, snapshotter))
    socket = work / "containerd.sock"
    with open(work / "containerd.log", "w") as log:
        server = subprocess.Popen(
            [tool("containerd") or "containerd", "--config", str(work / "config.toml")],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "PATH": f"{TOOLS_DIR}:{os.environ.get('PATH', '/usr/bin:/bin')}", **(environment or {})},
            start_new_session=True,  # Ctrl-C reaches the toolkit, which stops it below
        )
    try:
        for _ in range(300):
            if socket.exists() or server.poll() is not None:
                break
            time.sleep(0.1)
        if not socket.exists():
            said = " ".join((work / "containerd.log").read_text()[-300:].split())
            raise IndexFailed(f"containerd did not start: {said or 'no reason given'}")
        yield socket
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def private_soci(work: Path, *arguments: str) -> list[str]:
    """A `soci` command line that keeps its artifacts under `work`: soci writes to
    /var/lib/soci-snapshotter-grpc, which a mount namespace of its own puts in `work` (nothing of the host's)."""
    (work / "soci").mkdir(exist_ok=True)
    script = 'mount --bind "$1" /var/lib && shift && exec "$@"'
    return [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        script,
        "sh",
        str(work / "soci"),
        tool("soci") or "soci",
        *arguments,
    ]


def _import(where: registry.Registry, pinned: str, work: Path, address: list[str]) -> None:
    """The image `pinned` into the toolkit's containerd, its bytes moved by the toolkit's own registry
    client (the login as the engines find it, the TLS they trust): containerd and soci never reach
    the registry, so no login goes on their command lines. As an OCI layout, streamed into `ctr
    images import` under the name `pinned`; its layers are not unpacked (soci reads them as blobs)."""
    layout = work / "layout"
    top = where.copy_to_layout(registry.parse(pinned), layout)
    named = {**top, "annotations": {"io.containerd.image.name": pinned}}
    (layout / "index.json").write_text(json.dumps({"schemaVersion": 2, "mediaType": registry.OCI_INDEX, "manifests": [named]}))
    ctr = [tool("ctr") or "ctr", *address, "images", "import", "--no-unpack", "--all-platforms", "-"]
    with subprocess.Popen(ctr, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) as importing:
        try:
            with tarfile.open(fileobj=importing.stdin, mode="w|") as archive:
                archive.add(layout, arcname=".")
            importing.stdin.close()
        except BrokenPipeError:
            pass  # ctr stopped reading: its status and its message say why
        said = importing.stderr.read().decode(errors="replace")
    shutil.rmtree(layout)
    if importing.returncode != 0:
        raise IndexFailed(f"importing {pinned} to index it: {' '.join(said.split())[-300:] or 'no reason given'}")


def _push_index(where: registry.Registry, repository: str, store: Path, digest: str) -> None:
    """The SOCI index `digest` and its zTOCs, from soci's own store (an OCI layout), pushed by the
    toolkit's registry client, then listed in the image's referrers tag where the registry has no
    referrers API: what `soci push` does, without a login on its command line."""

    def blob(wanted: str) -> bytes:
        return (store / "blobs" / "sha256" / wanted.removeprefix("sha256:")).read_bytes()

    body = blob(digest)
    manifest = json.loads(body)
    for each in [manifest["config"], *manifest["layers"]]:
        where.put_blob(repository, blob(each["digest"]))
    if where.put_manifest(repository, digest, body, manifest["mediaType"]):
        return  # the registry lists it among the image's referrers itself
    descriptor = {
        "mediaType": manifest["mediaType"],
        "digest": digest,
        "size": len(body),
        "artifactType": manifest.get("artifactType") or manifest["config"]["mediaType"],
        **({"annotations": manifest["annotations"]} if manifest.get("annotations") else {}),
    }
    where.add_referrer(repository, manifest["subject"]["digest"], descriptor)


def publish(pinned: str, note: Callable[[str], None]) -> str:
    """Make and push the SOCI index of `pinned` (REPOSITORY@sha256:..., as pushed); its digest."""
    reference = registry.parse(pinned)
    where = registry.Registry(reference.host)
    with tempfile.TemporaryDirectory(prefix="torchstack-soci-", dir="/var/tmp") as folder:
        work = Path(folder)
        with own_containerd(work) as socket:
            address = ["--address", str(socket), "--namespace", "torchstack"]
            try:
                _import(where, pinned, work, address)
            except registry.RegistryProblem as exc:
                raise IndexFailed(f"fetching {pinned} to index it: {exc}") from None
            _run(
                f"indexing {pinned} (soci create)", private_soci(work, *address, "create", "--min-layer-size", str(MIN_LAYER_SIZE), pinned)
            )
            listed = _run("listing the SOCI index made", private_soci(work, *address, "index", "list", "--ref", pinned, "--quiet"))
            digests = listed.split()
            if len(digests) != 1:
                raise IndexFailed(f"soci create made {len(digests)} indexes of {pinned}, not one")
        try:
            _push_index(where, reference.repository, work / "soci" / SOCI_STORE, digests[0])
        except registry.RegistryProblem as exc:  # a refused login is its own line (exit 2)
            raise IndexFailed(f"pushing the SOCI index of {pinned}: {exc}") from None
    note(f"torchstack: pushed the SOCI index of {pinned} ({digests[0]}): containerd nodes with the SOCI snapshotter start it lazily")
    return digests[0]


def indexes(where: registry.Registry, repository: str, digest: str) -> list[str]:
    """The digests of the SOCI indexes in the registry whose subject is the image `digest`."""
    return [d["digest"] for d in where.referrers(repository, digest) if d.get("artifactType") == SOCI_INDEX]
