"""A whole build, from its sources to the release tag, given only after the checks pass."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

from torchstack.base import layout, sharing, state
from torchstack.base.errors import ChecksFailed, HostNotReady
from torchstack.build import archive, building, sources
from torchstack.build.release import CONTENT_LABEL, add_records, gate, probe, published, refresh
from torchstack.build.render import BuildSecrets
from torchstack.build.sbom import BUILD_INFO_LABEL
from torchstack.catalog.model import Catalog
from torchstack.catalog.wheels import pip_conf_text
from torchstack.engines import buildkit, connection, engine
from torchstack.engines.builders import Builder, BuildRun
from torchstack.engines.engine import Engine
from torchstack.publishing import lazy, publish, signing
from torchstack.registries import registry
from torchstack.reports.progress import BuildView, StageReport, summary_table, write_json
from torchstack.request import prerequisites, tags
from torchstack.request.metadata import torch_defects
from torchstack.request.plan import RELEASE_STAGE, Plan
from torchstack.request.run_options import RunOptions
from torchstack.run.settle import Settled
from torchstack.verify import checks


@contextlib.contextmanager
def _run_scope(client, run: RunOptions, contexts: Path) -> Iterator[BuildSecrets]:
    """The build's secrets, in a private temporary folder. It, the run's own build contexts (which
    may hold copies for the legacy builder) and every container the run started are removed
    however the build ends: done, failed, Ctrl-C or SIGTERM."""
    # Every temporary file of the run goes into its private folder, which the next run removes if
    # this one is killed (sharing.remove_leftovers): the secrets, the bootstrapped root file system.
    tempfile.tempdir = str(contexts)
    folder = contexts / "secrets"
    folder.mkdir(mode=0o700)
    pip_conf = None
    try:
        if run.pip_index_url:
            pip_conf = folder / "pip.conf"
            pip_conf.write_text(pip_conf_text(run.pip_index_url))
        yield BuildSecrets(ca_bundle=run.ca_bundle, pip_conf=pip_conf)
    finally:
        tempfile.tempdir = None
        shutil.rmtree(contexts, ignore_errors=True)
        sharing.remove_containers(client)


@dataclasses.dataclass
class _Release:
    image_id: str
    checks: str
    checks_seconds: float = 0.0
    sbom: Path | None = None
    probes: dict = dataclasses.field(default_factory=dict)
    upgraded: list[str] = dataclasses.field(default_factory=list)  # what the suites held newer than the final stage
    security: str = "not checked (no release image)"  # the release gate's answer


def _check_and_tag(build: BuildRun, catalog: Catalog, plan: Plan, run: RunOptions, view: BuildView) -> _Release:
    """The top stage's image (the release stage's: made current, with its records), checked,
    then given its tag: never before its checks and the security gate pass."""
    top, client = plan.stages[-1], build.client
    checked, sbom_path, upgrades = top.image, None, []
    if top.name == RELEASE_STAGE:
        refreshed, upgrades = refresh(build, plan, top.image)
        checked, sbom_path = add_records(build, plan, refreshed)
    done = _Release(
        image_id=client.images.get(checked).id, checks="not run (--no-test)", sbom=sbom_path, upgraded=[str(u) for u in upgrades]
    )
    if not run.no_test:
        view.note(f"torchstack: checking {top.image}" + (f" with its SBOM ({checked[:19]})" if checked != top.image else ""))
        outcome = checks.run_checks(client, build.engine, catalog, checked, backend=plan.backend.name, reuse=not run.recheck)
        if not run.quiet:
            print(outcome.output, end="")
        done.checks, done.checks_seconds = outcome.summary, outcome.seconds
        if outcome.reused:
            done.checks += " (earlier, on this same image ID with the same checks; --recheck runs them again)"
            view.note(f"torchstack: checks passed earlier on this image ID: {outcome.summary}")
        if not outcome.passed:
            which = f": {', '.join(outcome.failed)}" if outcome.failed else ""
            raise ChecksFailed(f"checks of {top.image} failed ({outcome.summary}{which}); the release tag was not applied")
        if top.name == RELEASE_STAGE:
            done.probes = probe(client, plan, checked)
            for answer in done.probes.values():
                view.note(f"torchstack: on this machine: {answer['says']}")
    if top.name == RELEASE_STAGE:
        done.security = gate(client, plan, checked)
        view.note(f"torchstack: security updates: {done.security}")
    repository, _, tag = plan.top_image.rpartition(":")
    client.images.get(checked).tag(repository, tag)
    return done


def _say_first(view: BuildView, plan: Plan, run: RunOptions, chosen, notes: list[str], base_missing: bool, why_not: str | None) -> None:
    """What the build says before its first step: the engine, what was settled, warnings."""
    view.note(f"torchstack: engine {chosen.describe()}")
    view.note(f"torchstack: distribution {plan.distribution_note}")
    if not plan.base_is_bootstrapped:
        view.note(f"torchstack: warning: --base-image {plan.base_image}: its apt sources are its own; no security refresh or gate")
    elif plan.apt.updates:
        view.note("torchstack: Debian suites " + ", ".join(f"{s.name} ({s.url})" for s in plan.apt.suites))
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


def _summary(plan: Plan, chosen, release: _Release, published: _Published, seconds: float, log_path: Path, reproducible: dict) -> dict:
    """The build's summary, as --json writes it (with the stages): with what makes it again (the
    images' SOURCE_DATE_EPOCH, the archive's state, the OS image) or why this engine cannot."""
    return {
        "release_tag": plan.release_tag,
        "engine": {**chosen.release(), "url": chosen.url, "chosen_by": chosen.why, "sizes": chosen.sizes},
        "final_image": plan.final_image if plan.stages[-1].name == RELEASE_STAGE else None,
        "image_id": release.image_id,  # what the release (or top stage's) tag was given
        "arch": plan.arch.name,
        "backend": plan.backend.name,
        "target": plan.target.name,
        "checks": release.checks,
        "checks_seconds": round(release.checks_seconds, 1),
        "security_updates": {"suites": [s.line for s in plan.apt.suites], "upgraded": release.upgraded, "gate": release.security},
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


@dataclasses.dataclass
class _Published:
    """What a build's --push sent and --sign signed, as its summary records them."""

    pushed: list = dataclasses.field(default_factory=list)  # publish.Pushed
    signed: list = dataclasses.field(default_factory=list)  # what signing.sign says it signed
    lazy: dict | None = None  # with --lazy: {"format", "image", "index"} of the pushed image's index


