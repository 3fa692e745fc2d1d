"""BuildKit through `docker buildx`: one image's build, its ID as the store names it, its compiler cache carried to a folder."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from torchstack.base.errors import BuildFailed
from torchstack.engines.buildjob import BuildJob, BuildResult

# BuildKit's plain progress: "#7 [build 3/9] RUN ..." and "#7 CACHED".
_STEP = re.compile(r"^#(\d+) \[([^\]]*?)\s*(\d+)/(\d+)\] (.*)$")
_CACHED = re.compile(r"^#(\d+) CACHED$")


def available() -> bool:
    docker_cli = shutil.which("docker")
    return docker_cli is not None and subprocess.run([docker_cli, "buildx", "version"], capture_output=True).returncode == 0


def builder_exists(name: str) -> bool:
    return subprocess.run(["docker", "buildx", "inspect", name], capture_output=True).returncode == 0


def build(job: BuildJob, containerd_store: bool, builder: str | None = None) -> BuildResult:
    """Build one image with BuildKit (`docker buildx build --load`): cache mounts and secrets.
    `builder` names a builder made with `docker buildx create` (remote, Kubernetes, ...); the
    image comes back into this engine either way (--load), where the checks run.

    BuildKit names the image only once it is complete, so a failed or interrupted build leaves no
    tag; finished steps stay in BuildKit's cache. The image's ID is what the engine's store calls
    it (`containerd_store`: the manifest's digest; else the config's), read from the build's metadata.
    """
    handle, name = tempfile.mkstemp(prefix="torchstack-metadata-")
    os.close(handle)
    metadata = Path(name)
    progress = job.progress
    steps: dict[str, str] = {}
    cached: set[str] = set()
    # Attestations off only where BuildKit would attach them: the containerd store, a builder of its own.
    command = buildx_command(job, builder, metadata, no_attestations=containerd_store or builder is not None)
    # A process group of its own: Docker 20.10's CLI runs buildx as a plugin process, and when the CLI
    # is stopped the plugin goes on building and keeps the pipe open; the group stops both.
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, bufsize=1, start_new_session=True)
    try:
        for line in process.stderr:
            line = line.rstrip("\n")
            match = _STEP.match(line)
            if match:
                steps[match[1]] = match[5]
                progress.step, progress.steps, progress.instruction = int(match[3]), int(match[4]), match[5]
            elif _CACHED.match(line):
                cached.add(line.split()[0][1:])
            elif line.strip():
                progress.tail.append(line.strip())
            job.log(line)  # after the progress, so that a new step is shown as it starts
        process.wait()
    except BaseException:
        _stop_group(process)
        raise
    finally:
        said = metadata.read_text() if metadata.exists() else ""
        metadata.unlink(missing_ok=True)
    if process.returncode != 0:
        errors = [line for line in progress.tail if "ERROR" in line] or ["docker buildx build failed"]
        raise job.failure(errors[-1])
    run_steps = {k for k, v in steps.items() if not v.upper().startswith("FROM")}
    progress.cached_steps = len(cached & run_steps)
    ran = tuple(steps[k] for k in sorted(run_steps - cached, key=int))
    image_id = image_id_from(json.loads(said or "{}"), containerd_store)
    return BuildResult(image_id=image_id, seconds=time.monotonic() - progress.started, cached=run_steps <= cached, ran=ran)


def image_id_from(metadata: dict, containerd_store: bool) -> str:
    """The loaded image's ID from buildx's --metadata-file: on Docker's containerd image store the
    digest of its manifest (the store names images so), elsewhere its config's digest, which Docker
    23 and later name `containerimage.config.digest` and Docker 20.10's BuildKit `containerimage.digest`
    (its only key). Not buildx's --iidfile: up to buildx 0.29 it writes the config's digest on the
    containerd store too, which the engine cannot resolve (docker/buildx#3952)."""
    keys = ("containerimage.digest",) if containerd_store else ("containerimage.config.digest", "containerimage.digest")
    found = next((metadata[key] for key in keys if metadata.get(key)), None)
    if not found:
        raise BuildFailed(f"docker buildx build named no image in its metadata (it gave {sorted(metadata) or 'nothing'})")
    return found


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


def buildx_command(job: BuildJob, builder: str | None = None, metadata: Path | None = None, no_attestations: bool = False) -> list[str]:
    """The `docker buildx build` command line for one job. `job.image_date` (SOURCE_DATE_EPOCH) is the
    image config's and its history's time instead of the clock; it is no step's input, so it
    changes no step's cache. With `no_attestations` BuildKit's own attestations are off
    (--provenance=false, --sbom=false): on Docker's containerd image store they would put the
    build's clock into an index beside the image, and so into its ID and pushed digest; the
    toolkit's signed SBOM and provenance are what it vouches for. Elsewhere the docker driver
    attaches none. With `job.inline_cache` the image carries its cache metadata inline
    (`--cache-to type=inline`: the layers of the stage's own image, which is what BuildKit's
    `docker` driver can export), so that, pushed, it serves another host's `--cache-from
    type=registry,ref=IMAGE`; that record holds the times its layers were made, so such an image
    is never the same twice (the release image, built on it, does not carry it)."""
    command = ["docker", "buildx", "build", "--progress=plain", "--load"]
    command += ["--provenance=false", "--sbom=false"] if no_attestations else []
    command += [*(["--tag", job.tag] if job.tag else []), "--platform", job.platform, "--network", "host"]
    if job.inline_cache:
        command += ["--cache-to", "type=inline"]
    command += [arg for ref in job.cache_from for arg in ("--cache-from", f"type=registry,ref={ref}")]
    if builder:
        command += ["--builder", builder]
    if job.nocache:
        command.append("--no-cache")
    if job.image_date is not None:
        command += ["--build-arg", f"SOURCE_DATE_EPOCH={job.image_date}"]
    if metadata is not None:
        command += ["--metadata-file", str(metadata)]
    command += [arg for key, path in job.secrets.items() for arg in ("--secret", f"id={key},src={path}")]
    command += [arg for key, value in job.labels.items() for arg in ("--label", f"{key}={value}")]
    return [*command, str(job.context)]


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


def move_cache(
    direction: str,
    folder: Path,
    image: str,
    platform: str,
    cache_id: str,
    mount: str,
    builder: str | None = None,
    scratch: Path | None = None,
) -> None:
    """BuildKit keeps cache mounts in its own store, which a new CI runner starts without: before a
    build, seed the mount from `folder` ("in"); after it, write the mount back to `folder` ("out"),
    which GitHub's cache action (or any other) keeps between runs. `image` is one with `cp` (the
    OS image) for `platform`. Its work folder is made in `scratch` (the run's private folder)."""
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="torchstack-ccache-", dir=scratch) as work:
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
