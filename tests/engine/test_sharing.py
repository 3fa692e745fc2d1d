"""One build host, many runs: builds at once, and a run cancelled during its checks (a run cancelled
during a stage build: test_build.py; what the whole test run leaves: tests/conftest.py)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from tests import session
from tests.engine.conftest import leftovers_of, untag
from tests.engine.images import X86_ARGS, X86_DISTRIBUTION, run_build_py, x86_wheelhouse
from torchstack.base import sharing, state
from torchstack.catalog.model import ROOT
from torchstack.registries import registry as registry_api

pytestmark = pytest.mark.engine


def _start(*args: str) -> subprocess.Popen:
    command = [sys.executable, str(ROOT / "build.py"), *args]
    return session.popen(command, cwd=ROOT, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _wait_for_a_container(client, run: subprocess.Popen, owner: str) -> None:
    """Until the checks of `run` (whose owner label is `owner`) have started a container (2 minutes at most)."""
    deadline = time.monotonic() + 120
    while not client.containers.list(filters={"label": f"{sharing.LABEL}={owner}"}):
        assert time.monotonic() < deadline and run.poll() is None, "the checks started no container"
        time.sleep(0.5)


def test_three_builds_at_once_end_alike_and_the_slim_one_ships_no_compiler(client, x86_build, tmp_path):
    """As parallel CI jobs on one host start them: the slim runtime twice (one final stage to build:
    the second waits for the first, saying so, then takes its image) and the README's image again.
    --runtime slim is the same chain with a final image without the toolchain: its checks pass
    only if torch.compile is refused with InvalidCxxCompiler and no compiler is left."""
    wheels = x86_wheelhouse()
    requests = {"slim": ["--runtime", "slim", "--recheck"], "slim again": ["--runtime", "slim"], "full": []}
    runs = {
        name: _start(*X86_ARGS, "--torch-wheel", wheels, *extra, "--json", str(tmp_path / f"{name}.json"))
        for name, extra in requests.items()
    }
    said = {name: run.communicate(timeout=1800) for name, run in runs.items()}
    try:
        for name, run in runs.items():
            assert run.returncode == 0, f"{name}: {said[name][1][-3000:]}"
        built = {name: json.loads((tmp_path / f"{name}.json").read_text()) for name in runs}
        assert built["slim"]["image_id"] == built["slim again"]["image_id"]
        assert built["full"]["image_id"] == x86_build["image_id"]
        assert "waiting for " in said["slim"][1] + said["slim again"][1], "neither slim build waited for the other"
        slim = built["slim"]
        assert slim["final_image"] == x86_build["final_image"].replace("-openblas.distro-", "-slim-openblas.distro-")
        assert "failed" not in slim["checks"] and "passed" in slim["checks"], slim["checks"]
        statuses = {s["stage"]: s["status"] for s in slim["stages"]}
        # Only the final stage differs: the chain the x86 build made is reused as it is.
        assert [statuses[stage] for stage in ("base", "libs", "tools", "dev")] == ["cached"] * 4, statuses
        image = client.images.get(slim["final_image"])
        assert image.id == slim["image_id"] and image.labels["io.torchstack.runtime"] == "slim"
        full_size = client.images.get(x86_build["final_image"]).attrs["Size"]
        print(
            f"final image {full_size / 2**20:,.0f} MiB, slim {image.attrs['Size'] / 2**20:,.0f} MiB: "
            f"torch.compile's toolchain is {(full_size - image.attrs['Size']) / 2**20:,.0f} MiB"
        )
        assert image.attrs["Size"] < full_size
    finally:
        untag(client, "-slim-")


# Ctrl-C: the run removes what it started. SIGKILL (what a CI runner sends when SIGTERM was not
# enough): nothing can run, so the next run on the host removes what the killed one left.
@pytest.mark.parametrize(("sent", "code"), [(signal.SIGINT, 130), (signal.SIGKILL, -9)])
def test_a_run_stopped_during_its_checks_leaves_no_container_no_tag_no_context_and_the_rebuild_is_cached(
    client, x86_build, unique_tag, tmp_path, sent, code
):
    build = _start(*X86_ARGS, "--torch-wheel", x86_wheelhouse(), "--tag", unique_tag, "--recheck")
    owner = sharing.identity(build.pid)
    for line in build.stderr:
        if line.startswith("torchstack: checking "):
            break
    # The session's runs so far: each had the seconds until the signal to sweep at its start.
    runs_before = len(session.owners())
    _wait_for_a_container(client, build, owner)
    time.sleep(2)
    build.send_signal(sent)
    _, rest = build.communicate(timeout=120)
    assert build.returncode == code, rest
    if sent == signal.SIGINT:
        assert rest.strip().splitlines()[-1] == "torchstack: error: interrupted", rest[-2000:]
        assert not leftovers_of(client, owner)
    else:
        assert leftovers_of(client, owner), "a SIGKILLed run left nothing: the test proves nothing"
        time.sleep(2)  # its checks' pytest ends with it (sharing.die_with_parent), leaving its containers
    # The final stage's image (`torchstack-final:TAG`, README "What an image says about itself") is
    # the engine's cache the rebuild continues from; the release name is what the checks gate.
    assert f"torchstack:{unique_tag}" not in {t for image in client.images.list() for t in image.tags}

    summary = tmp_path / "again.json"
    again = run_build_py(*X86_ARGS, "--torch-wheel", x86_wheelhouse(), "--tag", unique_tag, "--no-test", "--json", str(summary))
    assert again.returncode == 0, again.stderr[-3000:]
    assert [s["status"] for s in json.loads(summary.read_text())["stages"]] == ["cached"] * 5
    assert not leftovers_of(client, owner)
    # The next run on the host removes what the killed one left, and says so: this rebuild, where no
    # other run of the session (images.py builds beside the tests) started since the checks began,
    # which could sweep first.
    if sent == signal.SIGKILL and len(session.owners()) == runs_before + 1:
        assert "torchstack: removed what ended runs left behind: " in again.stderr, again.stderr[-2000:]


REMOVED_BY_ANOTHER_RUN = "another run of the session (images.py builds beside the tests) started and removed them first"


def test_a_check_run_killed_outright_leaves_containers_that_the_next_check_run_removes(client, x86_build):
    """`./build.py test` SIGKILLed (a CI runner's last word, or a benchmark's timeout) cannot clean
    up: the next run on the host, a check run as well as a build, removes what it left."""
    image = x86_build["final_image"]
    killed = _start("test", image)
    owner = sharing.identity(killed.pid)
    _wait_for_a_container(client, killed, owner)
    runs_before = len(session.owners())
    killed.kill()
    killed.communicate(timeout=60)
    time.sleep(2)  # its pytest ends with it (sharing.die_with_parent), leaving its containers
    if not leftovers_of(client, owner) and len(session.owners()) > runs_before:
        pytest.skip(REMOVED_BY_ANOTHER_RUN)
    assert leftovers_of(client, owner), "a SIGKILLed check run left nothing: the test proves nothing"
    runs_before = len(session.owners())
    again = run_build_py("test", image, "-k", "no_build_tools")
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    removed = "torchstack: removed what ended runs left behind: " in again.stderr and owner in again.stderr
    if not removed and len(session.owners()) > runs_before + 1:  # a run besides `again` started meanwhile
        pytest.skip(REMOVED_BY_ANOTHER_RUN)
    assert removed, again.stderr
    assert not leftovers_of(client, owner)


@pytest.mark.buildkit
def test_a_stage_name_another_run_gives_its_own_image_meanwhile_changes_nothing_pushed(client, registry, unique_tag, tmp_path):
    """One request twice at once, one run pushing its stages for other hosts' --cache-from: BuildKit
    gives that run's stage images its cache record, the other run's not, and each run tags the
    shared stage name in turn. Here the other run's image takes the name while the pushing run waits
    for its release (the test holds that lock): the push still sends the image the pushing run made,
    with its record, and the checked one under the release tag."""
    args = ["--build-type", "base", *X86_DISTRIBUTION, "--builder", "buildx", "--tag", unique_tag]
    plain = run_build_py(*args, "--no-test", "--json", str(tmp_path / "plain.json"))
    assert plain.returncode == 0, plain.stderr[-3000:]
    built = json.loads((tmp_path / "plain.json").read_text())
    stage, other = built["stages"][0]["image"], built["stages"][0]["image_id"]
    top = f"torchstack-base:{unique_tag}"
    with sharing.lock(state.state_dir() / "locks", f"{built['engine']['url']} {top} release", lambda _: None):
        run = _start(*args, "--push", "--push-stages", "--registry", f"{registry}/retag", "--json", str(tmp_path / "pushed.json"))
        said = []
        for line in run.stderr:
            said.append(line)
            if "waiting for " in line:
                break
        assert said and "waiting for " in said[-1], "".join(said[-30:])
        repository, _, tag = stage.rpartition(":")
        client.images.get(other).tag(repository, tag)
    _, rest = run.communicate(timeout=900)
    try:
        assert run.returncode == 0, "".join(said) + rest[-3000:]
        pushed = json.loads((tmp_path / "pushed.json").read_text())
        made = pushed["stages"][0]["image_id"]
        assert made != other, "both runs made one image: nothing tells the pushed one from the other"
        sent = {p["reference"]: p["digest"] for p in pushed["pushed"]}
        where = registry_api.Registry(registry)
        # An image's ID is its config's digest, or on Docker's containerd image store its manifest's.
        ids = {
            name: {digest, where.manifest(registry_api.parse(f"{name}@{digest}"))[1]["config"]["digest"]} for name, digest in sent.items()
        }
        assert made in ids[f"{registry}/retag/{stage}"], (made, ids)
        assert pushed["image_id"] == client.images.get(top).id and pushed["image_id"] in ids[f"{registry}/retag/{top}"], ids
    finally:
        untag(client, f"{registry}/retag/")
