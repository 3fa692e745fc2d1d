"""Engine tests build real images on the local Docker engine (scripts/setup-host.sh starts one)."""

from __future__ import annotations

import contextlib
import difflib
import importlib.util
import io
import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
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

from tests.conftest import build_plugin_wheels
from torchstack import engine, sharing
from torchstack.model import ROOT, load_catalog
from torchstack.sources import cache_dir, state_dir

CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")


def _named_wheelhouse() -> str | None:
    """The folder the environment names that holds a CPU-only x86_64 torch wheel, if it does."""
    folder = os.environ.get("TORCHSTACK_TEST_WHEELHOUSE") or os.environ.get("PIP_FIND_LINKS")
    return folder if folder and list(Path(folder).glob("torch-*x86_64.whl")) else None


def x86_wheelhouse() -> str:
    """The folder holding a CPU-only x86_64 torch wheel (PyPI's x86_64 wheels are CUDA builds)."""
    return _named_wheelhouse() or pytest.fail("no CPU x86_64 torch wheel: set TORCHSTACK_TEST_WHEELHOUSE to a folder holding one")


# The x86_64 chain the README's first command builds: torch's CPU wheel (a local wheelhouse pip is
# configured with, else PyTorch's CPU index), OpenBLAS from Debian, numpy compiled from its source
# distribution against that OpenBLAS.
README_ARGS = ["--torch-from", "wheel", "--openblas-from", "distro"]
X86_ARGS = [*README_ARGS, "--ca-bundle", str(CA_BUNDLE)]
# The x86_64 chain's Debian release: the tests' x86_64 torch wheel is a cp311 one, so the README's
# command takes bookworm. Builds that compile torch's way (no wheel names a Python) would take trixie,
# the default: the tests that build only early stages name this one, to share the chain's OS image.
X86_DISTRIBUTION = ["--distribution", "bookworm"]


# BuildKit's tools chain (numpy compiled with the compiler cache mount): the session's BuildKit
# chain builds it first (BUILDKIT_FIRST, under a tag of its own), the reuse test pushes it for an
# empty engine, and so takes it from the engine's cache.
BUILDKIT_TOOLS = [
    "--build-type",
    "tools",
    *X86_DISTRIBUTION,
    "--openblas-from",
    "distro",
    "--builder",
    "buildx",
    "--ca-bundle",
    str(CA_BUNDLE),
    "--tag",
    "buildkit-tools",
]

# The arm64 image the emulated tests build: PyPI's aarch64 torch wheels are CPU builds carrying
# oneDNN with ACL up to torch 2.8; from 2.9 on they are CUDA builds, which the toolkit refuses for
# a CPU image. The 2.8.0 wheel reports itself as 2.8.0+cpu: the labels carry that, the tag 2.8.0.
# With torchvision 0.23.0, PyPI's aarch64 wheel paired with it (a CPU build, like that torch).
ARM64_ARGS = [
    "--backend",
    "onednn-acl",
    "--torch-from",
    "wheel",
    "--torch-wheel",
    "https://pypi.org/simple/",
    "--torch-version",
    "2.8.0",
    "--openblas-from",
    "distro",
    "--numpy-from",
    "wheel",
    "--with",
    "torchvision",
    "--ca-bundle",
    str(CA_BUNDLE),
]


def pypi_wheel(dest: Path, requirement: str) -> Path:
    """PyPI's wheel of `requirement` (NAME==VERSION) for the x86_64 images' Python (3.11), downloaded into `dest`."""
    download = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--quiet",
        "--no-deps",
        "--only-binary=:all:",
        "--platform",
        "manylinux_2_28_x86_64",
        "--python-version",
        "3.11",
        "--dest",
        str(dest),
        requirement,
    ]
    subprocess.run(download, check=True, timeout=600)
    return next(dest.glob(f"{requirement.partition('==')[0]}-*.whl"))


def numpy_wheel(dest: Path) -> Path:
    """PyPI's numpy 2.3.5 wheel (it carries scipy-openblas, not our BLAS)."""
    return pypi_wheel(dest, "numpy==2.3.5")


