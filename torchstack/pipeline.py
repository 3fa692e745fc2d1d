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

from torchstack import archive, bootstrap, checks, connection, engine, layout, prerequisites, publish, requirements, sharing, signing, sources
from torchstack.errors import ChecksFailed, ToolkitError, UsageProblem
from torchstack.model import Catalog
from torchstack.metadata import stage_labels, torch_defects
from torchstack.plan import RELEASE_STAGE, Plan, Request, StagePlan
from torchstack.planner import make_plan
from torchstack.progress import BuildView, StageReport, summary_table, write_json
from torchstack.release import CONTENT_LABEL, add_records, gate, probe, published, refresh
from torchstack.render import BuildSecrets, assemble_context
from torchstack.sbom import BUILD_INFO_LABEL
from torchstack.wheels import download_from_index, download_wheel, pip_conf_text


class Interrupted(ToolkitError):
    """Ctrl-C (exit 130) or SIGTERM (exit 143) during a build."""

    def __init__(self, message: str, exit_code: int = 130):
        super().__init__(message)
        self.exit_code = exit_code


def resolve_wheel(catalog: Catalog, request: Request, plan: Plan) -> tuple[Request, Plan, list[str]]:
    """A torch wheel named by URL or index is downloaded now, and the plan made again from the
    file; with a line saying where an index's wheel came from."""
    spec = plan.torch_wheel
    if spec is None or spec.kind in ("file", "dir"):
        return request, plan, []
    notes = []
    dest = sources.state_dir() / "wheels"
    if spec.kind == "index":
        index = spec.where or catalog.components["torch"].alternatives["wheel"].index
        path, origin = download_from_index(dest, plan.arch.name, plan.distribution.python, plan.torch_version, index)
        notes.append(f"torchstack: torch wheel {path.name} from {origin}")
    else:
        path = dest / spec.where.rsplit("/", 1)[-1].split("#")[0]
        if not path.is_file():
            sources.download(spec.where, path)
    request = dataclasses.replace(request, torch_wheel=str(path))
    return request, make_plan(catalog, request), notes


def resolve_plugins(catalog: Catalog, request: Request, plan: Plan, index_url: str | None = None) -> Plan:
    """Plugin wheels named NAME==VERSION (or a backend's own plugin) are downloaded now, and the
    plan made again from the files: their torch requirements are checked before any build."""
    pending = [p.requirement for p in plan.plugins if p.wheel is None]
    if not pending:
        return plan
    if request.plugin_cache is None:
        request = dataclasses.replace(request, plugin_cache=sources.state_dir() / "plugins")
    for requirement in pending:
        download_wheel(request.plugin_cache, plan.arch.name, plan.distribution.python, requirement, index_url)
    plan = make_plan(catalog, request)
    missing = [p.requirement for p in plan.plugins if p.wheel is None]
    if missing:
        raise ToolkitError(f"pip downloaded no wheel of {', '.join(missing)} for {plan.arch.name} cp{plan.distribution.python}")
    return plan


def resolve_requirements(plan: Plan, index_url: str | None = None) -> Plan:
    """--requirements resolved now for the image, with what the stack installs held: a conflict
    is one line before any build, and the build installs exactly what was resolved."""
    return dataclasses.replace(plan, requirements=requirements.resolve(plan, index_url)) if plan.requirements else plan


@contextlib.contextmanager
def _run_scope(client, options: dict, contexts: Path) -> Iterator[BuildSecrets]:
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
        if options.get("pip_index_url"):
            pip_conf = folder / "pip.conf"
            pip_conf.write_text(pip_conf_text(options["pip_index_url"]))
        yield BuildSecrets(ca_bundle=options.get("ca_bundle"), pip_conf=pip_conf)
    finally:
        tempfile.tempdir = None
        shutil.rmtree(contexts, ignore_errors=True)
        sharing.remove_containers(client)


def _pull_cache(client, plan: Plan, registry: str, name: str, note) -> str | None:
    """`name` as the --cache-from registry holds it, pulled; None (and one warning line) when the
    pull fails, and the stage builds here."""
    remote = publish.remote_name(registry, name)
    problem = engine.pull(client, remote, plan.platform)
    if problem:
        note(f"torchstack: warning: --cache-from: no {remote} ({problem}); building it here")
        return None
    note(f"torchstack: --cache-from: pulled {remote}")
    return remote


def _cache_source(client, plan: Plan, stage: StagePlan, registry: str | None, note) -> str | None:
    """With --cache-from REGISTRY, the image whose steps the legacy builder may reuse for `stage`:
    this engine's own image of it when it has one, else the registry's (under the name --push
    sends it as), pulled. Once given a source, the legacy builder reuses only the source's steps,
    and the steps of an image that came from a registry (or was built from one) are found only
    that way: so even the engine's own image is named, not left to its cache."""
    if not registry:
        return None
    if engine.image_exists(client, stage.image):
        return stage.image
    return _pull_cache(client, plan, registry, publish.pushed_as(plan, stage), note)


