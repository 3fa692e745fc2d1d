"""The session's own servers and engines besides the host's: a loopback registry, cosign keys, an
empty second Docker engine and an empty Podman engine. Each is made once, by whoever asks first,
and undone when the session ends."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from tests import session
from torchstack.catalog.model import ROOT


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# Where each registry running_registry started keeps its data, by address: another server of the same
# data (lazy_node's, over TLS) serves the same images.
DATA_ROOTS: dict[str, Path] = {}


@contextlib.contextmanager
def running_registry(folder: Path, auth: bool, tls: tuple[str, Path, Path, Path] | None = None) -> Iterator[str]:
    """The address of a registry on 127.0.0.1 (an address the engine may use over plain HTTP), storing in
    `folder`. With `auth`, it needs a login: one of `folder`/htpasswd (bcrypt, as `htpasswd -B` writes it;
    the registry reads it again when it changes), which none has where the caller wrote none. With `tls`
    (its address, certificate, key, and another registry's data folder to serve), over HTTPS there."""
    binary = shutil.which("docker-registry")
    if not binary:
        pytest.fail("docker-registry is missing: run scripts/setup-host.sh")
    port = free_port()
    host, data = (tls[0], tls[3]) if tls else ("127.0.0.1", folder / "data")
    config = {
        "version": 0.1,
        "log": {"level": "error"},
        "storage": {"filesystem": {"rootdirectory": str(data)}},
        "http": {"addr": f"{host}:{port}", **({"tls": {"certificate": str(tls[1]), "key": str(tls[2])}} if tls else {})},
    }
    if auth:
        if not (folder / "htpasswd").exists():
            (folder / "htpasswd").write_text("")
        config["auth"] = {"htpasswd": {"realm": "torchstack-test", "path": str(folder / "htpasswd")}}
    (folder / "config.yml").write_text(json.dumps(config))  # JSON is YAML
    server = subprocess.Popen(
        [binary, "serve", str(folder / "config.yml")], stdout=subprocess.DEVNULL, stderr=open(folder / "registry.log", "w")
    )
    address = f"{host}:{port}"
    session.mark(address)  # names under it are the session's
    DATA_ROOTS[address] = data
    for _ in range(100):
        try:
            urllib.request.urlopen(f"{'https' if tls else 'http'}://{address}/v2/", timeout=1, context=_unverified())
            break
        except urllib.error.HTTPError:
            break  # 401: up, and asking for a login
        except OSError:
            time.sleep(0.1)
    else:
        server.kill()
        pytest.fail(f"docker-registry did not start: {(folder / 'registry.log').read_text()[-2000:]}")
    try:
        yield address
    finally:
        server.terminate()
        server.wait(timeout=30)


def _unverified():
    """A TLS context that checks no certificate: whether a registry answers, not whom it is."""
    import ssl

    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


class Resource:
    """A session resource made once, by whichever asks first (a test's fixture, or the thread that
    starts background work), kept with what undoes it until the session ends."""

    def __init__(self, make):
        self.make = make  # (ExitStack) -> value: what undoes it goes on the stack
        self.stack = contextlib.ExitStack()
        self.value = None
        self.closed = False
        self.lock = threading.Lock()

    def get(self):
        with self.lock:
            # Never after the session's end closed it: a background thread that asks late (the
            # session cut short by Ctrl-C or -x) would start what nothing undoes.
            if self.closed:
                raise RuntimeError("the session is ending: its resources are closed")
            if self.value is None:
                self.value = self.make(self.stack)
            return self.value

    def close(self) -> None:
        with self.lock:
            self.closed = True
            self.stack.close()


def _temporary_folder(stack: contextlib.ExitStack, name: str) -> Path:
    return Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=f"torchstack-{name}-")))


def _registry(stack: contextlib.ExitStack) -> str:
    return stack.enter_context(running_registry(_temporary_folder(stack, "registry"), auth=False))