def run_build_py(*args: str, cwd: Path = ROOT, timeout: int = 3000, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(cwd / "build.py"), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def files_holding(image, needle: bytes) -> list[str]:
    """The files, in every layer of `image` as `docker save` exports it, whose bytes hold `needle`."""
    found = []
    with tarfile.open(fileobj=io.BytesIO(b"".join(image.save()))) as saved:
        layers = [m for m in saved.getmembers() if m.name.endswith("layer.tar")]
        assert layers, "docker save exported no layers"
        for member in layers:
            with tarfile.open(fileobj=saved.extractfile(member)) as layer:
                for entry in layer.getmembers():
                    if entry.isfile() and needle in layer.extractfile(entry).read():
                        found.append(f"{member.name}:{entry.name}")
    return found


def bridge_address(network_attrs: dict) -> str:
    """This host's address on an engine network, where build steps and containers reach it. An
    engine reports a Gateway only for a network it was told one for; a newly started engine
    reports its default bridge as {"Subnet": "172.17.0.0/16"} alone, and then the gateway is, as
    the engine assigns it, the subnet's first address."""
    config = network_attrs["IPAM"]["Config"][0]
    return config.get("Gateway") or str(next(ipaddress.ip_network(config["Subnet"]).hosts()))


def leftovers_of(client, owner: str) -> list[str]:
    """What the run `owner` (sharing.identity) left: its containers, its build contexts."""
    containers = [c.name for c in client.containers.list(all=True, filters={"label": f"{sharing.LABEL}={owner}"})]
    contexts = [str(p) for p in (state_dir() / "contexts").glob(owner.replace("/", "+") + "+*")]
    return containers + contexts


def untag(client, fragment: str) -> None:
    """Remove every image name holding `fragment` (an image other names share only loses the name)."""
    for image in client.images.list():
        for name in image.tags:
            if fragment in name:
                with contextlib.suppress(docker.errors.NotFound):
                    client.images.remove(name)


@pytest.fixture(scope="session")
def client():
    try:
        found = docker.from_env()
        found.ping()
    except docker.errors.DockerException as exc:
        pytest.fail(f"engine tests need a running Docker engine (run scripts/setup-host.sh): {exc}")
    return found


class Background:
    """A build.py run of the session started before the tests that read it: its JSON summary and
    its output wait in a folder of its own (removed when the session ends). `prepare`, if given,
    makes what the run needs in that folder and returns the arguments naming it; `nice` runs it at
    the lowest CPU priority, on what the tests beside it leave idle; `summary=False` for a command
    that writes no summary (`bootstrap`); `recheck=False` leaves out the image checks on an image ID
    that passed them. `prepare` may also set `env` (the run's environment) and `root` (the checkout
    it runs from: a changed copy)."""

    def __init__(self, name: str, args: list[str], prepare=None, nice: bool = False, summary: bool = True, recheck: bool = True):
        self.name, self.args, self.prepare, self.nice, self.summary, self.recheck = name, args, prepare, nice, summary, recheck
        self.env: dict[str, str] = {}
        self.root = ROOT
        self.extra: list[str] = []
        self.process: subprocess.Popen | None = None
        self.stopped = False
        self.lock = threading.Lock()

    def start(self) -> None:
        with self.lock:
            # Once stopped, never: the thread that starts the later builds when the x86_64 chain
            # ends wakes when the session's end stops the x86_64 chain early (Ctrl-C, -x).
            if self.process is not None or self.stopped:
                return
            self.folder = Path(tempfile.mkdtemp(prefix=f"torchstack-{self.name}-"))
            try:
                self.extra = self.prepare(self.folder) if self.prepare else []
            except BaseException:
                shutil.rmtree(self.folder, ignore_errors=True)
                raise
            self.output = open(self.folder / "output.log", "w+")
            reported = [*(["--json", str(self.folder / "summary.json")] if self.summary else []), *(["--recheck"] if self.recheck else [])]
            command = [
                *(["nice", "-n", "19"] if self.nice else []),
                sys.executable,
                str(self.root / "build.py"),
                *self.args,
                *self.extra,
                *reported,
            ]
            self.process = subprocess.Popen(
                command, cwd=self.root, stdout=self.output, stderr=subprocess.STDOUT, env={**os.environ, **self.env}
            )

    def wait(self, until: str = "") -> bool:
        """Until it ended, or (`until`) until its output shows that text; whether it got there
        without failing (True for a build never started)."""
        if self.process is None:
            return True
        while until and self.process.poll() is None:
            with contextlib.suppress(OSError):  # removed by stop() meanwhile: the session is ending
                if until in (self.folder / "output.log").read_text(errors="replace"):
                    return True
            time.sleep(2)
        return self.process.wait() == 0

    def result(self) -> dict:
        """Its summary, with its output as `output`, once it ended (started now if it was not)."""
        self.start()
        returncode = self.process.wait(timeout=3600)
        self.output.seek(0)
        output = self.output.read()
        assert returncode == 0, f"the {self.name} build failed:\n{output[-6000:]}"
        summary = json.loads((self.folder / "summary.json").read_text()) if self.summary else {}
        return {**summary, "output": output}

    def stop(self) -> None:
        """Cancelled as CI cancels a job if still running (SIGTERM: it removes what it started)."""
        with self.lock:
            self.stopped = True
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.output.close()
        shutil.rmtree(self.folder, ignore_errors=True)


# The builds every engine run needs, in the background from the moment collection ends, in an
# order measured in cold runs sampled every 10 s (2026-11-25 and 26). The run is bound by its CPU
# work (3,400 to 3,900 busy core-seconds on 2 cores, as fast as the host runs that hour): an order
# only helps where it fills idle cores.
# - The x86_64 chain first, beside the unit tests (they use about one core).
# - Beside it, at the lowest CPU priority, the arm64 OS image (mmdebstrap, its maintainer scripts
#   under qemu: about 110 core-seconds): on the cores that the x86_64 chain's downloads, unpacking
#   and checks, and the unit tests, leave idle; it all but stops while numpy compiles.
# - The arm64 chain under qemu once the OS image and the x86_64 chain's compile ended (its dev
#   stage began: X86_COMPILED): beside that chain's dev and final stages (pip, apt, layer commits:
#   55% of the cores for 90 s in 8aa0f5f's cold run) and checks, then the benchmark and tests that
#   wait on the engine, registries and pip more than they compute.
#   Elsewhere it cost more than it saved: beside the x86_64 chain's numpy compile, it took half the
#   cores for all of it; after the BuildKit compile test (2026-11-25), a cold run took 61 min, not 48.
# - Once the arm64 chain ended, the zendnn chain (its final stage, pip and checks: about one core)
#   and the push of the x86_64 chain to the session's registry (PUSHED); once that ended, the
#   README's build on an empty second engine (ENGINE_B) and on an empty Podman engine
#   (PODMAN_BUILD) from that registry; once the zendnn chain ended, the --requirements build
#   (WITH_REQUIREMENTS). They run beside the registry, reuse, sharing and signing tests, which
#   used one core of two in the run's last 15 to 18 minutes (commit 046f0ce: both cores busy until
#   the arm64 chain ended, 19 minutes in, then 41% idle; commit fc18776, with the zendnn chain
#   alone moved there: 45% idle in its last 15 minutes). The tests that read the Podman and
#   requirements builds run after those (LATE). The zendnn chain shares the x86_64 chain's earlier
#   stages: it never starts before that ended.
# BuildKit's compile test (BUILDKIT_FIRST, BUILDKIT_PATCHED, below): at the same weight as the
# tests beside it, in the background beside the x86_64 chain (commit 1072a2d), beside the arm64
# chain (3020a86, 36 min 14 s) or after it on one core (0ee47db, 36 min 20 s), it only moved its
# cost onto them (in the foreground, 046f0ce: 35 min 50 s); once the arm64 chain ended, with the
# push and the other engines' builds from the x86_64 chain's end (a0dfcc9: 37 min 25 s against
# 37 min 28 s), the arm64 chain took 1,150 s, not 810, and the tests started the builds gated on
# its end. In the foreground, the arm64 chain and the builds after it share the cores with its
# compile, and the last 7 minutes of the run (the tests after those builds, one at a time) leave
# a core idle: 465 idle core-seconds of 3,950 busy ones in the run of c4cbe72. So it builds from
# the x86_64 chain's compile on at the lowest CPU weight (LowWeight): on what the others leave
# idle, and at full speed once they are done; the tests that read it run last.
# With the arm64 OS image and the zendnn chain moved so (commit fc18776) a cold run left 849 idle
# core-seconds, with the push and the second engine's build too (46b233b) 706, was 987 (f1d4f10);
# with the Podman, --requirements and arm64 push builds as well (8aa0f5f) 520, 375 of them in its
# last 7 minutes: the BuildKit push, the sharing and signing tests, one at a time.
# The tests that read the arm64 chain run last (LATE).
X86 = Background("x86", X86_ARGS)
X86_COMPILED = "[dev] step 1/"  # in its output once its tools stage (numpy's compile) ended
ARM64_OS = Background("arm64-os", ["bootstrap", "--arch", "aarch64"], nice=True, summary=False, recheck=False)
ARM64 = Background("arm64", [*ARM64_ARGS, "--quiet"])
# zendnn with zentorch (from PyPI, paired with torch by version) and the two test plugins that fit.
ZENDNN_PLUGINS = ("compile_backend", "device")


def _zendnn_inputs(folder: Path) -> list[str]:
    """The local torch wheel and the test plugins (built into `folder`) the zendnn chain installs."""
    wheels = build_plugin_wheels(folder / "plugins", ZENDNN_PLUGINS)
    ZENDNN_WHEELS.update(wheels)
    return ["--torch-wheel", x86_wheelhouse(), *(arg for name in ZENDNN_PLUGINS for arg in ("--plugin-wheel", str(wheels[name])))]


ZENDNN_WHEELS: dict[str, Path] = {}  # folder name -> the wheel the zendnn chain installed
ZENDNN = Background("zendnn", [*X86_ARGS, "--backend", "zendnn"], prepare=_zendnn_inputs)


# BuildKit's tools chain, twice, for the compiler cache test (test_buildx): numpy compiled with the
# cache mount, written out to a folder as CI keeps it (--ccache-dir); then the same request from a
# copy of the checkout with a one-line patch to one numpy file, which must recompile that file
# alone. Under a tag of the session's own (the reuse test's BUILDKIT_TOOLS request takes the
# first build from the engine's cache).
BUILDKIT_TAG = f"test-buildkit-{uuid.uuid4().hex[:10]}"
# --no-test: the reuse test checks this very image, where an empty engine takes it from a registry.
BUILDKIT_ARGS = [*BUILDKIT_TOOLS[:-1], BUILDKIT_TAG, "--no-test"]
PATCHED_FILE = "numpy/_core/src/multiarray/alloc.c"


def _buildkit_first_inputs(folder: Path) -> list[str]:
    return ["--ccache-dir", str(folder / "ccache")]


def _buildkit_patched_inputs(folder: Path) -> list[str]:
    """A copy of the checkout with patches/numpy holding a one-line patch to PATCHED_FILE. Its
    comment is unique to the session: BuildKit keeps the patched step's layer from any earlier
    run with the same patch, and then the step (and ccache) would not run at all. ccache still
    hits on this file, because the preprocessor drops comments."""
    copy = copy_of_checkout(folder)
    with tarfile.open(cache_dir() / "numpy-2.3.5.tar.gz") as sdist:
        original = sdist.extractfile(f"numpy-2.3.5/{PATCHED_FILE}").read().decode().splitlines(keepends=True)
    changed = original + [f"/* torchstack test {BUILDKIT_TAG}: a one-line patch */\n"]
    patch = "Why: proves the compiler cache. Upstream: none.\n" + "".join(
        difflib.unified_diff(original, changed, f"a/{PATCHED_FILE}", f"b/{PATCHED_FILE}")
    )
    patches = copy / "patches" / "numpy"
    patches.mkdir(parents=True, exist_ok=True)
    (patches / "0001-touch-alloc.patch").write_text(patch)
    (patches / "series").write_text("0001-touch-alloc.patch\n")
    BUILDKIT_PATCHED.root = copy
    return []


BUILDKIT_FIRST = Background("buildkit-first", BUILDKIT_ARGS, prepare=_buildkit_first_inputs, recheck=False)
BUILDKIT_PATCHED = Background("buildkit-patched", BUILDKIT_ARGS, prepare=_buildkit_patched_inputs, recheck=False)


class LowWeight:
    """BuildKit's build steps on this host's Docker engine at the lowest CPU weight, held while the
    BuildKit chain builds in the background: dockerd runs every BuildKit step in a cgroup under
    its own `buildkit` one (the cgroupfs driver, with the default cgroup parent), and that one's
    weight against the engine's containers decides. The chain then takes the cores that the
    builds and checks of every other test leave idle, as `nice` gives a process (a BuildKit step
    is no child of build.py: `nice` cannot reach it). Where neither file exists (the systemd
    driver, another cgroup parent), nothing changes: the chain runs beside the tests at their
    weight. The weight found is put back when the chain ends, and at the session's end."""

    FILES = (
        ("/sys/fs/cgroup/cpu/docker/buildkit/cpu.shares", "2", "1024"),  # cgroup v1
        ("/sys/fs/cgroup/docker/buildkit/cpu.weight", "1", "100"),
    )  # v2

    def __init__(self):
        self.found: dict[Path, str] = {}
        self.held = False
        self.lock = threading.Lock()

    def hold(self) -> None:
        """Lowered now, and again each second until released (the folder appears with the engine's first BuildKit step)."""
        with self.lock:
            self.held = True

        def keep() -> None:
            while True:
                with self.lock:
                    if not self.held:
                        return
                    for name, low, default in self.FILES:
                        path = Path(name)
                        with contextlib.suppress(OSError):
                            if path not in self.found:
                                value = path.read_text().strip()
                                self.found[path] = default if value == low else value  # left low by a killed session
                            path.write_text(low)
                time.sleep(1)

        threading.Thread(target=keep, daemon=True).start()

    def release(self) -> None:
        with self.lock:
            self.held = False
            for path, value in self.found.items():
                with contextlib.suppress(OSError):
                    path.write_text(value)
            self.found.clear()


BUILDKIT_WEIGHT = LowWeight()


def _buildkit_chain() -> None:
    """In a thread: once the x86_64 chain's compile ended (its OS image and stages below are then
    the engine's), the BuildKit chain at the lowest weight, its patched build after its first."""
    if not X86.wait(X86_COMPILED):
        return
    BUILDKIT_WEIGHT.hold()
    try:
        with contextlib.suppress(BaseException):  # left to the test that asks for the result
            BUILDKIT_FIRST.start()
            if BUILDKIT_FIRST.wait():  # start() does nothing once the session's end stopped it
                BUILDKIT_PATCHED.start()
                BUILDKIT_PATCHED.wait()
    finally:
        BUILDKIT_WEIGHT.release()


# Builds started in the background late in the run, the arm64 chain and the BuildKit chain: the
# tests that read them run after every other, in this order, so that the tests before them run
# beside those builds. With the BuildKit chain (last: it runs on what the others leave idle) go the
# other tests that build with BuildKit on the session's engine (marked `buildkit`): beside the
# chain, their steps would share its low weight.
LATE = ("requirements_build", "podman_build", "arm64_build", "buildkit")


def pytest_collection_modifyitems(session, config, items):
    """The tests that read a build of LATE after every other, in LATE's order (a test reading two
    goes with the later); of the `buildkit` ones, those that wait for the BuildKit chain last, the
    others beside it. The fixtures they share with tests of their module are session-scoped
    (test_podman's engine and build), so that moving them does not set those up twice."""

    def lateness(item) -> tuple[int, bool]:
        names = {*getattr(item, "fixturenames", ()), *(mark.name for mark in item.iter_markers())}
        return max((i + 1 for i, name in enumerate(LATE) if name in names), default=0), "buildkit_first" in names

    items.sort(key=lateness)


class BackgroundCall:
    """A slow set-up of the session that needs little CPU, run in a thread from the moment the x86_64
    chain ends; its result (or its failure, raised) when a test asks for it."""

    def __init__(self, work, undo):
        self.work, self.undo = work, undo
        self.thread: threading.Thread | None = None
        self.value, self.error = None, None
        self.lock = threading.Lock()

    def _run(self) -> None:
        try:
            self.value = self.work()
        except BaseException as exc:  # raised again in the test that asks
            self.error = exc

    def start(self) -> None:
        with self.lock:
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, daemon=True)
                self.thread.start()

    def result(self):
        self.start()
        self.thread.join()
        if self.error is not None:
            raise self.error
        return self.value

    def stop(self) -> None:
        if self.thread is not None:
            self.thread.join()
            if self.value is not None:
                self.undo(self.value)


