"""Each stage of a plan built on the engine in order, or taken as it is, under a lock among this host's runs."""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

from torchstack import bootstrap, connection, engine, publish, sharing, sources
from torchstack.errors import ToolkitError
from torchstack.metadata import stage_labels
from torchstack.plan import RELEASE_STAGE, Plan, StagePlan
from torchstack.progress import BuildView, StageReport
from torchstack.render import BuildSecrets, assemble_context, render_dockerfile
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


# The part of the final stage's Dockerfile that needs only the base stage (its OS packages)
AHEAD_TARGET = "runtime"


class Ahead:
    """The final stage's OS packages (its Dockerfile's `runtime` part, FROM the base stage), built
    beside the stages between them. The legacy builder builds one stage at a time, so the final's
    apt-get would wait for numpy's compile; built ahead, untagged, its steps are in the engine's
    cache when the final stage's build comes to them. Through the engine's CLI, in a process of its
    own that a stopped run ends (the engine then stops the build and removes its container), under
    a lock named by what it builds: equal runs at once build it once, and their final stages find
    one cached step, not two of the same. A failure here changes nothing: the final stage builds
    the part itself, and says why."""

    def __init__(self, chosen: connection.Engine, plan: Plan, final: StagePlan, folder: Path, secrets: BuildSecrets):
        folder.mkdir(parents=True, exist_ok=True)
        dockerfile = render_dockerfile(plan, final, secrets)
        (folder / "Dockerfile").write_text(dockerfile)
        lines = dockerfile.splitlines()
        starts = [i for i, line in enumerate(lines) if line.startswith("FROM ")]
        part = "\n".join(lines[starts[0] : starts[1] if len(starts) > 1 else None])
        self.name = f"{chosen.url} {AHEAD_TARGET} {hashlib.sha256(part.encode()).hexdigest()[:16]}"
        self.output = folder / "output.log"
        self.command = ["docker", "build", "--target", AHEAD_TARGET, "--platform", plan.platform, "--network", "host"]
        self.command += ["--rm", "--force-rm", str(folder)]
        self.env = {**os.environ, "DOCKER_HOST": chosen.url, "DOCKER_BUILDKIT": "0"}
        self.process: subprocess.Popen | None = None
        self.thread: threading.Thread | None = None
        self.status: int | str | None = None  # the CLI's exit status, or why it did not run
        self.stopping = False
        self.guard = threading.Lock()

    @staticmethod
    def wanted(chosen: connection.Engine, plan: Plan, run: RunOptions) -> StagePlan | None:
        """The final stage, where it is built with the legacy builder on Docker, from the engine's
        own cache, after other stages than the one it is FROM; else None. BuildKit builds the part
        beside the rest of the final's Dockerfile itself; given --cache-from, the legacy builder
        reuses only the steps of the images named there."""
        final = plan.stages[-1]
        between = [s for s in plan.stages if s.image not in (final.parent_image, final.image)]
        if final.name != RELEASE_STAGE or not between or plan.builder == "buildx" or chosen.kind != "docker":
            return None
        if run.no_cache or run.cache_from:
            return None
        return final if shutil.which("docker") else None

    def start(self, view: BuildView) -> None:
        view.note("torchstack: building the final stage's OS packages beside the stages before it")
        self.thread = threading.Thread(target=self._build, args=(view,), daemon=True)
        self.thread.start()

    def _build(self, view: BuildView) -> None:
        doing = "building the final stage's OS packages"
        try:
            with sharing.lock(sources.state_dir() / "locks", self.name, view.note, doing), self.output.open("w") as out:
                with self.guard:
                    if self.stopping:
                        return
                    self.process = subprocess.Popen(
                        self.command, stdout=out, stderr=subprocess.STDOUT, env=self.env, preexec_fn=sharing.die_with_parent
                    )
                self.status = self.process.wait()
        except OSError as exc:  # the lock's folder, the log, the CLI: the final stage builds the part itself
            self.status = f"{exc.strerror or exc}"

    def wait(self, view: BuildView) -> None:
        """Wait for it; its output goes into the run's log."""
        if self.thread is None:
            return
        self.thread.join()
        self.thread = None
        view.record(f"\n===== the final stage's OS packages, built ahead ({AHEAD_TARGET}) =====")
        view.record(self.output.read_text(errors="replace").rstrip() if self.output.is_file() else "")
        if self.status != 0:
            why = f"exit status {self.status}" if isinstance(self.status, int) else self.status
            view.note(f"torchstack: the final stage's OS packages were not built ahead ({why}); the final stage builds them")

    def stop(self) -> None:
        """End it where it stands (an interrupted run). A thread still waiting for the lock is left
        to end with the run."""
        with self.guard:
            self.stopping = True
            started = self.process is not None
            if started and self.process.poll() is None:
                self.process.terminate()
        if started and self.thread is not None:
            self.thread.join(timeout=30)


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
    host's runs (sharing.lock): equal runs at once make, and tag, the very same images. The final
    stage's OS packages are built beside the stages between the base and it (Ahead)."""
    final = Ahead.wanted(chosen, plan, run)
    ahead = Ahead(chosen, plan, final, contexts / f"{RELEASE_STAGE}-{AHEAD_TARGET}", secrets) if final else None
    try:
        for stage, report in zip(plan.stages, reports, strict=True):
            if ahead and stage is final:
                ahead.wait(view)
            _build_or_take(client, chosen, plan, stage, report, run, view, contexts, source_files, secrets, log_path)
            if ahead and stage.image == final.parent_image:
                ahead.start(view)
    finally:
        if ahead:
            ahead.stop()


def _build_or_take(
    client,
    chosen: connection.Engine,
    plan: Plan,
    stage: StagePlan,
    report: StageReport,
    run: RunOptions,
    view: BuildView,
    contexts: Path,
    source_files: dict[str, Path],
    secrets: BuildSecrets,
    log_path: Path,
) -> None:
    """Build one stage under its lock, or take it as it is (Podman: an earlier run's, or the
    --cache-from registry's); what came of it goes into `report`."""
    assemble_context(plan, stage, contexts / stage.name, source_files, secrets)
    progress = view.start(report)
    kind = chosen.kind
    with lock(chosen, stage.image, view):
        taken = _podman_stage(client, plan, stage, run, view.note) if kind == "podman" else None
        if taken:
            report.status, report.cached, report.seconds = taken, True, time.monotonic() - progress.started
            report.size_bytes = engine.image_size(client, stage.image)
            return
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
    report.ran = list(result.ran)
    report.size_bytes = engine.image_size(client, stage.image)
    report.status = "cached" if result.cached else "built"


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
    )
