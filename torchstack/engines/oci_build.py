"""Podman's builds made reproducible: its own build endpoint, in the OCI format, with every date given."""

from __future__ import annotations

import contextlib
import json
import re
import tarfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO

import docker
import podman
import podman.errors

from torchstack.base.errors import UsageProblem
from torchstack.base.reproducible import STEP_ENVIRONMENT
from torchstack.engines.buildjob import BuildJob

# Podman builds the same image twice only in the OCI format: the Docker format's configuration names
# the build's container and its host name. The OCI format keeps no SHELL, and buildah then runs each
# step with /bin/sh: each step is given to the shell the Dockerfile names, in exec form, in a
# Dockerfile of their own.
OCI_FORMAT = "application/vnd.oci.image.manifest.v1+json"
OCI_DOCKERFILE = "Dockerfile.oci"
_BASH = ["/bin/bash", "-o", "pipefail", "-c"]  # every stage's SHELL (templates/_common.j2's preamble)
_RUN = re.compile(r"RUN((?:\s+--\S+)*)\s+(.*)$", re.S)
SECRET_PREFIX = ".torchstack-secret-"  # a secret's name in the archive sent: no file of a rendered context has it
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")  # every C0 control but the tab, and DEL


def stream(url: str, version: str, job: BuildJob) -> Iterator[dict]:
    """Podman's own build endpoint at `url` (Podman `version`), through podman-py, Podman's own SDK,
    in the OCI format, the job's `buildah.timestamp` the image's date and every file's time, its
    steps run with STEP_ENVIRONMENT: the same steps on the same inputs give the same image; its
    `buildah.secrets` as the endpoint's build secrets (_with_secrets). The build's output, decoded;
    the image untagged (its endpoint names images otherwise than the Docker API does: the caller tags)."""
    context = job.context
    (context / OCI_DOCKERFILE).write_text(oci_dockerfile((context / "Dockerfile").read_text(), STEP_ENVIRONMENT, job.labels))
    params = {
        "dockerfile": OCI_DOCKERFILE,
        "platform": job.platform,
        "nocache": job.nocache,
        "rm": True,
        "forcerm": True,
        "pull": False,
        "networkmode": "host",
        "layers": True,  # a layer and a cached image per step, as the Docker API's build makes
        "timestamp": job.file_date,
        "outputformat": OCI_FORMAT,
    }
    client = podman.PodmanClient(base_url=url, version=version.split("-")[0] or None)
    try:
        with docker.utils.tar(str(context), gzip=False) as archive:
            if job.secrets:
                params["secrets"] = json.dumps(_with_secrets(archive, job.secrets))
            response = client.api.post("/build", params=params, data=archive, headers={"Content-Type": "application/x-tar"}, stream=True)
        response.raise_for_status()
    except podman.errors.APIError as exc:
        client.close()
        raise job.failure(f"Podman's build endpoint refused the build: {exc}") from None
    return _decoded(client, response)


def _with_secrets(archive: IO[bytes], secrets: Mapping[str, Path]) -> list[str]:
    """The build's secrets added to the context's `archive` (a temporary file, this user's alone), each as
    the endpoint's `secrets` takes it: `id=ID,src=NAME`, NAME the file's in the archive, which Podman's
    service moves out of the context it unpacked before the build starts (podman-remote's way), so that
    no COPY can reach it and no layer holds it; a step reads it only through RUN --mount=type=secret."""
    with tarfile.open(fileobj=archive, mode="a") as tar:
        for key, path in secrets.items():
            info = tar.gettarinfo(str(path), arcname=f"{SECRET_PREFIX}{key}")
            info.mode, info.uid, info.gid, info.uname, info.gname = 0o600, 0, 0, "", ""
            with path.open("rb") as given:
                tar.addfile(info, given)
    archive.seek(0)
    return [f"id={key},src={SECRET_PREFIX}{key}" for key in secrets]


def _decoded(client, response) -> Iterator[dict]:
    """The endpoint's JSON lines as they come; the connection closed however the reader stops."""
    try:
        for line in response.iter_lines():
            if line.strip():
                yield json.loads(line)
    finally:
        response.close()
        client.close()


def oci_dockerfile(text: str, step_environment: Mapping[str, str], labels: Mapping[str, str] = {}) -> str:
    """`text` for a build in the OCI format, which keeps no SHELL: each shell-form RUN in exec form, given
    to the shell the last SHELL named (bash's, where none did), `step_environment` as each stage's ARGs
    (its steps' environment, not the image's), `labels` in a last step, in order (the endpoint's own
    labels come in the order of a Go map)."""
    lines, out, shell = iter(text.splitlines()), [], _BASH
    for line in lines:
        instruction = line.split(" ", 1)[0].upper()
        if instruction == "SHELL":
            shell = json.loads(line.split(" ", 1)[1])  # the JSON form, the only one SHELL takes
            continue
        if instruction != "RUN":
            out.append(line)
            out.extend(f"ARG {name}={value}" for name, value in step_environment.items() if instruction == "FROM")
            continue
        while line.endswith("\\"):
            following = next(lines, None)
            if following is None:
                break
            if following.strip() and not following.lstrip().startswith("#"):  # as Docker's parser, inside one instruction
                line = line[:-1] + following
        flags, command = _RUN.match(line).groups()
        out.append(line if command.startswith("[") else f"RUN{flags} {json.dumps([*shell, command.strip()])}")
    if labels:
        out.append("LABEL " + " ".join(f"{_quoted(name)}={_quoted(value)}" for name, value in sorted(labels.items())))
    return "\n".join(out) + "\n"


def _quoted(text: str) -> str:
    """`text` as one word of a Dockerfile, word for word: in double quotes, its \\, " and $ escaped. A line
    break (or another control character) cannot be written so: Docker's and buildah's parsers end the
    instruction there, and an escape is read as the two characters it is. Refused, in one line."""
    if _CONTROL.search(text):
        raise UsageProblem(
            f"a label's name or value {text!r} holds a control character: a Dockerfile's LABEL cannot carry it word for word"
        )
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$")
    return f'"{escaped}"'


def as_written(instruction: str) -> str:
    """A step as the builder names it, a RUN given to bash by oci_dockerfile as the template wrote it
    (the live view, the summary's `ran` and a failure's message read the same on every engine)."""
    if instruction.startswith(f"RUN {json.dumps(_BASH)[:-1]}, "):
        with contextlib.suppress(ValueError):
            return f"RUN {json.loads(instruction[4:])[4]}"
    return instruction
