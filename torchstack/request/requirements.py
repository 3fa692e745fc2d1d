"""A team's own packages in the final image (--requirements FILE), resolved before any build around what the image holds.

The file is pip's requirements format and pip reads it (its --hash options are honoured: pip's
hash-checking mode). Everything the stack installs (torch, numpy, torch's dependencies at their
pins, plugins and domain libraries) is held as a constraint that nothing in it may move. pip
resolves it on the build host first, for the image's platforms and Python (`pip install --dry-run
--report`), so a conflict is one line before the long build; the exact versions it chose are the
build's own constraints, so the image holds what was resolved.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from packaging.utils import canonicalize_name

from torchstack.base import redact
from torchstack.base.errors import UsageProblem
from torchstack.catalog.wheels import pip_index_env, torch_version_of
from torchstack.request.plan import AppRequirements, Plan

# The oldest glibc a manylinux wheel names (manylinux2014 is 2.17).
OLDEST_MANYLINUX = 17


def held(plan: Plan) -> dict[str, str]:
    """What the stack installs, by canonical name, at the versions nothing may move."""
    pins = dict(pin.split("==", 1) for pin in plan.payload.python_constraints)
    pins.update(p.requirement.split("==", 1) for p in plan.plugins)
    numpy = plan.component("numpy")
    if numpy is not None:
        pins["numpy"] = numpy.version
    pins["torch"] = torch_version_of(plan.torch_wheel_file) if plan.torch_wheel_file else plan.torch_version
    return {canonicalize_name(name): version for name, version in pins.items()}


def platforms(plan: Plan) -> list[str]:
    """The manylinux platform tags the image's glibc runs, newest first (pip's --platform)."""
    newest = int(plan.distribution.glibc.split(".")[1])
    arch = plan.arch.name
    return [f"manylinux_2_{minor}_{arch}" for minor in range(newest, OLDEST_MANYLINUX - 1, -1)] + [f"manylinux2014_{arch}"]


def resolve(plan: Plan, index_url: str | None = None) -> AppRequirements:
    """pip's resolution of the file for the image, the stack held: one line if it cannot be done."""
    app = plan.requirements
    pins = held(plan)
    with tempfile.TemporaryDirectory(prefix="torchstack-requirements-") as scratch:
        constraints = Path(scratch) / "held.txt"
        constraints.write_text("".join(f"{name}=={version}\n" for name, version in sorted(pins.items())))
        report = Path(scratch) / "report.json"
        command = [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--ignore-installed",
            "--only-binary=:all:",
            "--target",
            str(Path(scratch) / "target"),
            "--report",
            str(report),
            "--python-version",
            plan.distribution.python,
            *(f"--platform={tag}" for tag in platforms(plan)),
            "--constraint",
            str(constraints),
            "--requirement",
            str(app.path),
        ]
        if plan.torch_wheel_file:  # torch itself, not an index's build of the same version, if a requirement needs it
            command += ["--find-links", str(plan.torch_wheel_file.parent)]
        result = subprocess.run(command, capture_output=True, text=True, env=pip_index_env(index_url))
        if result.returncode != 0:
            raise UsageProblem(f"--requirements {app.path}: {redact.url(conflict(result.stdout + result.stderr, pins))}")
        installs = json.loads(report.read_text())["install"]
    added = [
        (f"{i['metadata']['name']}=={i['metadata']['version']}", i.get("requested", False))
        for i in installs
        if canonicalize_name(i["metadata"]["name"]) not in pins
    ]
    return AppRequirements(app.path, app.sha256, tuple(pin for pin, named in added if named), tuple(pin for pin, _ in added))


def conflict(output: str, pins: dict[str, str]) -> str:
    """pip's failure as one line: what asks a held package for another version, or pip's own last error."""
    causes = output.partition("The conflict is caused by:")[2].split("\n\n")[0].splitlines()
    wanted, holding = [], {}
    for cause in (c.strip() for c in causes if "(constraint)" not in c):
        named = re.search(r"(?:requested|depends on) ([A-Za-z0-9][A-Za-z0-9._-]*)", cause)
        if named and canonicalize_name(named[1]) in pins:
            wanted.append(cause)
            holding[canonicalize_name(named[1])] = pins[canonicalize_name(named[1])]
    if wanted:
        held_now = ", ".join(f"{name} {version}" for name, version in holding.items())
        return f"{'; '.join(wanted)}; the image holds {held_now}, which nothing may move"
    errors = [line.removeprefix("ERROR: ") for line in output.splitlines() if line.startswith("ERROR: ")]
    return f"pip cannot resolve it for the image: {errors[-1] if errors else 'no output'}"