# trixie's skopeo, which enforces sigstore signatures in policy.json (bookworm's Podman and skopeo
# have them switched off by a Debian patch), in an image made from our own bootstrapped trixie OS
# image. Its making is mostly downloads and unpacking: it runs beside the tests, from the x86_64 chain's end.
SKOPEO_IMAGE = "torchstack-test-skopeo:trixie"


def _skopeo_image() -> str:
    made = run_build_py("bootstrap", "--distribution", "trixie")
    if made.returncode != 0:
        raise RuntimeError(f"bootstrapping trixie failed: {made.stderr[-2000:]}")
    os_image = made.stdout.strip().splitlines()[-1]
    dockerfile = (
        f"FROM {os_image}\nRUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "
        "--no-install-recommends skopeo > /dev/null && rm -rf /var/lib/apt/lists/*\n"
    )
    docker.from_env().images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=SKOPEO_IMAGE, rm=True, network_mode="host")
    return SKOPEO_IMAGE


def _remove_image(name: str) -> None:
    with contextlib.suppress(docker.errors.ImageNotFound):
        docker.from_env().images.remove(name)


SKOPEO = BackgroundCall(_skopeo_image, _remove_image)


def _in_turn(*steps: tuple[tuple, list]) -> None:
    """In a thread: for each step (builds, starters) in turn, once each of its builds has ended,
    or for a (build, text) once its output shows the text (at once for one never started), call
    each starter; none if one of them failed (or was stopped: the session is ending). A starter
    that fails leaves its failure to the test that asks for its result (it starts again there,
    in the foreground)."""

    def run() -> None:
        for builds, starters in steps:
            got_there = [build.wait(until) for build, until in (b if isinstance(b, tuple) else (b, "") for b in builds)]
            if not all(got_there):
                continue
            for start in starters:
                with contextlib.suppress(BaseException):
                    start()

    threading.Thread(target=run, daemon=True).start()


