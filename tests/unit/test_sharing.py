"""Runs that share a host: owners, locks, and what a killed run leaves (the engine's side is in
tests/engine/test_sharing.py)."""

import os
import signal
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import pytest

from tests.memory_engine import memory_engine
from torchstack.base import sharing
from torchstack.engines.docker_engine import DockerEngine
from torchstack.engines.engine import CommandFailed


def test_a_live_process_is_not_gone_and_an_ended_one_is():
    ended = subprocess.Popen(["true"])
    ended.wait()
    assert not sharing.gone(sharing.identity())
    assert sharing.gone(sharing.identity().rsplit("/", 2)[0] + f"/{ended.pid}/1")
    # a pid taken again by a new process: its start time differs
    assert sharing.gone(sharing.identity().rsplit("/", 1)[0] + "/0")
    # another host's run cannot be judged here, so it is left alone
    assert not sharing.gone(f"another-host/{ended.pid}/1")


def test_the_checks_get_the_owner_of_the_run_that_started_them(monkeypatch):
    monkeypatch.delenv(sharing.ENV, raising=False)
    mine = sharing.owner()
    assert mine == sharing.identity()
    monkeypatch.setenv(sharing.ENV, "build-host/42/7")
    assert sharing.labels() == {sharing.LABEL: "build-host/42/7"}


def test_what_an_ended_run_left_is_removed_and_a_running_runs_is_kept(tmp_path):
    ended = subprocess.Popen(["true"])
    ended.wait()
    dead = sharing.identity().rsplit("/", 2)[0] + f"/{ended.pid}/1"
    engine = memory_engine()
    theirs, ours = engine.leave_container(dead), engine.leave_container(sharing.identity())
    their_tag = f"{sharing.WORK_REPOSITORY}:{ended.pid}-1-0123abcd"
    our_tag = sharing.work_tag()
    for tag in (their_tag, our_tag):
        engine.held.add(tag)
    kept_folder = sharing.private_folder(tmp_path, "r26.11-torch-2.13.0-openblas")
    left_folder = tmp_path / f"{dead.replace('/', '+')}+r26.11-torch-2.13.0-openblas"
    (left_folder / "final").mkdir(parents=True)

    said = sharing.remove_leftovers(engine, tmp_path)

    assert [c for c in engine.held.calls if c.startswith("remove")] == [f"remove container {theirs}", f"remove {their_tag}"]
    assert list(engine.held.containers) == [ours] and our_tag in engine.held.names
    assert not left_folder.exists() and kept_folder.is_dir()
    assert said == [f"1 container(s) of {dead}", their_tag, str(left_folder)]
    # What a run says of it, in one line; nothing when nothing was left.
    assert sharing.sweep(engine, tmp_path) == []
    (left_folder / "final").mkdir(parents=True)
    assert sharing.sweep(engine, tmp_path) == [f"torchstack: removed what ended runs left behind: {left_folder}"]


def test_a_second_run_waits_for_the_lock_saying_so_once(tmp_path):
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from torchstack.base import sharing\n"
            f"with sharing.lock(Path({str(tmp_path)!r}), 'torchstack-dev:abc', print):\n"
            "    print('held', flush=True); time.sleep(1.5)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "held"
    said = []
    started = time.monotonic()
    with sharing.lock(tmp_path, "torchstack-dev:abc", said.append):
        waited = time.monotonic() - started
    holder.wait()
    assert waited > 0.5
    assert said == [f"torchstack: waiting for run {holder.pid}, which is building torchstack-dev:abc on this host"]


def test_a_lock_whose_holder_was_killed_is_free(tmp_path):
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time; from pathlib import Path; from torchstack.base import sharing\n"
            f"with sharing.lock(Path({str(tmp_path)!r}), 'x', print):\n"
            "    print('held', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "held"
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    said = []
    with sharing.lock(tmp_path, "x", said.append):
        pass
    assert said == []


