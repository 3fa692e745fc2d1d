"""The engine as builds use it, Docker's or Podman's through the same API: one streamed build at a time."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import docker
import docker.errors

from torchstack import oci_build
from torchstack.connection import kind_of
from torchstack.errors import BuildFailed

# Docker's legacy builder says "Step 3/9 : RUN ..." and "---> Using cache"; Podman's (buildah) says
# "[2/3] STEP 3/9: RUN ..." (the prefix in multi-stage builds) and "--> Using cache 1f2e...".
_STEP = re.compile(r"^(?:\[\d+/\d+\] )?(?:Step|STEP) (\d+)/(\d+) ?: (.*)$")
_USING_CACHE = re.compile(r"^-{2,3}> Using cache\b")
# BuildKit's plain progress: "#7 [build 3/9] RUN ..." and "#7 CACHED".
_BUILDKIT_STEP = re.compile(r"^#(\d+) \[([^\]]*?)\s*(\d+)/(\d+)\] (.*)$")
_BUILDKIT_CACHED = re.compile(r"^#(\d+) CACHED$")
_IMAGE_ID = re.compile(r"[0-9a-f]{64}")


@dataclass
class BuildProgress:
    """What a running build has said so far; the live view reads it."""

    step: int = 0
    steps: int = 0
    instruction: str = ""
    cached_steps: int = 0
    started: float = field(default_factory=time.monotonic)
    tail: deque = field(default_factory=lambda: deque(maxlen=25))


@dataclass(frozen=True)
class BuildResult:
    image_id: str
    seconds: float
    cached: bool
    ran: tuple[str, ...] = ()  # the steps the engine ran, not took from its cache (FROM aside)


def build_image(
    client: docker.DockerClient,
    context: Path,
    tag: str | None,
    platform: str,
    labels: dict[str, str],
    nocache: bool,
    log: Callable[[str], None],
    progress: BuildProgress,
    stage: str,
    log_path: Path,
    cache_from: list[str] | None = None,
    timestamp: int | None = None,
    step_environment: Mapping[str, str] = {},
) -> BuildResult:
    """Build one image with the engine's streaming (legacy) builder; tag it only if it succeeds.

    The engine applies `tag` after the last step, so a failed or interrupted build leaves no
    tag behind, and every finished step stays in the engine's cache for the next run.
    `cache_from`: images here (pulled from a registry, or the engine's own) whose steps the engine
    may reuse, step by step, where they match; given any, the engine takes its own cache only
    where a source descends from it. `timestamp`: on Podman, the image's date and every file's
    time in its layers, its steps run with `step_environment` (the OCI format: oci_build.py);
    Docker's legacy builder stamps the clock whatever is given.
    """
    oci = timestamp is not None and kind_of(client.version()) == "podman"
    if oci:
        stream = oci_build.stream(client, context, platform, labels, nocache, timestamp, step_environment)
    else:
        stream = _legacy_stream(client, context, tag, platform, labels, nocache, cache_from)
    image_id = None
    steps = _Steps()
    try:
        for chunk in stream:
            if "error" in chunk:
                raise _failure(stage, progress, chunk.get("errorDetail", {}).get("message") or chunk["error"], log_path)
            if "aux" in chunk and "ID" in chunk["aux"]:
                image_id = chunk["aux"]["ID"]
            for line in chunk.get("stream", "").splitlines():
                if oci and _IMAGE_ID.fullmatch(line.strip()):  # Podman's endpoint ends with the ID it made, untagged
                    image_id = f"sha256:{line.strip()}"
                steps.read(line.strip(), progress)
                log(line)  # after the progress, so that a new step is shown as it starts
    finally:
        stream.close()
    steps.read_end(progress)
    if oci and image_id is None:
        raise _failure(stage, progress, "the engine's build ended without naming its image", log_path)
    if image_id is None:
        image_id = client.images.get(tag).id
    if oci and tag:
        client.api.tag(image_id, *docker.utils.parse_repository_tag(tag))
    seconds = time.monotonic() - progress.started
    return BuildResult(image_id=image_id, seconds=seconds, cached=steps.seen > 0 and not steps.ran, ran=tuple(steps.ran))


def _legacy_stream(client, context: Path, tag, platform: str, labels, nocache: bool, cache_from) -> Iterator[dict]:
    """The Docker API's build (Docker's legacy builder, Podman's buildah in the Docker format), decoded."""
    return client.api.build(
        path=str(context),
        tag=tag,
        platform=platform,
        labels=labels,
        nocache=nocache,
        rm=True,
        forcerm=True,
        pull=False,
        network_mode="host",
        cache_from=cache_from or None,
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


def _failure(stage: str, progress: BuildProgress, detail: str, log_path: Path) -> BuildFailed:
    last = "\n    ".join(list(progress.tail)[-12:])
    return BuildFailed(
        f"stage {stage} failed at step {progress.step}/{progress.steps} ({progress.instruction[:100]}): "
        f"{detail.strip()}\n  last output:\n    {last}\n  full log: {log_path}"
    )


def buildx_available() -> bool:
    docker_cli = shutil.which("docker")
    return docker_cli is not None and subprocess.run([docker_cli, "buildx", "version"], capture_output=True).returncode == 0


def buildkit_by_default(url: str) -> bool:
    """Whether the Docker engine at `url` builds with BuildKit by default (Docker 23 and later); False
    where it does not answer (the build then says so) or is older."""
    try:
        version = docker.DockerClient(base_url=url, timeout=10).version().get("Version", "")
    except (docker.errors.DockerException, OSError):
        return False
    major = version.split(".")[0]
    return major.isdigit() and int(major) >= 23


def build_image_buildx(
    context: Path,
    tag: str | None,
    platform: str,
    labels: dict[str, str],
    nocache: bool,
    secrets: dict[str, Path],
    log: Callable[[str], None],
    progress: BuildProgress,
    stage: str,
    log_path: Path,
    builder: str | None = None,
    cache_from: list[str] | None = None,
    epoch: int | None = None,
    inline_cache: bool = False,
) -> BuildResult:
    """Build one image with BuildKit (`docker buildx build --load`): cache mounts and secrets.
    `builder` names a builder made with `docker buildx create` (remote, Kubernetes, ...); the
    image comes back into this engine either way (--load), where the checks run.

    BuildKit names the image only once it is complete, so a failed or interrupted build
    leaves no tag; finished steps stay in BuildKit's cache.
    """
    handle, name = tempfile.mkstemp(prefix="torchstack-iid-")
    os.close(handle)
    iidfile = Path(name)
    command = buildx_command(context, tag, platform, labels, nocache, secrets, builder, cache_from, epoch, iidfile, inline_cache)
    steps: dict[str, str] = {}
    cached: set[str] = set()
    # A process group of its own: Docker 20.10's CLI runs buildx as a plugin process, and when the CLI
    # is stopped the plugin goes on building and keeps the pipe open; the group stops both.
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, bufsize=1, start_new_session=True)
    try:
        for line in process.stderr:
            line = line.rstrip("\n")
            match = _BUILDKIT_STEP.match(line)
            if match:
                steps[match[1]] = match[5]
                progress.step, progress.steps, progress.instruction = int(match[3]), int(match[4]), match[5]
            elif _BUILDKIT_CACHED.match(line):
                cached.add(line.split()[0][1:])
            elif line.strip():
                progress.tail.append(line.strip())
            log(line)  # after the progress, so that a new step is shown as it starts
        process.wait()
    except BaseException:
        _stop_group(process)
        raise
    finally:
        image_id = iidfile.read_text().strip() if iidfile.exists() else ""  # buildx removes it, and writes it on success
        iidfile.unlink(missing_ok=True)
    if process.returncode != 0:
        errors = [line for line in progress.tail if "ERROR" in line] or ["docker buildx build failed"]
        raise _failure(stage, progress, errors[-1], log_path)
    run_steps = {k for k, v in steps.items() if not v.upper().startswith("FROM")}
    progress.cached_steps = len(cached & run_steps)
    ran = tuple(steps[k] for k in sorted(run_steps - cached, key=int))
    return BuildResult(image_id=image_id, seconds=time.monotonic() - progress.started, cached=run_steps <= cached, ran=ran)


def _stop_group(process: subprocess.Popen) -> None:
    """Stop a build's process group: asked first (buildx then cancels its build in BuildKit), killed
    after 30 s. What it still writes is read meanwhile: a full pipe would keep it from ending."""
    for sent, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sent)
        try:
            process.communicate(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def buildx_command(
    context: Path,
    tag: str | None,
    platform: str,
    labels: dict[str, str],
    nocache: bool,
    secrets: dict[str, Path],
    builder: str | None = None,
    cache_from: list[str] | None = None,
    epoch: int | None = None,
    iidfile: Path | None = None,
    inline_cache: bool = False,
) -> list[str]:
    """The `docker buildx build` command line for one stage. `epoch` (SOURCE_DATE_EPOCH) is the
    image config's and its history's time instead of the clock; it is no step's input, so it
    changes no step's cache. With `inline_cache` the image carries its cache metadata inline
    (`--cache-to type=inline`: the layers of the stage's own image, which is what BuildKit's
    `docker` driver can export), so that, pushed, it serves another host's `--cache-from
    type=registry,ref=IMAGE`; that record holds the times its layers were made, so such an image
    is never the same twice (the release image, built on it, does not carry it)."""
    command = [
        "docker",
        "buildx",
        "build",
        "--progress=plain",
        "--load",
        *(["--tag", tag] if tag else []),
        "--platform",
        platform,
        "--network",
        "host",
        *(["--cache-to", "type=inline"] if inline_cache else []),
    ]
    command += [arg for ref in cache_from or () for arg in ("--cache-from", f"type=registry,ref={ref}")]
    if builder:
        command += ["--builder", builder]
    if nocache:
        command.append("--no-cache")
    if epoch is not None:
        command += ["--build-arg", f"SOURCE_DATE_EPOCH={epoch}"]
    if iidfile is not None:
        command += ["--iidfile", str(iidfile)]
    command += [arg for key, path in secrets.items() for arg in ("--secret", f"id={key},src={path}")]
    command += [arg for key, value in labels.items() for arg in ("--label", f"{key}={value}")]
    return [*command, str(context)]


def ccache_dockerfile(direction: str, image: str, cache_id: str, mount: str) -> str:
    """A two-stage build that moves BuildKit's compiler cache mount `cache_id` from its build
    context into the mount ("in"), or out of the mount into its output ("out"). Its RUN step is
    never cached (the NONCE build argument changes every time)."""
    work = "cp -a /seed/. {mount}/ && mkdir /moved" if direction == "in" else "mkdir /moved && cp -a {mount}/. /moved/"
    binds = " --mount=type=bind,target=/seed" if direction == "in" else ""
    return (
        f"FROM {image} AS move\n"
        "ARG NONCE\n"
        f'RUN --mount=type=cache,id={cache_id},target={mount}{binds} {work.format(mount=mount)} && echo "$NONCE" > /moved/.nonce\n'
        "FROM scratch\n"
        f"COPY --from=move {'/moved/.nonce' if direction == 'in' else '/moved'} /\n"
    )


def move_ccache(direction: str, folder: Path, image: str, platform: str, cache_id: str, mount: str, builder: str | None = None) -> None:
    """BuildKit keeps cache mounts in its own store, which a new CI runner starts without: before a
    build, seed the mount from `folder` ("in"); after it, write the mount back to `folder` ("out"),
    which GitHub's cache action (or any other) keeps between runs. `image` is one with `cp` (the
    OS image) for `platform`."""
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="torchstack-ccache-") as work:
        dockerfile = Path(work) / "Dockerfile"
        dockerfile.write_text(ccache_dockerfile(direction, image, cache_id, mount))
        output = folder if direction == "out" else Path(work) / "out"
        command = [
            "docker",
            "buildx",
            "build",
            "--progress=plain",
            "--platform",
            platform,
            "--file",
            str(dockerfile),
            "--build-arg",
            f"NONCE={time.time_ns()}",
            "--output",
            f"type=local,dest={output}",
            *(["--builder", builder] if builder else []),
            str(folder if direction == "in" else work),
        ]
        done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise BuildFailed(f"--ccache-dir: moving the compiler cache {direction} of BuildKit failed: {last}")
    (folder / ".nonce").unlink(missing_ok=True)


def buildx_builder_exists(name: str) -> bool:
    return subprocess.run(["docker", "buildx", "inspect", name], capture_output=True).returncode == 0


def image_size(client: docker.DockerClient, image: str) -> int:
    return int(client.images.get(image).attrs.get("Size", 0))


def pull(client: docker.DockerClient, reference: str, platform: str) -> str | None:
    """Pull `reference`; None when it came, else why not (one line)."""
    try:
        client.images.pull(reference, platform=platform)
    except (docker.errors.APIError, docker.errors.ImageNotFound) as exc:
        return " ".join(str(exc.explanation or exc).split())[:200]
    return None


def image_exists(client: docker.DockerClient, image: str) -> bool:
    try:
        client.images.get(image)
        return True
    except docker.errors.ImageNotFound:
        return False