def pytest_configure(config):
    """A CI job's cancel (SIGTERM) ends the session as Ctrl-C does: fixtures torn down and
    pytest_sessionfinish run (the background builds stopped, BuildKit's weight put back)."""

    def interrupted(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupted)


def pytest_collection_finish(session):
    if session.config.option.collectonly:
        return
    for resource, fixtures in CLOSED_EARLY:
        users = [item.nodeid for item in session.items if set(fixtures) & set(getattr(item, "fixturenames", ()))]
        if users:
            LAST_USER[users[-1]] = resource
    wanted = {fixture for item in session.items for fixture in getattr(item, "fixturenames", ())}  # every fixture the run needs
    x86 = "x86_build" in wanted
    if x86 and (folder := _named_wheelhouse()):
        X86.env = {"PIP_FIND_LINKS": folder}
        X86.start()
    if "arm64_build" in wanted:
        ARM64_OS.start()

    def starters(*pairs: tuple[str, Background | BackgroundCall]) -> list:
        return [work.start for fixture, work in pairs if fixture in wanted]

    _in_turn(
        (((X86, X86_COMPILED), ARM64_OS), starters(("arm64_build", ARM64))),
        ((X86,), starters(("skopeo", SKOPEO))),
        ((X86, ARM64), starters(("zendnn_build", ZENDNN), ("pushed", PUSHED)) if x86 else []),
        ((PUSHED,), starters(("built_on_b", ENGINE_B), ("podman_build", PODMAN_BUILD)) if x86 else []),
        (
            (ZENDNN, ARM64),
            [*(starters(("requirements_build", WITH_REQUIREMENTS)) if x86 else []), *starters(("arm64_pushed", ARM64_PUSHED))],
        ),
    )
    if "buildkit_first" in wanted:
        threading.Thread(target=_buildkit_chain, daemon=True).start()


