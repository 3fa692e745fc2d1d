"""The image checks' commands on Podman: a command whose output Podman's remote client lost is read
again, and a read that stays lost is a failure that says so, never an empty answer."""

import re
import subprocess

from testinfra.backend.base import CommandResult
from testinfra.backend.podman import PodmanBackend

from tests.image.engine_host import LOST_STREAM, READS, engine_host, framed, unframed


def _shell(line: str) -> CommandResult:
    done = subprocess.run(["/bin/sh", "-c", line], capture_output=True)
    return CommandResult(None, done.returncode, line.encode(), done.stdout, done.stderr)


def test_a_framed_command_gives_back_its_own_status_and_output_through_a_real_shell():
    mark = "torchstack-0123abcd-"
    for line, status, out, err in (
        ("printf 'a\\nb'; echo oops >&2; exit 3", 3, b"a\nb", b"oops\n"),
        ("exec true", 0, b"", b""),
        ("cat /no/such/file # a comment at the end", 1, b"", None),
    ):
        done = _shell(framed(line, mark))
        assert done.exit_status == status
        whole = unframed(done.stdout_bytes, done.stderr_bytes, mark)
        assert whole is not None and whole[:2] == (status, out), (line, done)
        assert err is None or whole[2] == err, whole


def test_output_with_its_frame_cut_anywhere_is_lost():
    mark = "torchstack-0123abcd-"
    done = _shell(framed("echo hello; echo warn >&2", mark))
    out, err = done.stdout_bytes, done.stderr_bytes
    assert unframed(out, err, mark) == (0, b"hello\n", b"warn\n")
    assert unframed(b"", b"", mark) is None, "an empty answer (containers/podman#25855)"
    for cut in (out[3:], out[:-1], out[: len(mark) + 3]):
        assert unframed(cut, err, mark) is None, cut
    assert unframed(out, err[: len(mark)], mark) is None
    assert unframed(out, b"WARN[0000] the client's own words\n" + err, mark)[2] == b"WARN[0000] the client's own words\nwarn\n"


def test_a_command_whose_output_podmans_client_lost_is_read_again_and_only_that(monkeypatch):
    answers, ran = [], []

    def run(self, command, *args, **kwargs):
        """Podman's exec of the framed line: its real output through a shell, or a loss."""
        ran.append(command)
        answer = answers.pop(0)
        if answer == "real":
            return _shell(command)
        rc, stderr = answer
        return CommandResult(self, rc, command.encode(), b"", stderr.encode())

    monkeypatch.setattr(PodmanBackend, "run", run)
    host = engine_host("podman", "root@0123456789ab")
    assert engine_host("podman", "root@0123456789ab").backend.run is host.backend.run, "wrapped once however often asked"
    lost = (125, f'Error: channel "68" found, 0-3 supported: {LOST_STREAM}\n')
    answers[:] = [lost, (0, ""), "real"]
    read = host.run("echo %s; exit 4", "VERSION_CODENAME=bookworm")
    assert (read.rc, read.stdout, read.stderr, len(ran)) == (4, "VERSION_CODENAME=bookworm\n", "", 3)
    assert read.command == b"echo VERSION_CODENAME=bookworm; exit 4" and re.search(r"torchstack-[0-9a-f]{16}-", ran[0])
    answers[:], ran[:] = [(125, "Error: no container with ID 0123456789ab found\n")], []
    assert host.run("true").rc == 125 and len(ran) == 1, "the engine's own error is the result: the command did not run"
    answers[:], ran[:] = [(0, "")] * READS, []
    gone = host.run("cat /etc/os-release")
    assert gone.rc == 125 and len(ran) == READS and "lost this command's output" in gone.stderr
    assert not hasattr(engine_host("docker", "0123456789ab").backend, "steady")
