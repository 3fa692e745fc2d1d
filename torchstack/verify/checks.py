"""Running the testinfra checks under tests/image/ that apply to an image, once per image ID."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from torchstack.base import sharing, state
from torchstack.base.errors import ToolkitError, UsageProblem
from torchstack.catalog.model import PACKAGE, ROOT, Catalog
from torchstack.engines.engine import Engine, NoSuchImage

CHECKS = ROOT / "tests" / "image"
# What decides a check's outcome besides the image: the checks, the toolkit they import, its data,
# the test tools, and the CPU they run on (the CPU guard and the examples' kernels depend on it).
CHECK_INPUTS = (CHECKS, PACKAGE, ROOT / "tests" / "conftest.py")
# pytest's exit statuses for a command line it refuses and for one that selects nothing
USAGE_ERROR, NO_TESTS_COLLECTED = 4, 5


@dataclass(frozen=True)
class CheckOutcome:
    passed: bool
    summary: str
    reused: bool = False
    seconds: float = 0.0  # how long the run took (none for a pass reused from an earlier run)
    failed: tuple[str, ...] = ()  # the checks that failed, by name
    output: str = ""  # pytest's report (none for a reused pass)


def checks_fingerprint(stage: str, backend: str | None, engine_kind: str = "docker") -> str:
    """A digest of everything besides the image that decides the checks' outcome (the engine
    that runs the containers among it)."""
    digest = hashlib.sha256(f"{stage}\0{backend}\0{platform.machine()}\0{engine_kind}\0".encode())
    for root in CHECK_INPUTS:
        files = sorted(root.rglob("*")) if root.is_dir() else [root]
        for path in files:
            if path.is_file() and "__pycache__" not in path.parts:
                digest.update(str(path.relative_to(root.parent)).encode() + b"\0" + path.read_bytes())
    for package in ("pytest", "pytest-testinfra", "docker"):
        digest.update(f"{package}={metadata.version(package)}\0".encode())
    with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as cpuinfo:
        flags = {line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith(("flags", "Features", "features"))}
    digest.update(" ".join(sorted(flags)).encode())
    return digest.hexdigest()


def _record_path(image_id: str) -> Path:
    return state.state_dir() / "checks" / f"{image_id.removeprefix('sha256:')}.json"


def earlier_pass(image_id: str, fingerprint: str) -> str | None:
    """The summary of checks that passed on this image ID with these inputs, if any did."""
    try:
        records = json.loads(_record_path(image_id).read_text())
    except (OSError, ValueError):
        return None
    found = records.get(fingerprint) if isinstance(records, dict) else None
    return found if isinstance(found, str) else None


def remember_pass(image_id: str, fingerprint: str, summary: str) -> None:
    """Record a pass; written whole and renamed into place, so a crash leaves no torn record."""
    path = _record_path(image_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    records = {}
    try:
        records = json.loads(path.read_text())
    except (OSError, ValueError):
        pass
    records = {**(records if isinstance(records, dict) else {}), fingerprint: summary}
    partial = path.with_suffix(f".{os.getpid()}.tmp")
    partial.write_text(json.dumps(records, indent=1) + "\n")
    partial.replace(path)


def stage_lineage(catalog: Catalog, stage: str) -> list[str]:
    """The stage and its ancestors, base first: checks for a parent also run against its children."""
    names = []
    current: str | None = stage
    while current is not None:
        names.insert(0, current)
        current = catalog.stage(current).parent
    return names


def _summary(result: subprocess.CompletedProcess, output: str, select: str | None, stage: str) -> str:
    """pytest's counts ("36 passed, 1 xfailed"); a -k that selects nothing, or that pytest refuses, is a usage error."""
    counts = re.findall(r"(\d+) (passed|failed|xfailed|skipped|error|deselected)", output.splitlines()[-1] if output else "")
    if select and result.returncode == NO_TESTS_COLLECTED:
        raise UsageProblem(f"-k {select!r} selects none of the checks of a {stage} image")
    if select and result.returncode == USAGE_ERROR:
        said = [line for line in result.stderr.splitlines() if line.startswith("ERROR:")]
        raise UsageProblem(f"-k {select!r}: {said[-1].removeprefix('ERROR: ') if said else 'pytest refuses it'}")
    return ", ".join(f"{n} {word}" for n, word in counts) if counts else f"pytest exit status {result.returncode}"


