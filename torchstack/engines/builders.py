"""How each builder builds one image on its engine (BuildKit, Docker's legacy builder, Podman's buildah), what it vouches for."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import docker
import docker.errors

from torchstack.engines import buildkit, oci_build
from torchstack.engines.buildjob import BuildJob, BuildProgress, BuildResult
from torchstack.engines.engine import Builder

# Docker's legacy builder says "Step 3/9 : RUN ..." and "---> Using cache"; Podman's (buildah) says
# "[2/3] STEP 3/9: RUN ..." (the prefix in multi-stage builds) and "--> Using cache 1f2e...".
_STEP = re.compile(r"^(?:\[\d+/\d+\] )?(?:Step|STEP) (\d+)/(\d+) ?: (.*)$")
_USING_CACHE = re.compile(r"^-{2,3}> Using cache\b")
_IMAGE_ID = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class LegacyBuilder(Builder):
    """Docker's legacy builder, through the engine's API: streamed, tagged by the engine after its last step."""

    name = "legacy"

    def build(self, job: BuildJob) -> BuildResult:
        return _streamed(self.client, job, _legacy_stream(self.client, job), podman=False)

    def why_not_reproducible(self) -> str | None:
        return (
            "Docker's legacy builder stamps the build's clock on every image: two builds of one request differ "
            "(BuildKit, the default builder of Docker 23 and later, does not)"
        )


@dataclass(frozen=True)
class PodmanBuilder(Builder):
    """Podman's buildah through its own build endpoint, in the OCI format, every date given (oci_build.py)."""

    name = "buildah"
    reads_cache_from_images = False  # its build API reads cache sources as buildah's own cache repositories
    mounts_secrets = True

    def build(self, job: BuildJob) -> BuildResult:
        stream = oci_build.stream(self.engine.url, self.engine.version, job)
        return _streamed(self.client, job, stream, podman=True)


@dataclass(frozen=True)
class BuildKitBuilder(Builder):
    """BuildKit through `docker buildx` (buildkit.py), on the engine's own builder or the one --buildx-builder names."""

    buildx_builder: str | None = None
    name = "buildkit"
    mounts_in_steps = True
    builds_from_ids = False
    reads_cache_from_images = False
    reads_cache_from_registry = True
    drives_the_cli = True
    mounts_secrets = True

    def build(self, job: BuildJob) -> BuildResult:
        return buildkit.build(job, self.engine.containerd_store, self.buildx_builder)

    def why_not_reproducible(self) -> str | None:
        if self.engine.buildkit_default:
            return None
        return (
            "this Docker release's BuildKit predates SOURCE_DATE_EPOCH (Docker 23 and later have it): "
            "it stamps the build's clock on every image"
        )


def _streamed(client: docker.DockerClient, job: BuildJob, stream: Iterator[dict], podman: bool) -> BuildResult:
    """A build through the engine's API, read as it streams: its steps, cached or run, and the image it made.

    The legacy endpoint applies `job.tag` after the last step, so a failed or interrupted build
    leaves no tag; Podman's own endpoint ends with the ID it made, untagged, which is tagged here."""
    progress, image_id, steps = job.progress, None, _Steps()
    try:
        for chunk in stream:
            if "error" in chunk:
                raise job.failure(chunk.get("errorDetail", {}).get("message") or chunk["error"])
            if "aux" in chunk and "ID" in chunk["aux"]:
                image_id = chunk["aux"]["ID"]
            for line in chunk.get("stream", "").splitlines():
                if podman and _IMAGE_ID.fullmatch(line.strip()):
                    image_id = f"sha256:{line.strip()}"
                steps.read(line.strip(), progress)
                job.log(line)  # after the progress, so that a new step is shown as it starts
    finally:
        stream.close()
    steps.read_end(progress)
    if podman and image_id is None:
        raise job.failure("the engine's build ended without naming its image")
    if image_id is None:
        image_id = client.images.get(job.tag).id
    if podman and job.tag:
        client.api.tag(image_id, *docker.utils.parse_repository_tag(job.tag))
    seconds = time.monotonic() - progress.started
    return BuildResult(image_id=image_id, seconds=seconds, cached=steps.seen > 0 and not steps.ran, ran=tuple(steps.ran))


def _legacy_stream(client, job: BuildJob) -> Iterator[dict]:
    """The Docker API's build (Docker's legacy builder, Podman's buildah in the Docker format), decoded."""
    return client.api.build(
        path=str(job.context),
        tag=job.tag,
        platform=job.platform,
        labels=dict(job.labels),
        nocache=job.nocache,
        rm=True,
        forcerm=True,
        pull=False,
        network_mode="host",
        cache_from=list(job.cache_from) or None,
        decode=True,
    )


@dataclass
class _Steps:
    """The legacy builder's steps as its output names them: how many, and which ran (not cached)."""

    seen: int = 0
    ran: list[str] = field(default_factory=list)
    step_cached: bool = True  # the step under way: its instruction is in progress.instruction

    def read(self, line: str, progress: BuildProgress) -> None:
        match = _STEP.match(line)
        if match:
            if not self.step_cached:
                self.ran.append(progress.instruction)
            progress.step, progress.steps, progress.instruction = int(match[1]), int(match[2]), oci_build.as_written(match[3])
            self.step_cached = match[3].upper().startswith("FROM")
            self.seen += 1
        elif _USING_CACHE.match(line):
            progress.cached_steps += 1
            self.step_cached = True
        elif line:
            progress.tail.append(line)

    def read_end(self, progress: BuildProgress) -> None:
        if not self.step_cached:
            self.ran.append(progress.instruction)
