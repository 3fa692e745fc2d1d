"""Each stage of a plan built on the engine in order, or taken as it is, under a lock among this host's runs."""

from __future__ import annotations

import dataclasses
import functools
import time
from pathlib import Path

from torchstack.base import reproducible, sharing, state
from torchstack.base.errors import ToolkitError
from torchstack.engines.buildjob import BuildJob, BuildProgress
from torchstack.engines.engine import BuildRun, Engine
from torchstack.making import bootstrap
from torchstack.making.render import BuildSecrets, assemble_context
from torchstack.registries import registry
from torchstack.reports.progress import BuildView, StageReport
from torchstack.request import tags
from torchstack.request.metadata import stage_labels
from torchstack.request.plan import RELEASE_STAGE, Plan, StagePlan
from torchstack.request.run_settings import RunOptions


class Interrupted(ToolkitError):
    """Ctrl-C (exit 130) or SIGTERM (exit 143) during a build."""

    def __init__(self, message: str, exit_code: int = 130):
        super().__init__(message)
        self.exit_code = exit_code


def _pull_cache(engine: Engine, plan: Plan, cache_registry: str, name: str, note) -> str | None:
    """`name` as the --cache-from registry holds it, pulled; None (and one warning line) when the
    pull fails, and the stage builds here."""
    remote = tags.remote_name(cache_registry, name)
    problem = engine.pull(remote, plan.platform)
    if problem:
        note(f"torchstack: warning: --cache-from: no {remote} ({problem}); building it here")
        return None
    note(f"torchstack: --cache-from: pulled {remote}")
    return remote


def _say_if_unreadable(remote: str, note) -> None:
    """The warning the legacy builder's pull gives, for BuildKit, which reads --cache-from's image
    from the registry itself and says nothing when it cannot: the registry asked first (its
    manifest), and the image still handed to BuildKit."""
    try:
        reference = registry.parse(remote)
        registry.Registry(reference.host).manifest(reference)
    except (ToolkitError, ValueError) as problem:
        note(f"torchstack: warning: --cache-from: no {remote} ({problem}); building it here")


def _cache_source(engine: Engine, plan: Plan, stage: StagePlan, cache_registry: str | None, note) -> str | None:
    """With --cache-from REGISTRY, the image whose steps the legacy builder may reuse for `stage`:
    this engine's own image of it when it has one, else the registry's (under the name --push
    sends it as), pulled. Once given a source, the legacy builder reuses only the source's steps,
    and the steps of an image that came from a registry (or was built from one) are found only
    that way: so even the engine's own image is named, not left to its cache."""
    if not cache_registry:
        return None
    if engine.has_image(stage.image):
        return stage.image
    return _pull_cache(engine, plan, cache_registry, tags.pushed_as(plan, stage), note)


def _taken_by_name(engine: Engine, plan: Plan, stage: StagePlan, run: RunOptions, note) -> str | None:
    """On Podman, an earlier stage whose image is here, or in the --cache-from registry, under its
    content name (metadata.stage_image: a digest of everything that goes into it) is taken as it
    is: "cached" or "pulled"; None when it is to be built (always the release stage, whose name is
    not its content, and every stage with --no-cache). Podman's builder reuses only steps it made
    itself, so this is how a Podman host takes what another host built."""
    if stage.name == RELEASE_STAGE or run.no_cache:
        return None
    if engine.has_image(stage.image):
        return "cached"
    if run.cache_from and (remote := _pull_cache(engine, plan, run.cache_from, tags.pushed_as(plan, stage), note)):
        engine.tag(remote, stage.image)
        return "pulled"
    return None


def base_image(build: BuildRun, plan: Plan, run: RunOptions) -> str:
    """The OS image: here already, pulled from --cache-from's registry (the very image the stages
    there were built on: one bootstrapped here would differ, and no step would match), else made
    as bootstrap.ensure_base_image makes it."""
    engine = build.engine
    if plan.base_is_bootstrapped and run.cache_from and not engine.has_image(plan.base_image):
        remote = _pull_cache(engine, plan, run.cache_from, plan.base_image, build.note)
        if remote:
            engine.tag(remote, plan.base_image)
    return bootstrap.ensure_base_image(build.builder, plan, scratch=build.contexts)