def _stage_and_backend(catalog: Catalog, labels: dict, stage: str | None, backend: str | None) -> tuple[str, str | None]:
    """The stage and backend to check the image as: as given, else as its labels say (a stage: final)."""
    stage = stage or labels.get("io.torchstack.stage") or "final"
    if stage not in [s.name for s in catalog.stages]:
        raise UsageProblem(f"--stage {stage!r}: valid: {', '.join(s.name for s in catalog.stages)}")
    backend = backend or labels.get("io.torchstack.backend")
    if backend is not None and backend not in catalog.backends:
        raise UsageProblem(f"--backend {backend!r}: valid: {', '.join(sorted(catalog.backends))}")
    return stage, backend


def _pytest_command(folders: list[str], image: str, stage: str, cli: str, backend: str | None, select: str | None) -> list[str]:
    """The pytest run of the check folders against the image (tests/image/conftest.py reads its options)."""
    command = [sys.executable, "-m", "pytest", *folders, "--rootdir", str(ROOT), "-p", "no:cacheprovider"]
    command += ["--image", image, "--stage", stage, "--engine", cli, "-rfsx", "--tb=short", "--no-header", "-q"]
    if backend:
        command += ["--backend", backend]
    if select:
        command += ["-k", select]
    return command


def run_checks(
    engine: Engine,
    catalog: Catalog,
    image: str,
    backend: str | None = None,
    stage: str | None = None,
    reuse: bool = False,
    select: str | None = None,
) -> CheckOutcome:
    """Run the checks for the image's stage; with `reuse`, a pass already recorded for the same
    image ID and the same check inputs (`checks_fingerprint`) stands instead of a new run. With
    `select` (a pytest -k expression) only the checks it names run, and a pass is not recorded:
    it vouches for those checks only."""
    try:
        found = engine.image(image)
    except NoSuchImage:
        raise ToolkitError(f"image {image} is not in the engine") from None
    labels = found.labels
    stage, backend = _stage_and_backend(catalog, labels, stage, backend)
    fingerprint = checks_fingerprint(stage, backend, engine.kind)
    if reuse and not select and (summary := earlier_pass(found.id, fingerprint)):
        return CheckOutcome(passed=True, summary=summary, reused=True)
    folders = [str(CHECKS / name) for name in stage_lineage(catalog, stage) if (CHECKS / name).is_dir()]
    command = _pytest_command(folders, image, stage, engine.cli, backend, select)
    # The checks reach the same engine: the SDK through DOCKER_HOST; testinfra through the engine's
    # CLI, podman's as a client of the same service (CONTAINER_HOST).
    # The containers they start carry this run's owner: whatever they leave, however the run ends
    # (Ctrl-C, SIGTERM, a check that hangs), is removed here.
    reach = engine.reached_by()
    started = time.monotonic()
    try:
        result = subprocess.run(
            command,
            cwd=ROOT,
            capture_output=True,
            text=True,
            preexec_fn=sharing.die_with_parent,
            env={**os.environ, **reach, sharing.ENV: sharing.owner()},
        )
    finally:
        sharing.remove_containers(engine)
    seconds = time.monotonic() - started
    output = result.stdout or ""
    summary = _summary(result, output, select, stage)
    if result.returncode not in (0, 1):
        raise ToolkitError(f"the checks of {image} could not run (pytest exit status {result.returncode})")
    if result.returncode == 0 and not select:
        remember_pass(found.id, fingerprint, summary)
    failed = tuple(line.split()[1].rpartition("::")[2] for line in output.splitlines() if line.startswith(("FAILED ", "ERROR ")))
    return CheckOutcome(passed=result.returncode == 0, summary=summary, seconds=seconds, failed=failed, output=output)
