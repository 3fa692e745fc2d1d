"""What a build reports about its steps, from the legacy builder's own stream: which steps the
engine ran and which it took from its cache (the summary's `ran`, the stage's `cached`)."""

from __future__ import annotations

from pathlib import Path

from torchstack.engines.builders import LegacyBuilder
from torchstack.engines.buildjob import BuildJob
from torchstack.engines.connection import engine_of
from torchstack.engines.oci_build import oci_dockerfile


class FakeAPI:
    """The legacy builder's decoded stream, as the engine sends it (docker-py's APIClient.build)."""

    def __init__(self, chunks):
        self.chunks = chunks

    def build(self, **_):
        return FakeStream(self.chunks)


class FakeStream(list):
    def close(self):
        pass


class FakeClient:
    def __init__(self, chunks):
        self.api = FakeAPI(chunks)


def stream(*steps: tuple[str, bool]) -> list[dict]:
    chunks = []
    for number, (instruction, cached) in enumerate(steps, 1):
        chunks.append({"stream": f"Step {number}/{len(steps)} : {instruction}\n"})
        chunks.append({"stream": " ---> Using cache\n" if cached else " ---> Running in 0123456789ab\n"})
        chunks.append({"stream": " ---> 0123456789ab\n"})
    return [*chunks, {"aux": {"ID": "sha256:feed"}}]


def build(chunks) -> tuple:
    builder = LegacyBuilder(FakeClient(chunks), engine_of("docker", "unix:///x.sock", "test"))
    return builder.build(BuildJob(Path("/ctx"), "t:1", "linux/amd64", {}, "tools", Path("/log")))


def test_the_steps_that_ran_are_named_and_cached_ones_are_not():
    result = build(
        stream(
            ("FROM base", False),
            ("RUN pip download x", False),
            ("FROM tools-base", False),
            ("COPY --from=fetch /d /d", True),
            ("RUN build-numpy.sh", True),
            ("LABEL a=b", False),
        )
    )
    assert result.ran == ("RUN pip download x", "LABEL a=b") and not result.cached


def test_a_build_whose_every_step_came_from_the_cache_is_cached():
    result = build(stream(("FROM base", False), ("RUN a", True), ("RUN b", True)))
    assert result.ran == () and result.cached and result.image_id == "sha256:feed"


def test_a_step_given_to_bash_for_podman_is_named_as_the_template_wrote_it():
    """Podman's OCI builds run each step as bash's in exec form (oci_build.py): buildah's STEP line
    shows that form, and the summary's `ran` (and a failure's message) the step as written."""
    step = oci_dockerfile('FROM base\nRUN apt-get update \\\n && echo "done"\n', {}).splitlines()[1]
    assert step.startswith('RUN ["/bin/bash", "-o", "pipefail", "-c", ')
    chunks = [{"stream": "STEP 1/2: FROM base\n"}, {"stream": f"STEP 2/2: {step}\n"}, {"stream": "--> 0123456789a\n"}]
    result = build([*chunks, {"aux": {"ID": "sha256:feed"}}])
    assert result.ran == ('RUN apt-get update  && echo "done"',)


def test_a_step_for_podman_is_given_to_the_shell_the_dockerfile_names():
    text = oci_dockerfile('FROM base\nRUN a | b\nSHELL ["/bin/sh", "-c"]\nRUN c\n', {})
    assert text.splitlines()[1:] == ['RUN ["/bin/bash", "-o", "pipefail", "-c", "a | b"]', 'RUN ["/bin/sh", "-c", "c"]']
