"""Each thing built once: stages named by what they hold are shared between backends on one
engine, and reach another, empty engine through a registry (--push-stages, --cache-from), where
the engine reuses every step that matches and builds only what changed."""

from __future__ import annotations

import json

import docker
import pytest

from tests.engine.conftest import untag
from tests.engine.hosts import SECOND_ENGINE
from tests.engine.images import BUILDKIT_TOOLS, IMAGES, X86_ARGS, run_build_py, x86_wheelhouse

pytestmark = pytest.mark.engine

LOWER = ("base", "libs", "tools", "dev")
# What lists every Python distribution in an image with its version (pip is not in the final image).
DISTRIBUTIONS = "import importlib.metadata as m; print(sorted(f'{d.metadata[\"Name\"]}=={d.version}' for d in m.distributions()))"


def by_stage(summary: dict) -> dict[str, dict]:
    return {s["stage"]: s for s in summary["stages"]}


def only_fetched(steps: list[str]) -> bool:
    """Whether the steps that ran are all the tools stage's throwaway fetch stage's: the download
    of numpy's build requirements, with the CA bundle. Nothing of that stage is in the tools image,
    so no registry holds it as cache; its files are byte for byte the same, so every step after it
    comes from the cache."""
    return all('/bin/pip" download ' in step or "ca-bundle" in step or step.startswith("ENV PIP_") for step in steps)


def test_zendnn_after_onednn_compiles_nothing_below_final(x86_build, zendnn_build):
    """Same target, same torch: the zendnn image's earlier stages are the onednn chain's, by name
    and from the engine's cache, every step of them (the build's own summary says so)."""
    onednn, zendnn = by_stage(x86_build), by_stage(zendnn_build)
    for stage in LOWER:
        assert zendnn[stage]["image"] == onednn[stage]["image"], stage
        assert zendnn[stage]["status"] == "cached" and zendnn[stage]["ran"] == [], zendnn[stage]
    assert zendnn["final"]["status"] == "built"


@pytest.fixture(scope="session")
def engine_b() -> str:
    """The second engine's DOCKER_HOST (hosts.SECOND_ENGINE: started, empty, for the build below
    or when a test first asks; stopped when the session ends)."""
    return SECOND_ENGINE.get()


@pytest.fixture(scope="session")
def built_on_b(pushed, engine_b) -> dict:
    """The README's request on the empty second engine, with the registry engine A pushed its
    stages to as --cache-from (images.py: in the background from the moment they were
    there); its JSON summary."""
    built = IMAGES.result("built_on_b")
    assert "--cache-from: pulled" in built["output"], built["output"][-3000:]
    return built


def test_an_empty_engine_compiles_nothing_its_registry_holds(client, x86_build, built_on_b, engine_b):
    on_b = by_stage(built_on_b)
    assert "failed" not in built_on_b["checks"] and "passed" in built_on_b["checks"], built_on_b["checks"]
    # numpy's compile came from the registry: the only steps that ran below the final stage are
    # the tools stage's throwaway download of numpy's build requirements (with the CA bundle).
    assert not any("build-numpy.sh" in step for step in on_b["tools"]["ran"]), on_b["tools"]["ran"]
    assert only_fetched(on_b["tools"]["ran"]), on_b["tools"]["ran"]
    for stage in ("base", "libs", "dev"):
        assert on_b[stage]["ran"] == [], on_b[stage]
    # The very images engine A built, by ID.
    other = docker.DockerClient(base_url=engine_b)
    for stage in LOWER:
        assert other.images.get(on_b[stage]["image"]).id == client.images.get(by_stage(x86_build)[stage]["image"]).id, stage


def test_the_release_image_on_the_other_engine_holds_what_engine_a_built(client, x86_build, built_on_b, engine_b):
    other = docker.DockerClient(base_url=engine_b)
    mine, theirs = client.images.get(x86_build["final_image"]), other.images.get(built_on_b["final_image"])
    assert built_on_b["final_image"] == x86_build["final_image"]
    # Not the same image ID (the venv is installed again here, its files of other times), but the
    # same release: the same records and packages at the same versions, so that a scheduled rebuild
    # on a new runner that changed nothing publishes nothing.
    assert theirs.labels["io.torchstack.content"] == mine.labels["io.torchstack.content"]
    assert theirs.labels["io.torchstack.build-info"] == mine.labels["io.torchstack.build-info"]
    assert theirs.labels["io.torchstack.torch.version"] == mine.labels["io.torchstack.torch.version"]
    listed = [
        engine.containers.run(image.id, ["python3", "-c", DISTRIBUTIONS], remove=True, network_mode="none").decode()
        for engine, image in ((client, mine), (other, theirs))
    ]
    assert listed[0] == listed[1] and "torch==" in listed[0], listed


