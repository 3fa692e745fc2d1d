"""What a build says: its first lines for the person watching, what it made as its --json summary records it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from torchstack.base import redact
from torchstack.engines.engine import Engine
from torchstack.reports.progress import BuildView
from torchstack.request.metadata import torch_defects
from torchstack.request.plan import RELEASE_STAGE, Plan
from torchstack.request.run_settings import RunOptions


@dataclasses.dataclass
class ReleaseOutcome:
    image_id: str
    checks: str
    checks_seconds: float = 0.0
    sbom: Path | None = None
    probes: dict = dataclasses.field(default_factory=dict)
    upgraded: list[str] = dataclasses.field(default_factory=list)  # what the suites held newer than the final stage
    security: str = "not checked (no release image)"  # the release gate's answer


@dataclasses.dataclass
class Published:
    """What a build's --push sent and --sign signed, as its summary records them."""

    pushed: list = dataclasses.field(default_factory=list)  # publishing.pushing.Pushed
    signed: list = dataclasses.field(default_factory=list)  # what signing.sign says it signed
    lazy: dict | None = None  # with --lazy: {"format", "image", "index"} of the pushed image's index


def say_first(
    view: BuildView, plan: Plan, run: RunOptions, chosen: Engine, notes: list[str], base_missing: bool, why_not: str | None
) -> None:
    """What the build says before its first step: the engine, what was settled, warnings."""
    view.note(f"torchstack: engine {chosen.describe()}")
    view.note(f"torchstack: distribution {plan.distribution_note}")
    if not plan.base_is_bootstrapped:
        view.note(f"torchstack: warning: --base-image {plan.base_image}: its apt sources are its own; no security refresh or gate")
    elif plan.apt.updates:
        view.note("torchstack: Debian suites " + ", ".join(f"{s.name} ({redact.url(s.url)})" for s in plan.apt.suites))
    if plan.apt.snapshot:
        view.note(
            f"torchstack: Debian's archive as it was at {plan.apt.snapshot.timestamp} (--debian-snapshot): no fix published "
            "since is in the images" + ("; the release image's apt sources name the live suites" if plan.apt.updates else "")
        )
    if plan.base_is_bootstrapped and not plan.apt.updates:
        view.note(
            f"torchstack: warning: --no-security-updates: Debian {plan.distribution.name} as released, without its "
            "-updates and -security suites, and no release gate; the tag and labels say so"
        )
    for note in notes:
        view.note(note)
    if why_not:
        view.note(f"torchstack: not reproducible: {why_not}")
    for why in torch_defects(plan).values():
        view.note(f"torchstack: warning: {why}")
    if plan.jobs_note:
        view.note(f"torchstack: warning: {plan.jobs_note}")
    if plan.requirements:
        app = plan.requirements
        view.note(
            f"torchstack: --requirements {app.path.name}: {', '.join(app.requested) or 'nothing new'}, with "
            f"{len(app.resolved) - len(app.requested)} packages they need, resolved around the stack's pins"
        )
    if base_missing:
        how = "bootstrapping it from the Debian archive" if plan.base_is_bootstrapped else "pulling it"
        how = f"pulling it from {run.cache_from}, else {how}" if run.cache_from else how
        view.note(f"torchstack: base image {plan.base_image} is not here; {how}")


def summary(
    plan: Plan, chosen: Engine, release: ReleaseOutcome, published: Published, seconds: float, log_path: Path, reproducible: dict
) -> dict:
    """The build's summary, as --json writes it (with the stages): with what makes it again (the
    images' SOURCE_DATE_EPOCH, the archive's state, the OS image) or why this engine cannot."""
    return {
        "release_tag": plan.release_tag,
        "engine": {**chosen.release(), "url": redact.url(chosen.url), "chosen_by": chosen.why, "sizes": chosen.sizes},
        "final_image": plan.final_image if plan.stages[-1].name == RELEASE_STAGE else None,
        "image_id": release.image_id,  # what the release (or top stage's) tag was given
        "arch": plan.arch.name,
        "backend": plan.backend.name,
        "target": plan.target.name,
        "checks": release.checks,
        "checks_seconds": round(release.checks_seconds, 1),
        "security_updates": {
            "suites": [redact.url(s.line) for s in plan.apt.suites],
            "upgraded": release.upgraded,
            "gate": release.security,
        },
        "plugins": [p.requirement for p in plan.plugins],
        "probes": release.probes,
        "sbom": str(release.sbom) if release.sbom else None,
        "pushed": [{"reference": p.reference, "digest": p.digest, "layers": p.layers, "attempts": p.attempts} for p in published.pushed],
        "signed": published.signed,
        "lazy": published.lazy,
        "seconds": round(seconds, 1),
        "log": str(log_path),
        "reproducible": reproducible,
    }