def _publish(build: BuildRun, plan: Plan, run: RunOptions, pushes: list, release: _Release, began: datetime, record: dict) -> _Published:
    """The pushes (each: the image's ID, its name in the registry, its local name), then with --sign
    the pushed release image signed, its SBOM and provenance attested. The release tag moves to each
    new image, and a dated tag (TAG-YYYYMMDDHHMM) names it for good; a release the registry already
    holds under its tag (a scheduled rebuild that changed nothing) is neither pushed nor signed
    again. --compression zstd applies to the release image; the stages stay gzip, for the engines
    that take them as --cache-from (Docker 20.10 pulls no zstd)."""
    client, chosen, note = build.client, build.engine, build.note
    zstd = run.compression == "zstd"
    if pushes and plan.stages[-1].name == RELEASE_STAGE:
        source, remote, name = pushes[-1]
        if published(remote, client.images.get(release.image_id).labels.get(CONTENT_LABEL)):
            note(
                f"torchstack: {remote} already holds this release: the same records and packages at the same versions; "
                "nothing new to push or sign"
            )
            done = _Published([publish.push(client, source, there, note, chosen) for source, there, _ in pushes[:-1]])
            return _lazy_index(run, remote, None, note, done)
        pushes = [*pushes[:-1], (source, f"{remote}-{began:%Y%m%d%H%M}", name), (source, remote, name)]
    pushed = [publish.push(client, source, remote, note, chosen, zstd and name == plan.top_image) for source, remote, name in pushes]
    for each in pushed:
        layers = f", {each.layers} layers, {each.already_there} already there" if each.layers else ""
        note(f"torchstack: pushed {each.reference} ({each.digest}{layers})")
    done = _Published(pushed)
    if not run.sign:
        return _lazy_index(run, pushed[-1].reference, pushed[-1].digest, note, done)
    info = json.loads(client.images.get(release.image_id).labels[BUILD_INFO_LABEL])
    signed = signing.sign_release(
        plan,
        info,
        pushed,
        tags.check_registry(run.registry),
        run.sign,
        release.sbom,
        record,
        began,
    )
    note(f"torchstack: signed {signed['reference']}, with its SBOM and provenance attested (cosign, no transparency log)")
    done.signed.append(signed)
    return _lazy_index(run, pushed[-1].reference, pushed[-1].digest, note, done)


def _by_id(pushes: list, plan: Plan, reports: list[StageReport], record: dict, release: _Release) -> list[tuple[str, str, str]]:
    """Each push (local name, name in the registry) with the ID this run made or took the image as,
    first: an image goes by that ID, not by what its name names by then, because another run on the
    engine may have given a stage's name its own image meanwhile (the same steps, without the cache
    record --push-stages gives it)."""
    made = {plan.base_image: record["base_image_id"], **{r.image: r.image_id for r in reports if r.image_id}}
    made[plan.top_image] = release.image_id
    return [(made.get(local, local), remote, local) for local, remote in pushes]


def _lazy_index(run: RunOptions, remote: str, digest: str | None, note, done: _Published) -> _Published:
    """With --lazy: the SOCI index of the pushed top image (`remote`, at `digest`), made and pushed
    where the registry holds none for it yet (lazy.py), and signed with --sign's key: a lazy node
    reads the image's files through it. A rebuild that changed nothing finds the one it made."""
    if not run.lazy:
        return done
    ref = registry.parse(remote)
    where = registry.Registry(ref.host)
    digest = digest or where.manifest(ref)[0]
    pinned = f"{ref.name}@{digest}"
    found = lazy.indexes(where, ref.repository, digest)
    if found:
        note(f"torchstack: {pinned} has a SOCI index already ({found[-1]}): nothing new to index")
        index = found[-1]
    else:
        try:
            index = lazy.publish(pinned, note)
        except lazy.IndexFailed as exc:
            raise lazy.IndexFailed(
                f"{exc}; {pinned} is published without a SOCI index (nodes pull it whole): "
                "the same command again makes the index, and does not push or sign the release again"
            ) from None
        if run.sign:
            done.signed.append(signing.sign(f"{ref.name}@{index}", run.sign, None, None))
            note(f"torchstack: signed the SOCI index {index}")
    done.lazy = {"format": run.lazy, "image": pinned, "index": index}
    return done