def pytest_runtest_logfinish(nodeid, location):
    """Once the last test that uses an engine of CLOSED_EARLY ended: the engine closed beside the
    tests that follow (the session's end waits for it, as for every resource)."""
    if (resource := LAST_USER.pop(nodeid, None)) is not None:
        threading.Thread(target=resource.close).start()


def pytest_sessionfinish(session):
    for build in (
        ZENDNN,
        ARM64,
        ARM64_OS,
        X86,
        ENGINE_B,
        PODMAN_BUILD,
        WITH_REQUIREMENTS,
        PUSHED,
        ARM64_PUSHED,
        BUILDKIT_FIRST,
        BUILDKIT_PATCHED,
    ):
        build.stop()
    BUILDKIT_WEIGHT.release()
    if BUILDKIT_FIRST.process is not None:
        untag(docker.from_env(), f":{BUILDKIT_TAG}")
    if WITH_REQUIREMENTS.process is not None:  # its test untags it; not if the session ended before
        untag(docker.from_env(), f":{APP_RELEASE}-")
    SKOPEO.stop()
    # Side by side: each waits mostly on its engine's shutdown and its disk.
    closing = [threading.Thread(target=resource.close) for resource in (PODMAN, SECOND_ENGINE, REGISTRY, COSIGN_KEYS)]
    for thread in closing:
        thread.start()
    for thread in closing:
        thread.join()