def lock(chosen: Engine, name: str, view: BuildView):
    """Hold `name` on the engine `chosen` among this host's runs (sharing.lock), saying so when
    this run waits. Per engine, by its API socket: another engine on this host (a second dockerd,
    Podman) keeps images of the same names in a store of its own, and builds them meanwhile."""
    return sharing.lock(state.state_dir() / "locks", f"{chosen.url} {name}", view.note, f"building {name}")


def build_stages(
    build: BuildRun,
    plan: Plan,
    run: RunOptions,
    reports: list[StageReport],
    view: BuildView,
    source_files: dict[str, Path],
    secrets: BuildSecrets,
) -> None:
    """Build each stage of the plan in order, or take it as it is. Each under a lock among this
    host's runs (sharing.lock): equal runs at once make, and tag, the very same images. The secrets
    go to the steps as the builder takes them: mounted where it mounts secrets, else in the context."""
    engine, secrets = build.engine, dataclasses.replace(secrets, mounted=build.builder.mounts_secrets)
    for stage, report in zip(plan.stages, reports, strict=True):
        assemble_context(plan, stage, build.contexts / stage.name, source_files, secrets)
        progress = view.start(report)
        with lock(engine, stage.image, view):
            taken = _taken_by_name(engine, plan, stage, run, view.note) if engine.takes_stages_by_name else None
            if taken:
                report.status, report.cached, report.seconds = taken, True, time.monotonic() - progress.started
                found = engine.image(stage.image)
                report.size_bytes, report.image_id = found.size, found.id
                continue
            try:
                result = build.builder.build(_stage_job(build, plan, stage, run, view, secrets, progress))
            except KeyboardInterrupt as exc:
                report.status = "interrupted"
                raise Interrupted(
                    f"interrupted in stage {stage.name}: no tag points at a half-built image; "
                    "finished steps are in the engine's cache, so the next run resumes there",
                    sharing.exit_code(exc),
                ) from None
            except ToolkitError:
                report.status = "failed"
                raise
        report.seconds = result.seconds
        report.cached = result.cached
        report.builder = build.builder.name
        report.ran = list(result.ran)
        report.size_bytes = engine.image(stage.image).size
        report.image_id = result.image_id
        report.status = "cached" if result.cached else "built"


def _stage_job(
    build: BuildRun, plan: Plan, stage: StagePlan, run: RunOptions, view: BuildView, secrets: BuildSecrets, progress: BuildProgress
) -> BuildJob:
    """What building `stage` asks of the builder: its context, tag, labels, the images whose steps it
    may reuse (--cache-from), its dates (reproducible.py), its secrets."""
    cache, builder = (), build.builder
    if run.cache_from and builder.reads_cache_from_registry:  # BuildKit asks the registry itself, and says nothing when it lacks the image
        cache = (tags.remote_name(run.cache_from, tags.pushed_as(plan, stage)),)
        _say_if_unreadable(cache[0], view.note)
    elif run.cache_from and builder.reads_cache_from_images:
        cache = tuple(filter(None, [_cache_source(build.engine, plan, stage, run.cache_from, view.note)]))
    return BuildJob(
        context=build.contexts / stage.name,
        tag=stage.image,
        platform=plan.platform,
        labels=stage_labels(plan, stage),
        stage=stage.name,
        log_path=build.log_path,
        log=functools.partial(view.line, stage.name),
        progress=progress,
        nocache=run.no_cache,
        cache_from=cache,
        image_date=plan.source_date_epoch,
        file_date=reproducible.FILE_EPOCH,  # its files' times, as BuildKit's steps clamp theirs (reproducible.py)
        secrets=secrets.files(),
        inline_cache=run.push_stages,  # what another host's --cache-from reads
    )