def _podman_stage(client, plan: Plan, stage: StagePlan, options: dict, note) -> str | None:
    """On Podman, an earlier stage whose image is here, or in the --cache-from registry, under its
    content name (metadata.stage_image: a digest of everything that goes into it) is taken as it
    is: "cached" or "pulled"; None when it is to be built (always the release stage, whose name is
    not its content, and every stage with --no-cache). Podman's builder reuses only steps it made
    itself, so this is how a Podman host takes what another host built."""
    if stage.name == RELEASE_STAGE or options.get("no_cache"):
        return None
    if engine.image_exists(client, stage.image):
        return "cached"
    if options.get("cache_from") and (remote := _pull_cache(client, plan, options["cache_from"], publish.pushed_as(plan, stage), note)):
        repository, _, tag = stage.image.rpartition(":")
        client.images.get(remote).tag(repository, tag)
        return "pulled"
    return None


def _base_image(client, plan: Plan, options: dict, view: BuildView) -> str:
    """The OS image: here already, pulled from --cache-from's registry (the very image the stages
    there were built on: one bootstrapped here would differ, and no step would match), else made
    as bootstrap.ensure_base_image makes it."""
    if plan.base_is_bootstrapped and options.get("cache_from") and not engine.image_exists(client, plan.base_image):
        remote = _pull_cache(client, plan, options["cache_from"], plan.base_image, view.note)
        if remote:
            repository, _, tag = plan.base_image.rpartition(":")
            client.images.get(remote).tag(repository, tag)
    return bootstrap.ensure_base_image(client, plan)


def _lock(chosen: connection.Engine, name: str, view: BuildView):
    """Hold `name` on the engine `chosen` among this host's runs (sharing.lock), saying so when
    this run waits. Per engine, by its API socket: another engine on this host (a second dockerd,
    Podman) keeps images of the same names in a store of its own, and builds them meanwhile."""
    return sharing.lock(sources.state_dir() / "locks", f"{chosen.url} {name}", view.note, f"building {name}")


def _build_stages(client, chosen: connection.Engine, plan: Plan, options: dict, reports: list[StageReport], view: BuildView,
                  contexts: Path, source_files: dict[str, Path], secrets: BuildSecrets, log_path: Path) -> None:
    """Build each stage of the plan in order, or take it as it is. Each under a lock among this
    host's runs (sharing.lock): equal runs at once make, and tag, the very same images."""
    for stage, report in zip(plan.stages, reports, strict=True):
        assemble_context(plan, stage, contexts / stage.name, source_files, secrets)
        progress = view.start(report)
        kind = chosen.kind
        with _lock(chosen, stage.image, view):
            taken = _podman_stage(client, plan, stage, options, view.note) if kind == "podman" else None
            if taken:
                report.status, report.cached, report.seconds = taken, True, time.monotonic() - progress.started
                report.size_bytes = engine.image_size(client, stage.image)
                continue
            try:
                result = _build_stage(client, kind, plan, stage, options, view, contexts / stage.name, secrets, progress, log_path)
            except KeyboardInterrupt as exc:
                report.status = "interrupted"
                raise Interrupted(
                    f"interrupted in stage {stage.name}: no tag points at a half-built image; "
                    "finished steps are in the engine's cache, so the next run resumes there", sharing.exit_code(exc)
                ) from None
            except ToolkitError:
                report.status = "failed"
                raise
        report.seconds = result.seconds
        report.cached = result.cached
        report.ran = list(result.ran)
        report.size_bytes = engine.image_size(client, stage.image)
        report.status = "cached" if result.cached else "built"


def _build_stage(client, kind: str, plan: Plan, stage: StagePlan, options: dict, view: BuildView, context: Path,
                 secrets: BuildSecrets, progress, log_path: Path) -> engine.BuildResult:  # fmt: skip
    labels = stage_labels(plan, stage)
    log = functools.partial(view.line, stage.name)
    if plan.builder == "buildx":
        # BuildKit asks the registry itself, and says so in its log when it lacks the image.
        cache = [publish.remote_name(options["cache_from"], publish.pushed_as(plan, stage))] if options.get("cache_from") else []
        return engine.build_image_buildx(
            context, stage.image, plan.platform, labels, options.get("no_cache", False),
            secrets.files(), log, progress, stage.name, log_path, options.get("buildx_builder"), cache,
        )  # fmt: skip
    # Podman's build API reads cache sources as buildah's own cache repositories: none given.
    cache = None if kind == "podman" else _cache_source(client, plan, stage, options.get("cache_from"), view.note)
    return engine.build_image(
        client, context, stage.image, plan.platform, labels,
        options.get("no_cache", False), log, progress, stage.name, log_path, [cache] if cache else None,
    )  # fmt: skip