@pytest.fixture(scope="session")
def skopeo(client) -> str:
    """The image with trixie's skopeo (SKOPEO_IMAGE), made in the background; removed when the session ends."""
    return SKOPEO.result()


@pytest.fixture(scope="session")
def x86_build(client):
    """The full x86_64 chain, built once per session (started when collection ended); its JSON
    summary, with the build's output as `output`. --recheck: the image checks run in every test
    session, even on an image whose ID passed them in an earlier one."""
    X86.env = {"PIP_FIND_LINKS": x86_wheelhouse()}
    return X86.result()


@pytest.fixture(scope="session")
def zendnn_build(client, x86_build):
    """The x86_64 zendnn chain with zentorch and the test plugins of ZENDNN_PLUGINS (a torch.compile
    backend, a PrivateUse1 device), built once per session after the onednn chain (`x86_build`),
    whose earlier stages it shares (in the background once the arm64 chain ended); its JSON
    summary, with the build's output (the checks' report among it) as `output` and the plugin
    wheels it installed as `plugin_wheels` (folder name -> wheel file)."""
    return {**ZENDNN.result(), "plugin_wheels": dict(ZENDNN_WHEELS)}


@pytest.fixture(scope="session")
def arm64_build(client):
    """The arm64 onednn-acl chain under qemu, built once per session (in the background, after the
    x86_64 chain, on the OS image ARM64_OS made beside it); its JSON summary."""
    return ARM64.result()


@pytest.fixture(scope="session")
def buildkit_first(client) -> dict:
    """BUILDKIT_FIRST's JSON summary (in the background from the x86_64 chain's compile on), its
    output, and the folder its --ccache-dir wrote, as `ccache_dir`."""
    return {**BUILDKIT_FIRST.result(), "ccache_dir": BUILDKIT_FIRST.folder / "ccache"}


@pytest.fixture(scope="session")
def buildkit_patched(buildkit_first) -> dict:
    """BUILDKIT_PATCHED's JSON summary (in the background after BUILDKIT_FIRST), and its output."""
    return BUILDKIT_PATCHED.result()


@pytest.fixture(scope="session")
def plain_image(client) -> str:
    """Debian with the x86_64 torch wheel installed by pip alone, as root: an image the toolkit did
    not build. Made by the benchmark's own code (benchmarks/run.py), so that its run in the session
    takes this very image from the engine's cache instead of installing torch again."""
    spec = importlib.util.spec_from_file_location("torchstack_benchmark", ROOT / "benchmarks" / "run.py")
    benchmark = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(benchmark)
    plan = benchmark.readme_plan(load_catalog(), x86_wheelhouse())
    if not engine.image_exists(client, plan.base_image):
        pytest.fail(f"{plan.base_image} is not here: the plain image is built on the OS image the x86_64 chain bootstraps")
    return benchmark.plain_image(plan.base_image, plan.torch_wheel_file)[0]


