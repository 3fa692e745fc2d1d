"""A whole build, from its sources to the release tag, given only after the checks pass."""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

from torchstack.base import layout, sharing, state
from torchstack.base.errors import ChecksFailed, HostNotReady
from torchstack.catalog.model import Catalog
from torchstack.catalog.wheels import pip_conf_text
from torchstack.engines import buildkit, connection
from torchstack.engines.engine import Builder, BuildRun, Engine
from torchstack.making import archive, building, sources
from torchstack.making.release import add_records, gate, probe, refresh
from torchstack.making.render import BuildSecrets
from torchstack.publishing import releases
from torchstack.reports import build_report
from torchstack.reports.build_report import Published, ReleaseOutcome
from torchstack.reports.progress import BuildView, StageReport, summary_table, write_json
from torchstack.request import prerequisites
from torchstack.request.plan import RELEASE_STAGE, Plan
from torchstack.request.run_settings import RunOptions
from torchstack.run.settle import Settled
from torchstack.verify import checks


@contextlib.contextmanager
def _run_scope(chosen: Engine, run: RunOptions, contexts: Path) -> Iterator[BuildSecrets]:
    """The build's secrets, in the run's private folder (`contexts`). It, with the run's build
    contexts (which may hold copies for the legacy builder) and its large work files (the
    bootstrapped root file system, the compiler cache's copy, a zstd export: each made there by
    name), and every container the run started are removed however the build ends: done, failed,
    Ctrl-C or SIGTERM; the next run removes them if this one is killed (sharing.remove_leftovers)."""
    folder = contexts / "secrets"
    folder.mkdir(mode=0o700)
    pip_conf = None
    try:
        if run.pip_index_url:
            pip_conf = folder / "pip.conf"
            pip_conf.write_text(pip_conf_text(run.pip_index_url))
        yield BuildSecrets(ca_bundle=run.ca_bundle, pip_conf=pip_conf)
    finally:
        shutil.rmtree(contexts, ignore_errors=True)
        sharing.remove_containers(chosen)


def _check_and_tag(build: BuildRun, catalog: Catalog, plan: Plan, run: RunOptions, view: BuildView) -> ReleaseOutcome:
    """The top stage's image (the release stage's: made current, with its records), checked,
    then given its tag: never before its checks and the security gate pass."""
    top, engine = plan.stages[-1], build.engine
    checked, sbom_path, upgrades = top.image, None, []
    if top.name == RELEASE_STAGE:
        refreshed, upgrades = refresh(build, plan, top.image)
        checked, sbom_path = add_records(build, plan, refreshed)
    done = ReleaseOutcome(
        image_id=engine.image(checked).id, checks="not run (--no-test)", sbom=sbom_path, upgraded=[str(u) for u in upgrades]
    )
    if not run.no_test:
        view.note(f"torchstack: checking {top.image}" + (f" with its SBOM ({checked[:19]})" if checked != top.image else ""))
        outcome = checks.run_checks(engine, catalog, checked, backend=plan.backend.name, reuse=not run.recheck)
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
            done.probes = probe(engine, plan, checked)
            for answer in done.probes.values():
                view.note(f"torchstack: on this machine: {answer['says']}")
    if top.name == RELEASE_STAGE:
        done.security = gate(engine, plan, checked)
        view.note(f"torchstack: security updates: {done.security}")
    engine.tag(checked, plan.top_image)
    return done


def _ccache_mover(plan: Plan, run: RunOptions, base: str, scratch: Path):
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
        scratch=scratch,
    )


def _builder(chosen: Engine, plan: Plan, run: RunOptions) -> Builder:
    """The plan's builder on the engine as it answered; refused in one line where the engine is too old
    to build, or the `docker` command here cannot drive it (BuildKit's builds and the checks go through it)."""
    builder = chosen.builder(plan.builder, run.buildx_builder)
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
    chosen = connection.connect(settled.engine)
    if connection.another_kind(settled.engine, chosen):  # the engine as it answered: its refusals, not yet run
        chosen.refuse(run.engine_refusals(plan.builder))
        chosen.refuse_index_login(plan.builder, run.pip_index_url)
    builder = _builder(chosen, plan, run)
    cleaned = sharing.sweep(chosen, state.state_dir() / "contexts")
    base_missing = not chosen.has_image(plan.base_image)
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

    with _run_scope(chosen, run, contexts) as secrets, BuildView(reports, log_path, run.quiet) as view:
        build = BuildRun(builder, contexts, log_path, view.note)
        build_report.say_first(view, plan, run, chosen, [*cleaned, *settled.notes, *cpu_notes], base_missing, record["why_not"])
        with building.lock(chosen, plan.base_image, view):
            base = building.base_image(build, plan, run)
        record["base_image_id"] = chosen.image(base).id
        view.note(f"torchstack: base image {base}")
        ccache = _ccache_mover(plan, run, base, contexts)
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
        pushes = releases.by_id(pushes, plan, reports, record, release)
        published = releases.publish_release(build, plan, run, pushes, release, began, record) if pushes else Published()

    summary = build_report.summary(plan, chosen, release, published, time.monotonic() - started, log_path, record)
    if run.json_file:
        write_json(run.json_file, summary, reports)
    if not run.quiet:
        view.console.print(summary_table(reports, chosen.sizes))
        took = f" in {release.checks_seconds:.0f} s" if release.checks_seconds else ""
        view.console.print(f"checks: {release.checks}{took}", highlight=False)
    print(plan.top_image)
    return plan
