"""Running the testinfra checks under tests/image/ that apply to an image."""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass

import docker

from torchstack.errors import ToolkitError, UsageProblem
from torchstack.model import ROOT, Catalog

CHECKS = ROOT / "tests" / "image"


@dataclass(frozen=True)
class CheckOutcome:
    passed: bool
    summary: str


def stage_lineage(catalog: Catalog, stage: str) -> list[str]:
    """The stage and its ancestors, base first: checks for a parent also run against its children."""
    names = []
    current: str | None = stage
    while current is not None:
        names.insert(0, current)
        current = catalog.stage(current).parent
    return names


def run_checks(
    client: docker.DockerClient,
    catalog: Catalog,
    image: str,
    backend: str | None = None,
    stage: str | None = None,
    quiet: bool = False,
) -> CheckOutcome:
    try:
        labels = client.images.get(image).labels or {}
    except docker.errors.ImageNotFound:
        raise ToolkitError(f"image {image} is not in the engine") from None
    stage = stage or labels.get("io.torchstack.stage") or "final"
    if stage not in [s.name for s in catalog.stages]:
        raise UsageProblem(f"--stage {stage!r}: valid: {', '.join(s.name for s in catalog.stages)}")
    backend = backend or labels.get("io.torchstack.backend")
    if backend is not None and backend not in catalog.backends:
        raise UsageProblem(f"--backend {backend!r}: valid: {', '.join(sorted(catalog.backends))}")
    folders = [str(CHECKS / name) for name in stage_lineage(catalog, stage) if (CHECKS / name).is_dir()]
    command = [
        sys.executable, "-m", "pytest", *folders, "--rootdir", str(ROOT), "-p", "no:cacheprovider",
        "--image", image, "--stage", stage, "-rfs", "--tb=short", "--no-header", "-q",
    ]  # fmt: skip
    if backend:
        command += ["--backend", backend]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    output = result.stdout or ""
    if not quiet:
        print(output, end="")
    counts = re.findall(r"(\d+) (passed|failed|skipped|error)", output.splitlines()[-1] if output else "")
    summary = ", ".join(f"{n} {word}" for n, word in counts) if counts else f"pytest exit status {result.returncode}"
    if result.returncode not in (0, 1):
        raise ToolkitError(f"the checks of {image} could not run (pytest exit status {result.returncode})")
    return CheckOutcome(passed=result.returncode == 0, summary=summary)