@dataclasses.dataclass
class _Release:
    image_id: str
    checks: str
    checks_seconds: float = 0.0
    sbom: Path | None = None
    probes: dict = dataclasses.field(default_factory=dict)
    upgraded: list[str] = dataclasses.field(default_factory=list)  # what the suites held newer than the final stage
    security: str = "not checked (no release image)"  # the release gate's answer


def _check_and_tag(client, chosen, catalog: Catalog, plan: Plan, options: dict, view: BuildView, contexts: Path,
                   log_path: Path) -> _Release:  # fmt: skip
    """The top stage's image (the release stage's: made current, with its records), checked,
    then given its tag: never before its checks and the security gate pass."""
    top = plan.stages[-1]
    checked, sbom_path, upgrades = top.image, None, []
    if top.name == RELEASE_STAGE:
        refreshed, upgrades = refresh(client, plan, top.image, contexts / "refresh", log_path, view.note)
        checked, sbom_path = add_records(client, plan, refreshed, contexts / "sbom", log_path, view.note)
    done = _Release(image_id=client.images.get(checked).id, checks="not run (--no-test)", sbom=sbom_path,
                    upgraded=[str(u) for u in upgrades])  # fmt: skip
    if not options.get("no_test"):
        view.note(f"torchstack: checking {top.image}" + (f" with its SBOM ({checked[:19]})" if checked != top.image else ""))
        outcome = checks.run_checks(
            client, chosen, catalog, checked, backend=plan.backend.name, quiet=options.get("quiet", False),
            reuse=not options.get("recheck"),
        )  # fmt: skip
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


def _say_first(view: BuildView, plan: Plan, options: dict, chosen, notes: list[str], base_missing: bool) -> None:
    """What the build says before its first step: the engine, what was settled, warnings."""
    view.note(f"torchstack: engine {chosen.describe()}")
    view.note(f"torchstack: distribution {plan.distribution_note}")
    if not plan.base_is_bootstrapped:
        view.note(f"torchstack: warning: --base-image {plan.base_image}: its apt sources are its own; no security refresh or gate")
    elif plan.apt.updates:
        view.note("torchstack: Debian suites " + ", ".join(f"{s.name} ({s.url})" for s in plan.apt.suites))
    else:
        view.note(f"torchstack: warning: --no-security-updates: Debian {plan.distribution.name} as released, without its "
                  "-updates and -security suites, and no release gate; the tag and labels say so")
    for note in notes:
        view.note(note)
    for why in torch_defects(plan).values():
        view.note(f"torchstack: warning: {why}")
    if plan.jobs_note:
        view.note(f"torchstack: warning: {plan.jobs_note}")
    if plan.requirements:
        app = plan.requirements
        view.note(f"torchstack: --requirements {app.path.name}: {', '.join(app.requested) or 'nothing new'}, with "
                  f"{len(app.resolved) - len(app.requested)} packages they need, resolved around the stack's pins")
    if base_missing:
        how = "bootstrapping it from the Debian archive" if plan.base_is_bootstrapped else "pulling it"
        how = f"pulling it from {options['cache_from']}, else {how}" if options.get("cache_from") else how
        view.note(f"torchstack: base image {plan.base_image} is not here; {how}")


def _summary(plan: Plan, chosen, release: _Release, pushed: list, signed: list, seconds: float, log_path: Path) -> dict:
    """The build's summary, as --json writes it (with the stages)."""
    return {
        "release_tag": plan.release_tag,
        "engine": {"kind": chosen.kind, "url": chosen.url, "chosen_by": chosen.why},
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
        "pushed": [{"reference": p.reference, "digest": p.digest, "layers": p.layers, "attempts": p.attempts} for p in pushed],
        "signed": signed,
        "seconds": round(seconds, 1),
        "log": str(log_path),
    }