def test_sigterm_unwinds_like_ctrl_c_and_says_143():
    # The session's own handlers are put back after: the engine tests' SIGTERM handler (a CI job's
    # cancel tears the session down) was lost for the rest of the run when this reset it to the default.
    before = {sent: signal.getsignal(sent) for sent in (signal.SIGINT, signal.SIGTERM)}
    sharing.handle_signals()
    cleaned = []
    try:
        with pytest.raises(sharing.Terminated) as raised:
            try:
                threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGTERM)).start()
                time.sleep(5)
            finally:
                cleaned.append(True)
    finally:
        for sent, handler in before.items():
            signal.signal(sent, handler)
    assert cleaned == [True]
    assert sharing.exit_code(raised.value) == 143 and sharing.exit_code(KeyboardInterrupt()) == 130


def test_a_run_on_another_engine_does_not_wait_for_an_image_of_the_same_name(tmp_path, monkeypatch):
    """Each engine keeps its own images: the lock on a name is the engine's (its API socket), so a
    second dockerd's or Podman's build of the same request goes on; the same engine's waits."""
    from torchstack.engines import connection
    from torchstack.making import building

    monkeypatch.setattr(building.state, "state_dir", lambda: tmp_path)
    docker_engine = connection.engine_of("docker", "unix:///var/run/docker.sock", "the default")
    podman_engine = connection.engine_of("podman", "unix:///run/podman/podman.sock", "--engine podman")
    name = "torchstack-final:r26.11-torch-2.13.0-onednn"
    held, release = threading.Event(), threading.Event()

    def hold():
        with building.lock(docker_engine, name, SimpleNamespace(note=print)):
            held.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait(10)
    said = []
    with building.lock(podman_engine, name, SimpleNamespace(note=said.append)):
        assert said == []
    threading.Timer(0.5, release.set).start()
    with building.lock(docker_engine, name, SimpleNamespace(note=said.append)):
        assert said == [f"torchstack: waiting for run {os.getpid()}, which is building {name} on this host"]
    holder.join()


def test_a_lock_on_a_long_name_fits_in_a_file_name(tmp_path):
    long = "unix:///run/user/1000/podman/podman.sock torchstack-final:" + "r26.11-torch-2.13.0-" + "plugin-0.1.0-" * 30
    with sharing.lock(tmp_path, long, print):
        with sharing.lock(tmp_path, long + "x", print):  # another name: another lock, no wait
            pass
    assert all(len(p.name) <= 255 for p in tmp_path.iterdir()) and len(list(tmp_path.iterdir())) == 2


class _Ended:
    """A container as the engine's API shows one that ends at once: its output there once it has ended."""

    def __init__(self, code: int):
        self.code, self.calls = code, []

    def start(self):
        self.calls.append("start")

    def wait(self):
        self.calls.append("wait")
        return {"StatusCode": self.code}

    def logs(self, stdout=True, stderr=False):
        self.calls.append(f"logs {stdout} {stderr}")
        return b"out\n" if stdout else b"err\n"

    def remove(self, force=False):
        self.calls.append("remove")


def test_a_containers_output_is_read_once_it_has_ended_and_the_container_removed():
    """Podman 5's API often answers nothing to a follower of a container that ended at once (the SDK's
    containers.run follows): the output is read after the wait."""
    ended = _Ended(0)
    created = []
    client = SimpleNamespace(containers=SimpleNamespace(create=lambda image, command, **options: created.append(options) or ended))
    engine = DockerEngine("docker", "unix:///x.sock", "a test's", sdk=client)
    assert engine.output_of("img", ["true"], network_mode="none") == b"out\n"
    assert ended.calls == ["start", "wait", "logs True False", "remove"]
    assert created[0]["labels"] == sharing.labels() and created[0]["network_mode"] == "none"
    failed = _Ended(3)
    client.containers.create = lambda image, command, **options: failed
    with pytest.raises(CommandFailed, match="^false in img exited 3: err$"):
        engine.output_of("img", ["false"])
    assert failed.calls[-1] == "remove"
