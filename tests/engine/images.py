"""The images the engine tests need, as data: one table of builds, each with what it builds on, and
a small scheduler that builds each once, in the background, as soon as what it builds on is built,
at most as many at once as the host has cores.

A test asks for an image by its fixture's name (`IMAGES.result("x86_build")`) and waits for it; a
build whose own input failed is reported to the test that asks, with why. The table's order is the
order builds start in when several are ready, and the order of the tests that read them
(conftest.pytest_collection_modifyitems): the tests of an image run after those of the images above it.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import docker
import pytest

from tests import session
from tests.conftest import build_plugin_wheels
from tests.engine.hosts import (
    COSIGN_KEYS,
    CURRENT_ENGINES,
    PODMAN,
    PODMAN5_IMAGE,
    REBUILD_ENGINES,
    REGISTRY,
    SECOND_ENGINE,
    Resource,
    current_client_env,
    podman5_engine,
    podman_engine,
)
from torchstack.base.state import cache_dir
from torchstack.catalog.model import ROOT, load_catalog
from torchstack.catalog.wheels import download_from_index
from torchstack.making import archive
from torchstack.request.plan import Request, Suite
from torchstack.request.planner import make_plan

CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")


def _named_wheelhouse() -> str | None:
    """The folder the environment names that holds a CPU-only x86_64 torch wheel, if it does."""
    folder = os.environ.get("TORCHSTACK_TEST_WHEELHOUSE") or os.environ.get("PIP_FIND_LINKS")
    return folder if folder and list(Path(folder).glob("torch-*x86_64.whl")) else None


def _readme_wheel(stack: contextlib.ExitStack) -> str:
    """A folder holding the torch wheel the README's first command takes where no folder is named: the
    toolkit's own choice (wheels.download_from_index: a wheelhouse pip is configured with, else the
    catalog's PyTorch CPU index) for the README plan's Python, downloaded once for the session."""
    catalog = load_catalog()
    plan = make_plan(catalog, Request(methods={"torch": "wheel", "openblas": "distro"}, builder="docker"))
    index = catalog.components["torch"].alternatives["wheel"].index
    folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="torchstack-wheel-")))
    download_from_index(folder, "x86_64", plan.distribution.python, plan.torch_version, index)
    return str(folder)


README_WHEEL = Resource(_readme_wheel)


def x86_wheelhouse() -> str:
    """The folder holding a CPU-only x86_64 torch wheel (PyPI's x86_64 wheels are CUDA builds): the one
    TORCHSTACK_TEST_WHEELHOUSE (or PIP_FIND_LINKS) names, else the one the README's first command takes."""
    return _named_wheelhouse() or README_WHEEL.get()


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
    f"buildkit-tools-{session.ID}",
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


def run_build_py(*args: str, cwd: Path = ROOT, timeout: int = 3000, env: dict | None = None) -> subprocess.CompletedProcess:
    """build.py run to its end in the foreground, as a process of the session (tests/session.py)."""
    return session.run([sys.executable, str(cwd / "build.py"), *args], cwd=cwd, timeout=timeout, env={**os.environ, **(env or {})})


def ccache_counts(log: str) -> tuple[int, int]:
    """Hits and misses that the last `ccache --show-stats` of a build's log reported."""
    stats = log.rsplit("Cacheable calls:", 1)[1]
    hits = int(re.search(r"Hits:\s+(\d+)", stats)[1])
    misses = int(re.search(r"Misses:\s+(\d+)", stats)[1])
    return hits, misses


def checks_passed(result: subprocess.CompletedProcess, summary: dict) -> bool:
    """`build.py test` of an image built earlier in the session passed: exit 0; or every check passed
    and the release gate alone refused, for a fix Debian published after the build read its -security
    suite (the suite's signed index is no longer the one the summary records). The gate's own test is
    test_security's, on an archive of the test's own."""
    if result.returncode == 0:
        return True
    gated = result.returncode == 1 and "with a newer version in" in result.stderr
    if not gated or " passed" not in result.stdout or " failed" in result.stdout:
        return False
    for state in summary["reproducible"]["archive"]:
        if state["suite"].endswith("-security"):
            live = archive.suite_state(Suite(state["uri"].rsplit("/dists/", 1)[0], state["suite"], "security"))
            if live["sha256"] != state["sha256"]:
                return True
    return False


def copy_of_checkout(folder: Path) -> Path:
    """A copy of the checkout's files in `folder`, to change without touching the real one."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True).stdout
    copy = folder / "torchstack"
    for name in files.split():
        if (ROOT / name).is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, copy / name)
    return copy


class Build:
    """A build.py run an image test needs: started by the scheduler, in a folder of its own (removed
    when the session ends) that holds its output and JSON summary. `after`: the images (fixture
    names) it builds on. `prepare(build, folder)` makes what the run needs and returns the arguments
    naming it; it may set `env` (the run's environment) and `root` (the checkout it runs from: a
    changed copy). `summary=False` for a command that writes none (`bootstrap`); `recheck=False`
    leaves out the image checks on an image ID that passed them."""

    def __init__(self, args: list[str], after: tuple[str, ...] = (), prepare=None, summary: bool = True, recheck: bool = True):
        self.args, self.after, self.prepare, self.summary, self.recheck = args, after, prepare, summary, recheck
        self.name = ""  # its fixture's name, set by the table
        self.env: dict[str, str] = {}
        self.root = ROOT
        self.process: subprocess.Popen | None = None
        self.folder: Path | None = None
        self.problem: str | None = None  # why it could not start
        self.began: float | None = None  # time.monotonic() when the scheduler started it, and saw it end
        self.ended: float | None = None

    def start(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix=f"torchstack-{self.name}-"))
        extra = self.prepare(self, self.folder) if self.prepare else []
        reported = [*(["--json", str(self.folder / "summary.json")] if self.summary else []), *(["--recheck"] if self.recheck else [])]
        command = [sys.executable, str(self.root / "build.py"), *self.args, *extra, *reported]
        with open(self.folder / "output.log", "w") as output:
            self.process = session.popen(command, cwd=self.root, stdout=output, stderr=subprocess.STDOUT, env={**os.environ, **self.env})

    def started(self) -> bool:
        return self.process is not None

    def done(self) -> bool:
        return self.problem is not None or (self.process is not None and self.process.poll() is not None)

    def ok(self) -> bool:
        return self.problem is None and self.process is not None and self.process.poll() == 0

    def output(self) -> str:
        return (self.folder / "output.log").read_text(errors="replace") if self.folder else ""

    def result(self) -> dict:
        """Its summary, with its output as `output` (it has ended)."""
        assert self.problem is None, f"the {self.name} build could not start: {self.problem}"
        output = self.output()
        assert self.process.returncode == 0, f"the {self.name} build failed:\n{output[-6000:]}"
        summary = json.loads((self.folder / "summary.json").read_text()) if self.summary else {}
        return {**summary, "output": output}

    def stop(self) -> None:
        """Cancelled as CI cancels a job if still running (SIGTERM: it removes what it started)."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)


class Call(Build):
    """Work of the session that is no build.py run (an image made with the SDK): `work()` in a
    thread, its value the result; `undo(value)` when the session ends."""

    def __init__(self, work: Callable[[], object], undo: Callable[[object], None], after: tuple[str, ...] = ()):
        super().__init__([], after)
        self.work, self.undo = work, undo
        self.thread: threading.Thread | None = None
        self.value = None

    def start(self) -> None:
        def run() -> None:
            try:
                self.value = self.work()
            except BaseException as exc:  # reported to the test that asks
                self.problem = f"{type(exc).__name__}: {exc}"

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def started(self) -> bool:
        return self.thread is not None

    def done(self) -> bool:
        return self.problem is not None or (self.thread is not None and not self.thread.is_alive())

    def ok(self) -> bool:
        return self.done() and self.problem is None

    def result(self):
        assert self.problem is None, f"{self.name} failed: {self.problem}"
        return self.value

    def stop(self) -> None:
        if self.thread is not None:
            self.thread.join()
            if self.value is not None:
                self.undo(self.value)


class Scheduler:
    """Each wanted build once, started in the table's order as soon as what it builds on was built
    and fewer than `slots` builds run."""

    def __init__(self, table: dict[str, Build], slots: int):
        self.table, self.slots = table, slots
        for name, build in table.items():
            build.name = name
        self.wanted: set[str] = set()
        self.stopped = False
        self.changed = threading.Condition()
        self.thread: threading.Thread | None = None
        self.origin = time.monotonic()

    def want(self, names) -> None:
        """These builds and what they build on, started when they can be."""
        with self.changed:
            todo = [n for n in names if n in self.table]
            while todo:
                name = todo.pop()
                if name not in self.wanted:
                    self.wanted.add(name)
                    todo.extend(self.table[name].after)
            if self.thread is None and self.wanted:
                self.thread = threading.Thread(target=self._run, daemon=True)
                self.thread.start()
            self.changed.notify_all()

    def _blocked_by(self, build: Build) -> str | None:
        """The first of what `build` builds on that failed, if one did."""
        return next((n for n in build.after if self.table[n].done() and not self.table[n].ok()), None)

    def _run(self) -> None:
        with self.changed:
            while not self.stopped:
                running = sum(1 for b in self.table.values() if b.started() and not b.done())
                for build in self.table.values():
                    if build.began is not None and build.ended is None and build.done():
                        build.ended = time.monotonic()
                for name, build in self.table.items():
                    if name not in self.wanted or build.started() or build.done():
                        continue
                    if failed := self._blocked_by(build):
                        build.problem = f"{failed}, which it builds on, failed"
                    elif running < self.slots and all(self.table[n].ok() for n in build.after):
                        build.began = time.monotonic()
                        try:
                            build.start()
                        except BaseException as exc:  # its inputs could not be made: reported to the test that asks
                            build.problem = f"{type(exc).__name__}: {exc}"
                        running += 1
                self.changed.wait(timeout=1)

    def result(self, name: str):
        """The build's result once it ended (wanted now if it was not); the test fails if it failed."""
        self.want([name])
        build = self.table[name]
        with self.changed:
            while not build.done():
                self.changed.wait(timeout=1)
        if build.problem is not None:
            pytest.fail(f"{name} was not built: {build.problem}")
        return build.result()

    def timeline(self) -> list[str]:
        """When each build that started began and ended, in minutes from the session's collection, in
        the order they began: where a run's time went, for the terminal's summary."""
        lines = []
        for build in sorted((b for b in self.table.values() if b.began is not None), key=lambda b: b.began):
            start = (build.began - self.origin) / 60
            if build.ended is None:
                lines.append(f"{build.name:<34} {start:5.1f} -   ...  (not ended)")
                continue
            end = (build.ended - self.origin) / 60
            verdict = "ok" if build.ok() else "failed"
            lines.append(f"{build.name:<34} {start:5.1f} - {end:5.1f}  ({end - start:4.1f} min, {verdict})")
        return lines

    def stop(self) -> None:
        """Every build still running cancelled, every folder removed (the session is ending)."""
        with self.changed:
            self.stopped = True
            self.changed.notify_all()
            for build in self.table.values():
                if build.began is not None and build.ended is None and build.done():
                    build.ended = time.monotonic()
        for build in self.table.values():
            build.stop()


# What the builds below take as inputs.
ZENDNN_PLUGINS = ("compile_backend", "device")  # the test plugins that fit zendnn with zentorch
ZENDNN_WHEELS: dict[str, Path] = {}  # folder name -> the wheel the zendnn chain installed
BUILDKIT_TAG = f"test-buildkit-{session.ID}"  # BuildKit's tools chain, under a tag of the session's
PATCHED_FILE = "numpy/_core/src/multiarray/alloc.c"
SKOPEO_IMAGE = f"torchstack-test-skopeo:trixie-{session.ID}"
# A team's requirements in another release of the README image (test_requirements).
APP_REQUIREMENTS = "transformers==5.24.0\n"
APP_RELEASE = "r99.12"


def _x86_inputs(build: Build, folder: Path) -> list[str]:
    build.env = {"PIP_FIND_LINKS": x86_wheelhouse()}
    return []


def _zendnn_inputs(build: Build, folder: Path) -> list[str]:
    """The local torch wheel and the test plugins (built into `folder`) the zendnn chain installs."""
    wheels = build_plugin_wheels(folder / "plugins", ZENDNN_PLUGINS)
    ZENDNN_WHEELS.update(wheels)
    return ["--torch-wheel", x86_wheelhouse(), *(arg for name in ZENDNN_PLUGINS for arg in ("--plugin-wheel", str(wheels[name])))]


def _buildkit_first_inputs(build: Build, folder: Path) -> list[str]:
    return ["--ccache-dir", str(folder / "ccache")]


def _buildkit_patched_inputs(build: Build, folder: Path) -> list[str]:
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
    build.root = copy
    return []


def _signed_push(build: Build, registry_path: str) -> list[str]:
    keys = COSIGN_KEYS.get()
    build.env = keys["env"]
    return ["--push", "--registry", f"{REGISTRY.get()}/{registry_path}", "--sign", str(keys["ours"][0])]


def _push_inputs(build: Build, folder: Path) -> list[str]:
    return ["--torch-wheel", x86_wheelhouse(), "--push-stages", "--lazy", "soci", *_signed_push(build, "ml")]


def _engine_b_inputs(build: Build, folder: Path) -> list[str]:
    build.env = {"DOCKER_HOST": SECOND_ENGINE.get()}
    return ["--torch-wheel", x86_wheelhouse(), "--cache-from", f"{REGISTRY.get()}/ml"]


# The README's image made again elsewhere, on each of Docker's image stores (hosts.CURRENT_ENGINES): the
# table's names for its build, its move to the store's other engine, and its rebuild there.
REPRODUCED = {
    "containerd": ("built_on_current", "moved_to_rebuild_engine", "rebuilt_on_current"),
    "overlay2": ("built_on_overlay2", "moved_to_overlay2_rebuild_engine", "rebuilt_on_overlay2"),
}


def _current_engine_inputs(store: str, build: Build, folder: Path) -> list[str]:
    build.env = current_client_env(CURRENT_ENGINES[store].get())
    return ["--torch-wheel", x86_wheelhouse()]


def _seeded_current_engine_inputs(store: str, build: Build, folder: Path) -> list[str]:
    """As above, with the compiler cache BuildKit's first chain wrote on the host's engine (a copy):
    what a CI job's cache action restores on a new runner (--ccache-dir)."""
    seed = shutil.copytree(IMAGES.table["buildkit_first"].folder / "ccache", folder / "ccache", symlinks=True)
    return [*_current_engine_inputs(store, build, folder), "--ccache-dir", str(seed)]


def _moved_to_rebuild_engine(store: str) -> str:
    """The README's image, as a third party has it: moved from the engine that built it to another, empty one."""
    image = IMAGES.table[REPRODUCED[store][0]].result()["stages"][-1]["tags"][-1]
    source, target = (shlex.quote(engines[store].get()) for engines in (CURRENT_ENGINES, REBUILD_ENGINES))
    command = f"docker -H {source} save {shlex.quote(image)} | docker -H {target} load"
    moved = subprocess.run(
        command, shell=True, capture_output=True, text=True, env={**os.environ, **current_client_env(CURRENT_ENGINES[store].get())}
    )
    if moved.returncode != 0:
        raise RuntimeError(f"moving {image} to the other engine failed: {moved.stderr[-2000:]}")
    return image


def _podman_stages_twice() -> list[dict]:
    """The README's request up to its libs stage (the OS image and the stages before the numpy compile),
    built on an empty Podman 4.3 engine (Debian 12's), then on two empty Podman 5 engines one after the
    other, each with a state folder of its own: three hosts' clocks and caches. Their summaries."""
    summaries = []
    for engine in (
        functools.partial(podman_engine, REGISTRY.get()),
        *[functools.partial(podman5_engine, REGISTRY.get(), PODMAN5_IMAGE.get())] * 2,
    ):
        folder = Path(tempfile.mkdtemp(prefix="torchstack-podman-twice-"))
        try:
            with engine() as env:
                summary = folder / "summary.json"
                args = ["--engine", "podman", *X86_ARGS, "--torch-wheel", x86_wheelhouse(), "--build-type", "libs", "--no-test"]
                made = run_build_py(*args, "--json", str(summary), env={**env, "TORCHSTACK_CACHE": str(folder / "state")})
                if made.returncode != 0:
                    raise RuntimeError(f"the Podman build failed: {made.stdout[-2000:]}{made.stderr[-2000:]}")
                summaries.append(json.loads(summary.read_text()))
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    return summaries


def _rebuild_inputs(store: str, build: Build, folder: Path) -> list[str]:
    """`verify IMAGE --rebuild` on the engine the image was moved to, with a state folder of its own."""
    build.env = {**current_client_env(REBUILD_ENGINES[store].get()), "TORCHSTACK_CACHE": str(folder / "state")}
    image = IMAGES.table[REPRODUCED[store][1]].result()
    return [image, "--rebuild", "--torch-wheel", x86_wheelhouse(), "--ca-bundle", str(CA_BUNDLE)]


def _podman_inputs(build: Build, folder: Path) -> list[str]:
    build.env = PODMAN.get()
    registry = REGISTRY.get()
    return ["--torch-wheel", x86_wheelhouse(), "--cache-from", f"{registry}/ml", "--push", "--registry", f"{registry}/podman"]


def _requirements_inputs(build: Build, folder: Path) -> list[str]:
    wanted = folder / "requirements.txt"
    wanted.write_text(APP_REQUIREMENTS)
    return ["--torch-wheel", x86_wheelhouse(), "--release", APP_RELEASE, "--requirements", str(wanted), "--no-test"]


def _arm64_push_inputs(build: Build, folder: Path) -> list[str]:
    return _signed_push(build, "ml")


def _skopeo_image() -> str:
    """trixie's skopeo, which enforces sigstore signatures in policy.json (bookworm's Podman and skopeo
    have them switched off by a Debian patch), in an image made from our own bootstrapped trixie OS image."""
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


# The images the engine tests need, by the name of the fixture that hands each to a test, in the
# order they start in when several are ready (and their tests run in).
IMAGES = Scheduler(
    {
        # The x86_64 chain the README's first command builds (its checks run in every session).
        "x86_build": Build(X86_ARGS, prepare=_x86_inputs),
        # The arm64 OS image, then the arm64 onednn-acl chain under qemu: the longest build; its
        # tests run last. It builds on nothing of the x86_64 chain, so it starts beside it.
        "arm64_os": Build(["bootstrap", "--arch", "aarch64"], summary=False, recheck=False),
        # BuildKit's tools chain on the host's engine (the README's first three stages, with --builder
        # buildx), for the compiler cache tests: numpy compiled with the cache mount, written out to a
        # folder as CI keeps it (--ccache-dir). --no-test: the reuse test checks this very image on
        # an empty engine. It leads the containerd chain below, which starts from that folder.
        "buildkit_first": Build(
            [*BUILDKIT_TOOLS[:-1], BUILDKIT_TAG, "--no-test"], after=("x86_build",), prepare=_buildkit_first_inputs, recheck=False
        ),
        # The README's build as it is (no --builder: BuildKit by default) on an empty engine of a current
        # Docker release in its containerd image store, as on an Ubuntu 24.04 host or a CI runner: every
        # stage built anew, numpy's compile served by the compiler cache of the chain above, restored
        # with --ccache-dir as a CI job restores it on a new runner. The rebuild below compiles cold: the
        # two images' equal IDs prove that two compiles on two engines wrote the same files.
        "built_on_current": Build(
            X86_ARGS, after=("buildkit_first",), prepare=functools.partial(_seeded_current_engine_inputs, "containerd")
        ),
        # That image built again by `verify --rebuild`, cold, on another empty engine of that release it is
        # moved to, with a state folder of its own: another host's clock, cache and downloads
        # (test_reproducible.py). First of those after the x86_64 chain: the longest chain that follows it.
        "moved_to_rebuild_engine": Call(
            functools.partial(_moved_to_rebuild_engine, "containerd"), lambda image: None, after=("built_on_current",)
        ),
        "rebuilt_on_current": Build(
            ["verify"], after=("moved_to_rebuild_engine",), prepare=functools.partial(_rebuild_inputs, "containerd"), recheck=False
        ),
        # The same on engines of that release in the overlay2 store, as on a Debian 13 host: built and
        # built again (test_reproducible.py). No checks: the README image's pass on the host's engine
        # and on the containerd store (test_current_docker.py); this pair proves only the image IDs.
        # With numpy's wheel: that numpy's compile writes the same files twice is the containerd
        # pair's proof, and the store, which this pair is for, packs whatever a step writes; two more
        # cold numpy compiles cost a CI run a third of its time on two cores.
        "built_on_overlay2": Build(
            [*X86_ARGS, "--numpy-from", "wheel", "--no-test"],
            after=("x86_build",),
            prepare=functools.partial(_current_engine_inputs, "overlay2"),
            recheck=False,
        ),
        "moved_to_overlay2_rebuild_engine": Call(
            functools.partial(_moved_to_rebuild_engine, "overlay2"), lambda image: None, after=("built_on_overlay2",)
        ),
        "rebuilt_on_overlay2": Build(
            ["verify"], after=("moved_to_overlay2_rebuild_engine",), prepare=functools.partial(_rebuild_inputs, "overlay2"), recheck=False
        ),
        # trixie's skopeo for the signature policy tests.
        "skopeo": Call(_skopeo_image, _remove_image, after=("x86_build",)),
        # zendnn with zentorch (from PyPI, paired with torch by version) and the two test plugins
        # that fit it; it shares the x86_64 chain's earlier stages.
        "zendnn_build": Build([*X86_ARGS, "--backend", "zendnn"], after=("x86_build",), prepare=_zendnn_inputs),
        # The README's build again with --push --push-stages --lazy soci --sign: a no-op rebuild (its
        # checks not run again), the pushes to the session's registry, the release signed and
        # attested, its SOCI index pushed and signed.
        "pushed": Build(X86_ARGS, after=("x86_build",), prepare=_push_inputs, recheck=False),
        # The README's build on an empty second engine, with those stages as --cache-from.
        "built_on_b": Build(X86_ARGS, after=("pushed",), prepare=_engine_b_inputs),
        # The README's build on an empty Podman engine from those stages, checked through Podman and
        # pushed; its image is Podman's own: its checks run without --recheck.
        "podman_build": Build(["--engine", "podman", *X86_ARGS], after=("pushed",), prepare=_podman_inputs, recheck=False),
        # A team's requirements in another release of the README image: its final stage again.
        "requirements_build": Build(X86_ARGS, after=("x86_build",), prepare=_requirements_inputs, recheck=False),
        # BuildKit's tools chain again, from a copy of the checkout with a one-line patch to one numpy
        # file, which must recompile that file alone (buildkit_first is above).
        "buildkit_patched": Build(
            [*BUILDKIT_TOOLS[:-1], BUILDKIT_TAG, "--no-test"], after=("buildkit_first",), prepare=_buildkit_patched_inputs, recheck=False
        ),
        "arm64_build": Build([*ARM64_ARGS, "--quiet"], after=("arm64_os",)),
        # The emulated arm64 image pushed and signed: a no-op rebuild, then the push.
        "arm64_pushed": Build([*ARM64_ARGS, "--quiet"], after=("arm64_build",), prepare=_arm64_push_inputs, recheck=False),
        # The OS image and the stages before the numpy compile, twice, on two empty Podman engines
        # (test_reproducible.py): a minute's work each.
        "podman_stages_twice": Call(_podman_stages_twice, lambda summaries: None, after=("x86_build",)),
    },
    slots=os.cpu_count() or 1,
)
