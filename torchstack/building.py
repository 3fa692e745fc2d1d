"""Each stage of a plan built on the engine in order, or taken as it is, under a lock among this host's runs."""

from __future__ import annotations

import functools
import time
from pathlib import Path

from torchstack import bootstrap, connection, engine, publish, reproducible, sharing, sources
from torchstack.errors import ToolkitError
from torchstack.metadata import stage_labels
from torchstack.plan import RELEASE_STAGE, Plan, StagePlan
from torchstack.progress import BuildView, StageReport
from torchstack.render import BuildSecrets, assemble_context
from torchstack.run_options import RunOptions


class Interrupted(ToolkitError):
    """Ctrl-C (exit 130) or SIGTERM (exit 143) during a build."""

    def __init__(self, message: str, exit_code: int = 130):
        super().__init__(message)
        self.exit_code = exit_code


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


def _podman_stage(client, plan: Plan, stage: StagePlan, run: RunOptions, note) -> str | None:
    """On Podman, an earlier stage whose image is here, or in the --cache-from registry, under its
    content name (metadata.stage_image: a digest of everything that goes into it) is taken as it
    is: "cached" or "pulled"; None when it is to be built (always the release stage, whose name is
    not its content, and every stage with --no-cache). Podman's builder reuses only steps it made
    itself, so this is how a Podman host takes what another host built."""
    if stage.name == RELEASE_STAGE or run.no_cache:
        return None
    if engine.image_exists(client, stage.image):
        return "cached"
    if run.cache_from and (remote := _pull_cache(client, plan, run.cache_from, publish.pushed_as(plan, stage), note)):
        repository, _, tag = stage.image.rpartition(":")
        client.images.get(remote).tag(repository, tag)
        return "pulled"
    return None


def base_image(client, plan: Plan, run: RunOptions, view: BuildView) -> str:
    """The OS image: here already, pulled from --cache-from's registry (the very image the stages
    there were built on: one bootstrapped here would differ, and no step would match), else made
    as bootstrap.ensure_base_image makes it."""
    if plan.base_is_bootstrapped and run.cache_from and not engine.image_exists(client, plan.base_image):
        remote = _pull_cache(client, plan, run.cache_from, plan.base_image, view.note)
        if remote:
            repository, _, tag = plan.base_image.rpartition(":")
            client.images.get(remote).tag(repository, tag)
    return bootstrap.ensure_base_image(client, plan)


def lock(chosen: connection.Engine, name: str, view: BuildView):
    """Hold `name` on the engine `chosen` among this host's runs (sharing.lock), saying so when
    this run waits. Per engine, by its API socket: another engine on this host (a second dockerd,
    Podman) keeps images of the same names in a store of its own, and builds them meanwhile."""
    return sharing.lock(sources.state_dir() / "locks", f"{chosen.url} {name}", view.note, f"building {name}")


def build_stages(
    client,
    chosen: connection.Engine,
    plan: Plan,
    run: RunOptions,
    reports: list[StageReport],
    view: BuildView,
    contexts: Path,
    source_files: dict[str, Path],
    secrets: BuildSecrets,
    log_path: Path,
) -> None:
    """Build each stage of the plan in order, or take it as it is. Each under a lock among this
    host's runs (sharing.lock): equal runs at once make, and tag, the very same images."""
    for stage, report in zip(plan.stages, reports, strict=True):
        assemble_context(plan, stage, contexts / stage.name, source_files, secrets)
        progress = view.start(report)
        kind = chosen.kind
        with lock(chosen, stage.image, view):
            taken = _podman_stage(client, plan, stage, run, view.note) if kind == "podman" else None
            if taken:
                report.status, report.cached, report.seconds = taken, True, time.monotonic() - progress.started
                report.size_bytes = engine.image_size(client, stage.image)
                report.image_id = client.images.get(stage.image).id
                continue
            try:
                result = _build_stage(client, kind, plan, stage, run, view, contexts / stage.name, secrets, progress, log_path)
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
        report.builder = builder_name(kind, plan.builder)
        report.ran = list(result.ran)
        report.size_bytes = engine.image_size(client, stage.image)
        report.image_id = result.image_id
        report.status = "cached" if result.cached else "built"


def builder_name(kind: str, builder: str) -> str:
    """What builds a stage, in the words the summary uses: BuildKit, Docker's legacy builder, Podman's buildah."""
    if kind == "podman":
        return "buildah"
    return "buildkit" if builder == "buildx" else "legacy"


def _build_stage(
    client,
    kind: str,
    plan: Plan,
    stage: StagePlan,
    run: RunOptions,
    view: BuildView,
    context: Path,
    secrets: BuildSecrets,
    progress,
    log_path: Path,
) -> engine.BuildResult:
    labels = stage_labels(plan, stage)
    log = functools.partial(view.line, stage.name)
    if plan.builder == "buildx":
        # BuildKit asks the registry itself, and says so in its log when it lacks the image.
        cache = [publish.remote_name(run.cache_from, publish.pushed_as(plan, stage))] if run.cache_from else []
        return engine.build_image_buildx(
            context,
            stage.image,
            plan.platform,
            labels,
            run.no_cache,
            secrets.files(),
            log,
            progress,
            stage.name,
            log_path,
            run.buildx_builder,
            cache,
            plan.source_date_epoch,
            inline_cache=run.push_stages,  # what another host's --cache-from reads
        )
    # Podman's build API reads cache sources as buildah's own cache repositories: none given.
    cache = None if kind == "podman" else _cache_source(client, plan, stage, run.cache_from, view.note)
    return engine.build_image(
        client,
        context,
        stage.image,
        plan.platform,
        labels,
        run.no_cache,
        log,
        progress,
        stage.name,
        log_path,
        [cache] if cache else None,
        timestamp=reproducible.FILE_EPOCH,  # on Podman: its files' times and date, as BuildKit's (reproducible.py)
        step_environment=reproducible.STEP_ENVIRONMENT,
    )