def _ccache_mover(plan: Plan, run: RunOptions, base: str):
    """With --ccache-dir, moves BuildKit's compiler cache between that folder and the cache mount ("in", "out")."""
    if not run.ccache_dir:
        return None
    return functools.partial(
        buildkit.move_cache,
        folder=run.ccache_dir,
        image=base,
        platform=plan.platform,
        cache_id=layout.CCACHE_ID.format(arch=plan.arch.name),
        mount=layout.CCACHE_DIR,
        builder=run.buildx_builder,
    )


def _builder(client, chosen: Engine, plan: Plan, run: RunOptions) -> Builder:
    """The plan's builder on the engine as it answered; refused in one line where the engine is too old
    to build, or the `docker` command here cannot drive it (BuildKit's builds and the checks go through it)."""
    builder = chosen.builder(client, plan.builder, run.buildx_builder)
    refused = chosen.too_old_to_build()
    if not refused and (builder.drives_the_cli or not run.no_test):
        refused = chosen.cli_refused()
    if refused:
        raise HostNotReady(refused)
    return builder


def run_build(catalog: Catalog, settled: Settled) -> Plan:
    """Carry out a settled build (settle.py): what only the engine and the host can say is checked
    here, before any stage is built."""
    plan, run, pushes = settled.plan, settled.run, list(settled.pushes)
    client, chosen = connection.connect(connection.choose(run.engine))
    chosen.refuse(run.engine_refusals(plan.builder))
    builder = _builder(client, chosen, plan, run)
    cleaned = sharing.sweep(client, state.state_dir() / "contexts")
    base_missing = not engine.image_exists(client, plan.base_image)
    prerequisites.require(plan, bootstrap=base_missing and plan.base_is_bootstrapped)
    record = {  # what makes the build again (reproducible.py), with the OS image's ID once it is here
        "source_date_epoch": plan.source_date_epoch,
        "archive": archive.require_suites(plan.apt) if plan.base_is_bootstrapped else [],
        "debian_snapshot": plan.apt.snapshot.timestamp if plan.apt.snapshot else None,
        "why_not": builder.why_not_reproducible(),
        "engine": chosen.release(),  # the same steps make other layers on another release or image store
    }
    cpu_notes = prerequisites.require_cpu_for_checks(plan, checks=not run.no_test)
    source_files = sources.fetch_plan_sources(plan, run.source_mirror)

    logs = state.state_dir() / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log_path = logs / f"{plan.release_tag}-{datetime.now(timezone.utc):%Y%m%d-%H%M%S}-{os.getpid()}.log"
    reports = [StageReport(stage=s.name, image=s.image, tags=[s.image]) for s in plan.stages]
    contexts = sharing.private_folder(state.state_dir() / "contexts", plan.release_tag)
    started, began = time.monotonic(), datetime.now(timezone.utc)

    with _run_scope(client, run, contexts) as secrets, BuildView(reports, log_path, run.quiet) as view:
        build = BuildRun(builder, contexts, log_path, view.note)
        _say_first(view, plan, run, chosen, [*cleaned, *settled.notes, *cpu_notes], base_missing, record["why_not"])
        with building.lock(chosen, plan.base_image, view):
            base = building.base_image(build, plan, run)
        record["base_image_id"] = client.images.get(base).id
        view.note(f"torchstack: base image {base}")
        ccache = _ccache_mover(plan, run, base)
        if ccache:
            ccache("in")
            view.note(f"torchstack: compiler cache loaded from {run.ccache_dir}")
        building.build_stages(build, plan, run, reports, view, source_files, secrets)
        if ccache:
            ccache("out")
            view.note(f"torchstack: compiler cache saved to {run.ccache_dir}")
        # Equal runs at once: the second waits, then finds the same image and the first's checks.
        with building.lock(chosen, f"{plan.top_image} release", view):
            release = _check_and_tag(build, catalog, plan, run, view)
        reports[-1].tags.append(plan.top_image)
        pushes = _by_id(pushes, plan, reports, record, release)
        published = _publish(build, plan, run, pushes, release, began, record) if pushes else _Published()

    summary = _summary(plan, chosen, release, published, time.monotonic() - started, log_path, record)
    if run.json_file:
        write_json(run.json_file, summary, reports)
    if not run.quiet:
        view.console.print(summary_table(reports, chosen.sizes))
        took = f" in {release.checks_seconds:.0f} s" if release.checks_seconds else ""
        view.console.print(f"checks: {release.checks}{took}", highlight=False)
    print(plan.top_image)
    return plan