def _cosign_keys(stack: contextlib.ExitStack) -> dict:
    if not shutil.which("cosign"):
        pytest.fail("cosign is missing: run scripts/setup-host.sh")
    folder = _temporary_folder(stack, "cosign")
    env = {"COSIGN_PASSWORD": uuid.uuid4().hex}
    keys = {}
    for name in ("ours", "other"):
        made = subprocess.run(
            ["cosign", "generate-key-pair", "--output-key-prefix", str(folder / name)],
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert made.returncode == 0, made.stderr
        keys[name] = (folder / f"{name}.key", folder / f"{name}.pub")
    return {**keys, "env": env}


REGISTRY = Resource(_registry)


COSIGN_KEYS = Resource(_cosign_keys)


def wait_for_engine(process: subprocess.Popen, url: str, log: Path, name: str) -> None:
    """Until the engine `process` started answers on `url` (a minute at most); else fail with its log."""
    for _ in range(120):
        if process.poll() is not None:
            pytest.fail(f"{name} stopped at once:\n{log.read_text()[-3000:]}")
        with contextlib.suppress(docker.errors.DockerException):
            docker.DockerClient(base_url=url).ping()
            return
        time.sleep(0.5)
    pytest.fail(f"{name} did not answer:\n{log.read_text()[-3000:]}")


def stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


# Where scripts/setup-host.sh --tests puts the current Docker engine, as Docker 29 runs on a new install
# (images in containerd's image store, API floor 1.44): Debian forky's dockerd, docker CLI and containerd.
CURRENT_DOCKER = Path("/usr/local/lib/torchstack/docker-containerd")


def current_dockerd() -> str:
    """The dockerd of the current engines (second_engine with a `store`), whatever the host's is."""
    if not all((CURRENT_DOCKER / name).is_file() for name in ("dockerd", "docker", "containerd", "containerd-shim-runc-v2")):
        pytest.fail(f"the current Docker engine is missing ({CURRENT_DOCKER}): run scripts/setup-host.sh --tests")
    return str(CURRENT_DOCKER / "dockerd")


def current_client_env(host: str) -> dict[str, str]:
    """What a client of the current engine (its DOCKER_HOST `host`) needs in its environment: forky's docker
    CLI first on PATH, for `docker exec` (testinfra), save, load and buildx (its plugin from the host's
    plugin folder): the host's may be Debian 12's 20.10, whose API 1.41 the engine refuses."""
    return {"DOCKER_HOST": host, "PATH": f"{CURRENT_DOCKER}:{os.environ['PATH']}"}


# Docker's two image stores, by the name an engine's summary gives each: whether the store is containerd's
# (daemon.json's `containerd-snapshotter` feature).
STORES = {"overlay2": False, "containerd": True}


@contextlib.contextmanager
def second_engine(dockerd: str | None = None, name: str = "tsb", subnet: str = "10.213.77.1/24", store: str | None = None) -> Iterator[str]:
    """Another Docker engine on this machine (the host's dockerd, or `dockerd`), empty, as a new CI
    runner's: its own data root, exec root (and so its own containerd), pid file and socket, and a
    bridge of its own (`name`, `subnet`: one per engine) with no iptables rules (builds use the host's
    network, checks run with none). Not `--bridge=none`: an engine started so deletes the host's
    docker0, the first engine's bridge. With `store` (STORES), as Docker 29 runs, on a new install
    (containerd) or upgraded from an older release (overlay2): that image store, set in a daemon
    config file rather than left to the release's default, API floor 1.44, and the containerd in
    dockerd's own folder (forky's 2.1, not the host's 1.6: dockerd starts it as its child, from
    PATH). Yields its DOCKER_HOST; stopped, its bridge and its data removed afterwards. The folder
    is short: containerd's sockets live under the exec root."""
    dockerd, ip = dockerd or shutil.which("dockerd"), shutil.which("ip")
    if not dockerd or not ip:
        pytest.fail(f"{'dockerd' if not dockerd else 'ip (iproute2)'} is missing: run scripts/setup-host.sh")
    folder = Path(tempfile.mkdtemp(prefix=f"{name}-"))
    socket_path = folder / "docker.sock"
    bridge = f"{name}{os.getpid() % 100000}"
    for step in (["link", "add", bridge, "type", "bridge"], ["addr", "add", subnet, "dev", bridge]):
        subprocess.run([ip, *step], check=True, capture_output=True)
    command = [
        dockerd,
        f"--data-root={folder / 'data'}",
        f"--exec-root={folder / 'exec'}",
        f"--pidfile={folder / 'pid'}",
        f"--host=unix://{socket_path}",
        f"--bridge={bridge}",
        "--iptables=false",
        "--ip-masq=false",
        f"--cgroup-parent=/torchstack-{name}-engine",
    ]
    env = dict(os.environ)
    if store:
        (folder / "daemon.json").write_text(json.dumps({"features": {"containerd-snapshotter": STORES[store]}}))
        command.append(f"--config-file={folder / 'daemon.json'}")
        env.update(DOCKER_MIN_API_VERSION="1.44", PATH=f"{Path(dockerd).parent}:{env['PATH']}")
    log = open(folder / "dockerd.log", "w")
    daemon = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    host = f"unix://{socket_path}"
    try:
        wait_for_engine(daemon, host, folder / "dockerd.log", "the second engine")
        yield host
    finally:
        stop(daemon)
        log.close()
        subprocess.run([ip, "link", "delete", bridge], capture_output=True)
        # What the engine left mounted in its folder (its default network namespace under exec/netns,
        # overlay mounts under data), deepest first: a mounted folder cannot be removed.
        mounted = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
        for point in sorted((m for m in mounted if m.startswith(f"{folder}/")), reverse=True):
            subprocess.run(["umount", "-l", point], capture_output=True)
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def podman_engine(registry: str) -> Iterator[dict]:
    """An empty Podman engine, as a new Podman-only host's: its API service on a socket of its own,
    its storage in a folder of its own (the host's own Podman images stay untouched), the loopback
    registry reachable over plain HTTP (a registries.conf of its own). The host's containers.conf,
    as scripts/setup-host.sh wrote it, applies. Yields the environment that points `build.py
    --engine podman` at it: the SDK through CONTAINER_HOST, and the podman CLI (testinfra's, the
    test's) as a client of the same socket; stopped and its storage removed afterwards."""
    podman = shutil.which("podman")
    if not podman:
        pytest.fail("podman is missing: run scripts/setup-host.sh")
    folder = Path(tempfile.mkdtemp(prefix="tsp-"))  # in the session's root: on disk, not a tmpfs
    (folder / "storage.conf").write_text(f'[storage]\ndriver = "overlay"\ngraphroot = "{folder}/root"\nrunroot = "{folder}/run"\n')
    (folder / "registries.conf").write_text(f'[[registry]]\nlocation = "{registry}"\ninsecure = true\n')
    env = {
        "CONTAINERS_STORAGE_CONF": str(folder / "storage.conf"),
        "CONTAINERS_REGISTRIES_CONF": str(folder / "registries.conf"),
        "CONTAINER_HOST": f"unix://{folder}/podman.sock",
    }
    log = open(folder / "podman.log", "w")
    # Not given CONTAINER_HOST itself: with it, podman is a client of that socket (its --remote).
    own = {k: v for k, v in os.environ.items() if k not in ("CONTAINER_HOST", "DOCKER_HOST")}
    # Its TMPDIR is the folder's: Podman 4.3's API leaves a digest.txt file there for every push.
    (folder / "tmp").mkdir()
    service = subprocess.Popen(
        [podman, "system", "service", "--time=0", env["CONTAINER_HOST"]],
        env={**own, **{k: v for k, v in env.items() if k != "CONTAINER_HOST"}, "TMPDIR": str(folder / "tmp")},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_for_engine(service, env["CONTAINER_HOST"], folder / "podman.log", "Podman's service")
        yield env
    finally:
        # Its containers first (a test cut short leaves some running): their conmon and processes
        # would outlive the service and hold the storage's mounts.
        with contextlib.suppress(docker.errors.DockerException):
            for container in docker.DockerClient(base_url=env["CONTAINER_HOST"]).containers.list(all=True):
                with contextlib.suppress(docker.errors.DockerException):
                    container.remove(force=True)
        stop(service)
        log.close()
        # conmon starts a `podman container cleanup` for each container that ends, which may come
        # after the service: it opens the storage again. An exec session's conmon (the checks run
        # theirs in exec sessions) first sleeps out Podman's exit_command_delay, 300 s by default:
        # those are ended at once (measured 2026-11-26: they held the session's end 30 s).
        subprocess.run(["pkill", "-KILL", "-f", "--", f"--exec-process-spec {folder}/"], capture_output=True)
        for _ in range(60):
            if subprocess.run(["pgrep", "-f", str(folder)], capture_output=True).returncode != 0:
                break
            time.sleep(0.5)
        else:
            subprocess.run(["pkill", "-KILL", "-f", str(folder)], capture_output=True)
        # Podman's storage bind-mounts its overlay folder and leaves it mounted when the service stops.
        mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
        for mount in sorted((m for m in mounts if m.startswith(f"{folder}/")), reverse=True):
            subprocess.run(["umount", "--lazy", mount], capture_output=True)
        shutil.rmtree(folder, ignore_errors=True)


# Podman 5 (Debian trixie's 5.4), whose binaries need glibc 2.38: on a bookworm host it runs as a service
# in a container of the host's Docker engine. What it needs there (found 2026-11-28 on this machine):
# - not --privileged: the host lacks CAP_SYS_RESOURCE, and runc refuses a container that asks for every
#   capability ("unable to apply caps: operation not permitted"); every capability but that one instead;
# - seccomp unconfined (else runc inside fails "unable to join session keyring: ... operation not permitted");
# - a cgroup namespace of its own, its cgroup mounts made writable (Docker mounts them read-only unless
#   privileged; buildah then fails "mkdir /sys/fs/cgroup/cpuset/buildah-...: read-only file system"):
#   what it makes there stays under the Docker container's cgroup and goes with it;
# - storage on a host folder (overlay on the container's own overlay root fails), TMPDIR in it;
# - runc (crun cannot run containers on hybrid cgroups), cgroupfs (no systemd in the container), the
#   host's hard limits (set-up's configure_podman), events and containers' output in files (no journald
#   in the container: with Debian's default, journald, a container's output was often lost, and the
#   SDK's `containers.run` returned nothing); containers on the host's network
#   by default: the default bridge wants netavark's firewall (nft) and would change the host's network.
PODMAN5_CONF = """\
# torchstack's tests: Podman 5 in a container of the host's Docker engine (tests/engine/hosts.py)
[containers]
netns = "host"
log_driver = "k8s-file"
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
"""
PODMAN5_DOCKERFILE = """\
FROM {os_image}
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \\
    podman runc ca-certificates > /dev/null && rm -rf /var/lib/apt/lists/*
COPY containers.conf /etc/containers/containers.conf.d/50-torchstack-test.conf
ENV PODMAN_IGNORE_CGROUPSV1_WARNING=1
"""
# Its cgroup mounts made writable, then the service on the bound socket folder.
PODMAN5_START = (
    "mount -o remount,bind,rw /sys/fs/cgroup && for d in /sys/fs/cgroup/*/; do mount -o remount,bind,rw $d || exit 1; done"
    " && mkdir -p $TMPDIR && exec podman system service --time=0 unix:///run/podman/podman.sock"
)


def _podman5_image(stack: contextlib.ExitStack) -> str:
    """trixie's Podman 5 as an image of the host's Docker engine, on the toolkit's own trixie OS image
    (bootstrapped if it is not there): built once a session, named after what goes into it, removed
    at the session's end."""
    made = subprocess.run(
        [sys.executable, str(ROOT / "build.py"), "bootstrap", "--engine", "docker", "--distribution", "trixie"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if made.returncode != 0:
        pytest.fail(f"bootstrapping trixie failed: {made.stderr[-2000:]}")
    os_image = made.stdout.strip().splitlines()[-1]
    client = docker.from_env()
    dockerfile = PODMAN5_DOCKERFILE.format(os_image=os_image)
    content = dockerfile + PODMAN5_CONF + client.images.get(os_image).id
    tag = f"torchstack-test-podman5:trixie-{hashlib.sha256(content.encode()).hexdigest()[:12]}"
    with tempfile.TemporaryDirectory(prefix="tsp5-image-") as context:
        (Path(context) / "Dockerfile").write_text(dockerfile)
        (Path(context) / "containers.conf").write_text(PODMAN5_CONF)
        client.images.build(path=context, tag=tag, rm=True, network_mode="host")
    stack.callback(lambda: client.images.remove(tag))
    return tag


@contextlib.contextmanager
def podman5_engine(registry: str, image: str) -> Iterator[dict]:
    """An empty Podman 5 engine (trixie's), as podman_engine's: its API service in a container of the
    host's Docker engine (podman5_image), on the host's network, its socket and storage in a host folder
    of its own, the host's hard limits for its containers, the loopback registry reachable over plain
    HTTP (a registries.conf bound in). Yields the environment that points `build.py --engine podman` at
    it: the SDK through CONTAINER_HOST, and the host's podman CLI (4.3: a remote client of the 5.4
    service, for exec, run, ps, images, pull, manifest; not push, whose answer it cannot read) through
    the same. `image` is PODMAN5_IMAGE's. Afterwards its container is removed (its processes, mounts
    and cgroups with it) and its folder."""
    client = docker.from_env()
    folder = Path(tempfile.mkdtemp(prefix="tsp5-"))  # in the session's root: on disk, not a tmpfs
    for sub in ("storage", "run"):
        (folder / sub).mkdir()
    nofile, nproc = resource.getrlimit(resource.RLIMIT_NOFILE)[1], resource.getrlimit(resource.RLIMIT_NPROC)[1]
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    nofile = 1048576 if nofile == resource.RLIM_INFINITY else min(nofile, 1048576)
    nproc = pid_max if nproc == resource.RLIM_INFINITY else min(nproc, pid_max)
    (folder / "limits.conf").write_text(f'[containers]\ndefault_ulimits = ["nofile={nofile}:{nofile}", "nproc={nproc}:{nproc}"]\n')
    (folder / "registries.conf").write_text(f'[[registry]]\nlocation = "{registry}"\ninsecure = true\n')
    env = {"CONTAINER_HOST": f"unix://{folder}/run/podman.sock", "CONTAINERS_REGISTRIES_CONF": str(folder / "registries.conf")}
    container = client.containers.run(
        image,
        ["bash", "-c", PODMAN5_START],
        name=f"torchstack-test-podman5-{session.ID}-{uuid.uuid4().hex[:6]}",
        detach=True,
        init=True,  # conmon's orphans are reaped
        network_mode="host",
        cgroupns="private",
        cap_add=["ALL"],
        cap_drop=["SYS_RESOURCE"],
        security_opt=["seccomp=unconfined"],
        environment={"TMPDIR": "/var/lib/containers/tmp"},
        volumes={
            str(folder / "storage"): {"bind": "/var/lib/containers", "mode": "rw"},
            str(folder / "run"): {"bind": "/run/podman", "mode": "rw"},
            str(folder / "limits.conf"): {"bind": "/etc/containers/containers.conf.d/60-limits.conf", "mode": "ro"},
            str(folder / "registries.conf"): {"bind": "/etc/containers/registries.conf.d/60-test-registry.conf", "mode": "ro"},
        },
        labels=session.labels(),
    )
    try:
        for _ in range(120):
            container.reload()
            if container.status != "running":
                pytest.fail(f"Podman 5's container stopped at once:\n{container.logs().decode(errors='replace')[-3000:]}")
            with contextlib.suppress(docker.errors.DockerException):
                docker.DockerClient(base_url=env["CONTAINER_HOST"]).ping()
                break
            time.sleep(0.5)
        else:
            pytest.fail(f"Podman 5's service did not answer:\n{container.logs().decode(errors='replace')[-3000:]}")
        yield env
    finally:
        # Its containers first, through its API (a test cut short leaves some running); what remains
        # (conmon, cleanup processes, mounts) lives in the container's namespaces and ends with it.
        with contextlib.suppress(docker.errors.DockerException):
            for inner in docker.DockerClient(base_url=env["CONTAINER_HOST"], timeout=60).containers.list(all=True):
                with contextlib.suppress(docker.errors.DockerException):
                    inner.remove(force=True)
        with contextlib.suppress(docker.errors.NotFound):
            container.stop(timeout=30)
        with contextlib.suppress(docker.errors.NotFound):
            container.remove(force=True)
        # Bind mounts are private: nothing should be mounted under the folder on the host; if so, unmounted.
        mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
        for mount in sorted((m for m in mounts if m.startswith(f"{folder}/")), reverse=True):
            subprocess.run(["umount", "--lazy", mount], capture_output=True)
        shutil.rmtree(folder, ignore_errors=True)


# An empty second engine, as a new CI runner's (second_engine), made by whoever asks first: the
# background build below, or test_reuse.
SECOND_ENGINE = Resource(lambda stack: stack.enter_context(second_engine()))


# Empty Docker engines of a current release (forky's 28.5.2, BuildKit its default builder), by image store
# (STORES): as Docker 29 runs on a new install (containerd), and as Docker 23 to 28 and Docker 29
# upgraded from an older release run (overlay2). Each made by whoever asks first: the README's build
# on it (images.py: REPRODUCED). Their clients run with current_client_env.
CURRENT_ENGINES = {
    "containerd": Resource(lambda stack: stack.enter_context(second_engine(current_dockerd(), "tsc", "10.213.78.1/24", "containerd"))),
    "overlay2": Resource(lambda stack: stack.enter_context(second_engine(current_dockerd(), "tso", "10.213.82.1/24", "overlay2"))),
}
# Another of each, for the README's build made again elsewhere (images.py: REPRODUCED).
REBUILD_ENGINES = {
    "containerd": Resource(lambda stack: stack.enter_context(second_engine(current_dockerd(), "tsr", "10.213.79.1/24", "containerd"))),
    "overlay2": Resource(lambda stack: stack.enter_context(second_engine(current_dockerd(), "tsq", "10.213.83.1/24", "overlay2"))),
}


# trixie's Podman 5 as an image of the host's engine (podman5_engine runs it), built by whoever asks first.
PODMAN5_IMAGE = Resource(_podman5_image)


# The session's Podman engine, an empty Podman 5 (podman5_engine: Debian 13's, RHEL 10's and Ubuntu
# 26.04's major release), with the session's registry; made by whoever asks first. Podman 4.3 (the
# host's, Debian 12's: podman_engine) builds in the reproducibility test and pulls the zstd test's image.
PODMAN = Resource(lambda stack: stack.enter_context(podman5_engine(REGISTRY.get(), PODMAN5_IMAGE.get())))