def test_a_change_to_the_final_stage_on_the_other_engine_rebuilds_final_only(built_on_b, registry, engine_b, repo_copy, tmp_path):
    example = repo_copy / "examples" / "README.md"
    example.write_text(example.read_text() + "\nChanged by a test: a file of the final stage only.\n")
    summary = tmp_path / "changed.json"
    other = docker.DockerClient(base_url=engine_b)
    ids = {s["stage"]: other.images.get(s["image"]).id for s in built_on_b["stages"] if s["stage"] in LOWER}
    result = run_build_py(
        *X86_ARGS,
        "--torch-wheel",
        x86_wheelhouse(),
        "--cache-from",
        f"{registry}/ml",
        "--no-test",
        "--json",
        str(summary),
        cwd=repo_copy,
        env={"DOCKER_HOST": engine_b},
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    stages = by_stage(json.loads(summary.read_text()))
    for name in LOWER:
        assert only_fetched(stages[name]["ran"]), stages[name]
        assert other.images.get(stages[name]["image"]).id == ids[name], name
    copies_examples = ("COPY examples/", "source=examples,")  # the legacy builder's COPY, BuildKit's copying step
    assert stages["final"]["status"] == "built" and any(c in step for step in stages["final"]["ran"] for c in copies_examples)
    # The runtime's steps before the venv (its Debian packages) come from B's own final image,
    # named as a cache source; the venv, copied from the throwaway install stage, differs with
    # every pip install, so the steps from there on run.
    assert not any("apt-get install" in step for step in stages["final"]["ran"]), stages["final"]["ran"]


# BuildKit's half of the proof, on the tools stage (numpy compiled with the compiler cache): the
# session's BuildKit chain (images.py: buildkit_first) built this very request under a tag of its
# own, so engine A takes it from its cache. With the `docker` driver, BuildKit exports inline
# cache only: the layers of each image it builds, which the push then carries.
@pytest.fixture(scope="module")
def buildkit_pushed(client, registry, buildkit_first):
    result = run_build_py(*BUILDKIT_TOOLS, "--push", "--push-stages", "--registry", f"{registry}/bk")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    yield
    untag(client, f"{registry}/bk/")
    untag(client, f":{BUILDKIT_TOOLS[-1]}")


@pytest.mark.buildkit
def test_buildkit_on_an_empty_engine_takes_the_compile_from_the_registrys_inline_cache(
    client, buildkit_pushed, registry, engine_b, tmp_path
):
    summary = tmp_path / "buildkit.json"
    result = run_build_py(*BUILDKIT_TOOLS, "--cache-from", f"{registry}/bk", "--json", str(summary), env={"DOCKER_HOST": engine_b})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    built = json.loads(summary.read_text())
    stages = by_stage(built)
    assert "passed" in built["checks"] and "failed" not in built["checks"], built["checks"]
    # Every stage as engine A built it, from its first step: the fetch stage is not in the inline
    # cache, so its download runs again, and its files, byte for byte the same, let every step after
    # it match the registry's.
    seen = _chains(client, docker.DockerClient(base_url=engine_b), built)
    assert stages["base"]["ran"] == [] and stages["libs"]["ran"] == [], seen
    assert not any("build-numpy.sh" in step for step in stages["tools"]["ran"]), seen
    assert only_fetched(stages["tools"]["ran"]), seen


def _chains(client, other, built: dict) -> str:
    """What each engine holds under the names the build on engine B used: the OS image and each
    stage, by ID and layers, with the steps that ran on B: what a failed reuse is read from."""
    lines = []
    for stage in built["stages"]:
        name = stage["image"]
        for engine, which in ((client, "A"), (other, "B")):
            try:
                image = engine.images.get(name)
                parent = image.attrs["Config"].get("Image") or ""
                lines.append(f"{which} {name} {image.id[:19]} layers={[d[7:19] for d in image.attrs['RootFS']['Layers']]} {parent[:19]}")
            except docker.errors.ImageNotFound:
                lines.append(f"{which} {name}: not there")
        lines.append(f"B ran {stage['status']}: {[step[:70] for step in stage['ran']]}")
    for engine, which in ((client, "A"), (other, "B")):
        found = [f"{t} {i.id[:19]}" for i in engine.images.list() for t in i.tags if "torchstack-os:" in t]
        lines.append(f"{which} OS images: {found}")
    return "\n".join(lines)