def _publish(client, kind: str, plan: Plan, options: dict, pushes: list, release: _Release, began: datetime, note) -> tuple[list, list]:
    """The pushes, then with --sign the pushed release image signed, its SBOM and provenance attested.
    The release tag moves to each new image, and a dated tag (TAG-YYYYMMDDHHMM) names it for good;
    a release the registry already holds under its tag (a scheduled rebuild that changed nothing)
    is neither pushed nor signed again."""
    if pushes and plan.stages[-1].name == RELEASE_STAGE:
        local, remote = pushes[-1]
        if published(remote, client.images.get(release.image_id).labels.get(CONTENT_LABEL)):
            note(f"torchstack: {remote} already holds this release: the same records and packages at the same versions; "
                 "nothing new to push or sign")  # fmt: skip
            return [publish.push(client, name, there, note, kind) for name, there in pushes[:-1]], []
        pushes = [*pushes[:-1], (local, f"{remote}-{began:%Y%m%d%H%M}"), (local, remote)]
    pushed = [publish.push(client, local, remote, note, kind) for local, remote in pushes]
    for done in pushed:
        layers = f", {done.layers} layers, {done.already_there} already there" if done.layers else ""
        note(f"torchstack: pushed {done.reference} ({done.digest}{layers})")
    if not options.get("sign"):
        return pushed, []
    info = json.loads(client.images.get(release.image_id).labels[BUILD_INFO_LABEL])
    signed = signing.sign_release(plan, info, pushed, publish.check_registry(options["registry"]), options["sign"], release.sbom,
                                  client.images.get(plan.base_image).id, kind, began)  # fmt: skip
    note(f"torchstack: signed {signed['reference']}, with its SBOM and provenance attested (cosign, no transparency log)")
    return pushed, [signed]


def run_build(catalog: Catalog, request: Request, plan: Plan, options: dict) -> Plan:
    client, chosen = connection.connect(connection.choose(options.get("engine") or "auto"))
    connection.refuse_for(chosen.kind, {**options, "builder": plan.builder})
    cleaned = sharing.sweep(client, sources.state_dir() / "contexts")
    base_missing = not engine.image_exists(client, plan.base_image)
    prerequisites.require(plan, bootstrap=base_missing and plan.base_is_bootstrapped)
    if plan.base_is_bootstrapped:
        archive.require_suites(plan.apt)
    cpu_notes = prerequisites.require_cpu_for_checks(plan, checks=not options.get("no_test"))
    if options.get("buildx_builder") and not engine.buildx_builder_exists(options["buildx_builder"]):
        raise UsageProblem(f"--buildx-builder {options['buildx_builder']}: no such builder (see `docker buildx ls`)")
    request, plan, wheel_notes = resolve_wheel(catalog, request, plan)
    plan = resolve_requirements(resolve_plugins(catalog, request, plan, options.get("pip_index_url")), options.get("pip_index_url"))
    pushes = (
        publish.wanted(plan, options.get("registry"), options.get("push_stages", False), checked=not options.get("no_test"))
        if options.get("push") or options.get("push_stages")
        else []
    )
    source_files = sources.fetch_plan_sources(plan, options.get("source_mirror"))

    logs = sources.state_dir() / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log_path = logs / f"{plan.release_tag}-{datetime.now(timezone.utc):%Y%m%d-%H%M%S}-{os.getpid()}.log"
    reports = [StageReport(stage=s.name, image=s.image, tags=[s.image]) for s in plan.stages]
    contexts = sharing.private_folder(sources.state_dir() / "contexts", plan.release_tag)
    started, began = time.monotonic(), datetime.now(timezone.utc)

    with _run_scope(client, options, contexts) as secrets, BuildView(reports, log_path, options.get("quiet", False)) as view:
        _say_first(view, plan, options, chosen, [*cleaned, *wheel_notes, *cpu_notes], base_missing)
        with _lock(chosen, plan.base_image, view):
            base = _base_image(client, plan, options, view)
        view.note(f"torchstack: base image {base}")
        ccache = functools.partial(engine.move_ccache, folder=options["ccache_dir"], image=base, platform=plan.platform,
                                   cache_id=layout.CCACHE_ID.format(arch=plan.arch.name), mount=layout.CCACHE_DIR,
                                   builder=options.get("buildx_builder")) if options.get("ccache_dir") else None  # fmt: skip
        if ccache:
            ccache("in")
            view.note(f"torchstack: compiler cache loaded from {options['ccache_dir']}")
        _build_stages(client, chosen, plan, options, reports, view, contexts, source_files, secrets, log_path)
        if ccache:
            ccache("out")
            view.note(f"torchstack: compiler cache saved to {options['ccache_dir']}")
        # Equal runs at once: the second waits, then finds the same image and the first's checks.
        with _lock(chosen, f"{plan.top_image} release", view):
            release = _check_and_tag(client, chosen, catalog, plan, options, view, contexts, log_path)
        reports[-1].tags.append(plan.top_image)
        pushed, signed = _publish(client, chosen.kind, plan, options, pushes, release, began, view.note)

    summary = _summary(plan, chosen, release, pushed, signed, time.monotonic() - started, log_path)
    if options.get("json_file"):
        write_json(options["json_file"], summary, reports)
    if not options.get("quiet"):
        view.console.print(summary_table(reports))
        took = f" in {release.checks_seconds:.0f} s" if release.checks_seconds else ""
        view.console.print(f"checks: {release.checks}{took}", highlight=False)
    print(plan.top_image)
    return plan