def copy_of_checkout(folder: Path) -> Path:
    """A copy of the checkout's files in `folder`, to change without touching the real one."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True).stdout
    copy = folder / "torchstack"
    for name in files.split():
        if (ROOT / name).is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, copy / name)
    return copy


@pytest.fixture
def repo_copy(tmp_path):
    """A copy of the checkout to change (a stale patch, a slow step) without touching the real one."""
    return copy_of_checkout(tmp_path)


@pytest.fixture
def unique_tag(client):
    """A tag no other run uses; the images given it are untagged afterwards (layers that other
    tags share stay, and so does the engine's build cache)."""
    tag = f"test-{uuid.uuid4().hex[:10]}"
    yield tag
    untag(client, f":{tag}")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def running_registry(folder: Path, auth: bool) -> Iterator[str]:
    """The address of a registry on 127.0.0.1 (an address the engine may use over plain HTTP), storing in
    `folder`. With `auth`, it needs a login that no user has (an empty htpasswd file)."""
    binary = shutil.which("docker-registry")
    if not binary:
        pytest.fail("docker-registry is missing: run scripts/setup-host.sh")
    port = free_port()
    config = {
        "version": 0.1,
        "log": {"level": "error"},
        "storage": {"filesystem": {"rootdirectory": str(folder / "data")}},
        "http": {"addr": f"127.0.0.1:{port}"},
    }
    if auth:
        (folder / "htpasswd").write_text("")
        config["auth"] = {"htpasswd": {"realm": "torchstack-test", "path": str(folder / "htpasswd")}}
    (folder / "config.yml").write_text(json.dumps(config))  # JSON is YAML
    server = subprocess.Popen(
        [binary, "serve", str(folder / "config.yml")], stdout=subprocess.DEVNULL, stderr=open(folder / "registry.log", "w")
    )
    address = f"127.0.0.1:{port}"
    for _ in range(100):
        try:
            urllib.request.urlopen(f"http://{address}/v2/", timeout=1)
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


@pytest.fixture(scope="session")
def registry() -> str:
    """A registry on loopback for the whole session: the x86_64 chain's stages pushed there once
    (`pushed`) serve the push tests and another engine's --cache-from."""
    return REGISTRY.get()


@pytest.fixture(scope="session")
def cosign_keys() -> dict:
    """Two cosign key pairs, ours (which --sign uses) and another's, with the password cosign reads
    from COSIGN_PASSWORD: {"ours": (private, public), "other": (...), "env": {...}}."""
    return COSIGN_KEYS.get()


def _push_inputs(folder: Path) -> list[str]:
    keys = COSIGN_KEYS.get()
    PUSHED.env = keys["env"]
    return [
        "--torch-wheel",
        x86_wheelhouse(),
        "--push",
        "--push-stages",
        "--registry",
        f"{REGISTRY.get()}/ml",
        "--sign",
        str(keys["ours"][0]),
    ]


# The README's build again, with --push --push-stages --sign: a no-op rebuild (its checks not run
# again), then the pushes, then the release image signed with its SBOM and provenance attested
# (ours key). In the background once the arm64 chain ended; the second engine's build from it then.
PUSHED = Background("pushed", X86_ARGS, prepare=_push_inputs, recheck=False)


@pytest.fixture(scope="session")
def pushed(client, x86_build, registry, cosign_keys):
    """PUSHED's JSON summary, and its output."""
    built = PUSHED.result()
    yield {k: v for k, v in built.items() if k != "output"}, built["output"]
    untag(client, f"{registry}/")


# An empty second engine, as a new CI runner's (second_engine), made by whoever asks first: the
# background build below, or test_reuse.
SECOND_ENGINE = Resource(lambda stack: stack.enter_context(second_engine()))


def _pushed_stages() -> str:
    """Where PUSHED sent the x86_64 chain's stages; refused before it did (an empty registry as
    --cache-from would compile numpy again)."""
    if PUSHED.process is None or PUSHED.process.poll() != 0:
        raise RuntimeError("the x86_64 chain's stages were not pushed")
    return f"{REGISTRY.get()}/ml"


def _engine_b_inputs(folder: Path) -> list[str]:
    ENGINE_B.env = {"DOCKER_HOST": SECOND_ENGINE.get()}
    return ["--torch-wheel", x86_wheelhouse(), "--cache-from", _pushed_stages()]


# The README's build on the second engine, with the registry PUSHED filled as --cache-from: in the
# background as soon as the stages are there, beside the registry, reuse and sharing tests.
ENGINE_B = Background("engine-b", X86_ARGS, prepare=_engine_b_inputs)

# An empty Podman engine (podman_engine), with the session's registry; made by whoever asks first.
PODMAN = Resource(lambda stack: stack.enter_context(podman_engine(REGISTRY.get())))

# The engines closed once the last test that uses them (by these fixtures) ended, not at the
# session's end: the second engine's shutdown and data removal took 13 s there (2026-11-26).
CLOSED_EARLY = ((SECOND_ENGINE, ("engine_b", "built_on_b")), (PODMAN, ("podman", "podman_build")))
LAST_USER: dict[str, Resource] = {}  # that test's node ID -> the engine


def _podman_inputs(folder: Path) -> list[str]:
    stages = _pushed_stages()
    PODMAN_BUILD.env = PODMAN.get()
    return ["--torch-wheel", x86_wheelhouse(), "--cache-from", stages, "--push", "--registry", f"{REGISTRY.get()}/podman"]


# The README's build with --engine podman on that engine, from the stages PUSHED sent (Podman
# takes them under their content names), checked through Podman and pushed: in the background
# from the moment the stages are there. Its image is Podman's own: its checks run without --recheck.
PODMAN_BUILD = Background("podman", ["--engine", "podman", *X86_ARGS], prepare=_podman_inputs, recheck=False)

# A team's requirements in another release of the README image (test_requirements): the final
# stage again, with transformers resolved against the stack. In the background once the zendnn
# chain ended; its checks are the test's own.
APP_REQUIREMENTS = "transformers==5.24.0\n"
APP_RELEASE = "r99.12"


def _requirements_inputs(folder: Path) -> list[str]:
    wanted = folder / "requirements.txt"
    wanted.write_text(APP_REQUIREMENTS)
    return ["--torch-wheel", x86_wheelhouse(), "--release", APP_RELEASE, "--requirements", str(wanted), "--no-test"]


WITH_REQUIREMENTS = Background("requirements", X86_ARGS, prepare=_requirements_inputs, recheck=False)


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


def listed_architectures(registry: str, repository: str, tag: str) -> list[str]:
    """The architectures of a multi-architecture tag, as the registry lists them."""
    request = urllib.request.Request(
        f"http://{registry}/v2/{repository}/manifests/{tag}",
        headers={"Accept": "application/vnd.docker.distribution.manifest.list.v2+json, application/vnd.oci.image.index.v1+json"},
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        return sorted(m["platform"]["architecture"] for m in json.load(answer)["manifests"])


@contextlib.contextmanager
def second_engine() -> Iterator[str]:
    """Another Docker engine on this machine, empty, as a new CI runner's: its own data root, exec
    root (and so its own containerd), pid file and socket, and a bridge of its own with no iptables
    rules (builds use the host's network, checks run with none). Not `--bridge=none`: an engine
    started so deletes the host's docker0, the first engine's bridge. Yields its DOCKER_HOST;
    stopped, its bridge and its data removed afterwards. The folder is short: containerd's sockets
    live under the exec root."""
    dockerd, ip = shutil.which("dockerd"), shutil.which("ip")
    if not dockerd or not ip:
        pytest.fail(f"{'dockerd' if not dockerd else 'ip (iproute2)'} is missing: run scripts/setup-host.sh")
    folder = Path(tempfile.mkdtemp(prefix="tsb-", dir="/tmp"))
    socket_path = folder / "docker.sock"
    bridge = f"tsb{os.getpid() % 100000}"
    for step in (["link", "add", bridge, "type", "bridge"], ["addr", "add", "10.213.77.1/24", "dev", bridge]):
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
        "--cgroup-parent=/torchstack-second-engine",
    ]
    log = open(folder / "dockerd.log", "w")
    daemon = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
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
    folder = Path(tempfile.mkdtemp(prefix="tsp-", dir="/var/tmp"))  # overlay storage: not on a tmpfs
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


def _arm64_push_inputs(folder: Path) -> list[str]:
    keys = COSIGN_KEYS.get()
    ARM64_PUSHED.env = keys["env"]
    return ["--push", "--registry", f"{REGISTRY.get()}/ml", "--sign", str(keys["ours"][0])]


# The emulated arm64 image pushed by the Docker engine and signed (ours key): a no-op rebuild, its
# checks not run again, then the push. In the background once the zendnn chain ended.
ARM64_PUSHED = Background("arm64-pushed", [*ARM64_ARGS, "--quiet"], prepare=_arm64_push_inputs, recheck=False)


@pytest.fixture(scope="session")
def arm64_pushed(arm64_build, registry, cosign_keys) -> str:
    """The emulated arm64 image in the loopback registry (ARM64_PUSHED), pushed once per session and signed."""
    ARM64_PUSHED.result()
    return f"{registry}/ml/torchstack:{arm64_build['release_tag']}"
