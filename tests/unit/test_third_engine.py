"""A third kind of engine, with no Docker client at all (tests/memory_engine.py), registered as one more
of `KINDS`: the toolkit chooses it, builds a whole plan on it, pushes an image through it and runs the
checks against it, and every engine operation it asks for is one of the engine's methods. What it took is
docs/contributing/layout.md's "What a third engine adds"."""

from __future__ import annotations

import json

import pytest

from tests.memory_engine import MemoryEngine, memory_engine
from tests.unit.test_check_selection import selection_tree
from torchstack.base.errors import ToolkitError
from torchstack.base.layout import VENV
from torchstack.engines import connection
from torchstack.making import archive
from torchstack.making.archive import DPKG_STATUS
from torchstack.publishing import pushing
from torchstack.request.run_settings import RunOptions
from torchstack.run import pipeline
from torchstack.run.settle import Settled
from torchstack.verify import checks

INVENTORY = {"python": [["torch", "2.13.0", "BSD-3-Clause"]], "debian": [["libc6", "2.41-12", "amd64", "glibc"]]}


@pytest.fixture
def registered(monkeypatch):
    """`memory` as one more kind: the one line of KINDS a third engine adds."""
    monkeypatch.setitem(connection.KINDS, "memory", MemoryEngine)


def test_a_third_kind_is_chosen_by_name_and_known_by_its_answer(registered):
    chosen = connection.choose("memory", environ={}, uid=0)
    assert isinstance(chosen, MemoryEngine) and chosen.why == "--engine memory"
    assert connection.kind_of({"Platform": {"Name": "memory"}}) == "memory"
    assert connection.kind_of({"Platform": {"Name": "Docker Engine - Community"}}) == "docker"


def test_a_whole_build_runs_on_an_engine_without_a_docker_client(registered, monkeypatch, tmp_path, catalog, plan_for, capsys):
    """The README's request, on a base image of the user's (no bootstrap, no Debian archive read), with
    --no-test: every stage built, the release image's records read from it, its tag given."""
    monkeypatch.setenv("TORCHSTACK_CACHE", str(tmp_path / "cache"))
    plan = plan_for(builder="docker", methods={"openblas": "distro"}, base_image="debian:trixie-slim")
    engine = memory_engine(outputs={f"{VENV}/bin/python3": json.dumps(INVENTORY).encode()})
    engine.held.add("debian:trixie-slim")
    monkeypatch.setattr(pipeline.connection, "connect", lambda chosen: engine)
    monkeypatch.setattr(pipeline.sources, "fetch_plan_sources", lambda plan, mirror: {})
    monkeypatch.setattr(pipeline.prerequisites, "require", lambda plan, bootstrap: None)
    settled = Settled(request=None, plan=plan, run=RunOptions(no_test=True, quiet=True), pushes=(), notes=(), engine=engine)

    pipeline.run_build(catalog, settled)

    built = [call.removeprefix("build ") for call in engine.held.calls if call.startswith("build ")]
    assert built == [*(s.image for s in plan.stages), "sbom"], built
    release = engine.image(plan.top_image)
    assert json.loads(release.labels["io.torchstack.build-info"])["engine"] == {"kind": "memory", "store": ""}
    assert capsys.readouterr().out.strip().splitlines()[-1] == plan.top_image
    assert not engine.held.containers  # what the run started, it removed


def test_a_push_goes_through_the_engine_and_says_its_digest(registered):
    engine = memory_engine()
    image = engine.held.add("torchstack:r26.11")
    said = []
    pushed = pushing.push(engine, "torchstack:r26.11", "registry.example/ml/torchstack:r26.11", said.append)
    assert pushed.digest == image.id and pushed.layers == 1 and engine.held.registry == {"registry.example/ml/torchstack:r26.11": image.id}
    assert said == ["torchstack: pushing registry.example/ml/torchstack:r26.11: 1/1 layers"]


def test_a_refused_push_is_one_line_with_the_engines_own_hint(registered):
    engine = memory_engine()
    engine.held.add("torchstack:r26.11")

    def refused(repository, tag):
        raise pushing.EngineRefused("unauthorized: authentication required")
        yield  # a generator, as an engine's push is

    object.__setattr__(engine, "push", refused)
    with pytest.raises(pushing.LoginRefused, match="log in to registry.example in memory, then run the same command again"):
        pushing.push(engine, "torchstack:r26.11", "registry.example/ml/torchstack:r26.11", print)


def test_the_checks_run_against_it_and_what_they_left_is_removed(registered, catalog, tmp_path, monkeypatch):
    engine = selection_tree(tmp_path, monkeypatch)
    left = engine.leave_container()  # as a check's container that outlived it
    outcome = checks.run_checks(engine, catalog, "any", select="passes")
    assert outcome.passed and left not in engine.held.containers


def test_an_image_without_dpkgs_status_is_refused_not_taken_for_one_with_nothing_installed():
    engine = memory_engine()
    image = engine.held.add("plain:1")
    with pytest.raises(ToolkitError, match="^plain:1 has no /var/lib/dpkg/status: its installed Debian packages cannot be read$"):
        archive.installed(engine, "plain:1")
    engine.held.files[image.id] = {DPKG_STATUS: [b"Package: libc6\nStatus: install ok installed\nVersion: 2.41-12\n"]}
    assert archive.installed(engine, "plain:1") == {"libc6": "2.41-12"}
