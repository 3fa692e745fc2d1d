"""What a release image was built from, as a SLSA provenance (v1) predicate that `--sign` attests."""

from __future__ import annotations

from datetime import datetime

from torchstack.making.sources import sha256_of
from torchstack.request.metadata import applied_patches, toolkit_revision
from torchstack.request.plan import Plan

# SLSA v1's predicate type, as cosign's `--type slsaprovenance1` names it in the statement.
PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
BUILD_TYPE = "urn:torchstack:build:v1"
BUILDER_ID = "urn:torchstack:build.py"


def inputs(plan: Plan, base_id: str, archive_state: list[dict] = ()) -> list[dict]:
    """Every input of the build with its sha256, as SLSA's resolvedDependencies: the OS image (its
    image ID), each Debian suite's signed index as the build read it (the archive's state), each
    source compiled and its patches, the torch wheel, each plugin wheel, the --requirements file."""
    found = [{"name": plan.base_image, "digest": {"sha256": base_id.removeprefix("sha256:")}}]
    found += [
        {"name": f"debian/{s['suite']}/InRelease", "uri": s["uri"], "digest": {"sha256": s["sha256"]}, "annotations": {"date": s["date"]}}
        for s in archive_state
    ]
    for component in plan.components:
        if component.method == "source" and component.source is not None:
            found.append(
                {
                    "name": f"{component.name}-{component.version}",
                    "uri": component.source.url,
                    "digest": {"sha256": component.source.sha256},
                }
            )
            found += [
                {"name": f"patches/{component.name}/{p['name']}", "digest": {"sha256": p["sha256"]}}
                for p in applied_patches(component.name)
            ]
    if plan.torch_wheel_file is not None:
        found.append({"name": plan.torch_wheel_file.name, "digest": {"sha256": sha256_of(plan.torch_wheel_file)}})
    found += [{"name": p.wheel.path.name, "digest": {"sha256": p.wheel.sha256}} for p in plan.plugins if p.wheel]
    if plan.requirements is not None:
        found.append({"name": plan.requirements.path.name, "digest": {"sha256": plan.requirements.sha256}})
    return found


def predicate(plan: Plan, info: dict, record: dict, started: datetime, finished: datetime) -> dict:
    """The provenance predicate of the release image `plan` describes. externalParameters is what
    was asked for, with the images' SOURCE_DATE_EPOCH; internalParameters the image's whole
    build-info `info`, as its label holds it (the versions read from the image: what `verify`
    compares the image against); runDetails when and how it ran. `record` is the build's record of
    what makes it again (pipeline.run_build): the OS image's ID, the archive's state, the engine
    (kind, release, image store: another store makes other layers of the same steps), and why_not
    where this engine's images cannot be made again bit for bit (engine.Builder.why_not_reproducible)."""
    why_not = record.get("why_not")
    engine = record.get("engine") or {}
    return {
        "buildDefinition": {
            "buildType": BUILD_TYPE,
            "externalParameters": {
                "release_tag": plan.release_tag,
                "backend": plan.backend.name,
                "target": plan.target.name,
                "arch": plan.arch.name,
                "distribution": plan.distribution.name,
                "torch_version": plan.torch_version,
                "methods": {c.name: c.method for c in plan.components},
                "runtime": plan.runtime,
                "plugins": [p.requirement for p in plan.plugins],
                "requirements": list(plan.requirements.requested) if plan.requirements else [],
                "source_date_epoch": plan.source_date_epoch,
                "debian_snapshot": plan.apt.snapshot.timestamp if plan.apt.snapshot else None,
            },
            "internalParameters": {"build_info": info, "reproducible": {"claimed": why_not is None, "why_not": why_not}},
            "resolvedDependencies": inputs(plan, record["base_image_id"], record.get("archive", ())),
        },
        "runDetails": {
            "builder": {
                "id": BUILDER_ID,
                "version": {
                    "torchstack": toolkit_revision()["revision"] or toolkit_revision()["version"],
                    # SLSA's builder.version maps names to strings: the engine's kind and release, its image store.
                    "engine": f"{engine.get('kind', '')} {engine.get('version', '')}".strip(),
                    "image_store": engine.get("store", ""),
                    "builder": plan.builder,
                },
            },
            "metadata": {"startedOn": started.isoformat(timespec="seconds"), "finishedOn": finished.isoformat(timespec="seconds")},
        },
    }
