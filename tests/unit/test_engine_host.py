"""The image checks' commands on Podman: a read its remote client lost is made again, nothing else is."""

from testinfra.backend.base import CommandResult
from testinfra.backend.podman import PodmanBackend

from tests.image.engine_host import LOST_STREAM, READS, engine_host


def test_a_command_whose_output_podmans_client_lost_is_read_again_and_only_that(monkeypatch):
    answers, ran = [], []

    def run(self, command, *args, **kwargs):
        ran.append(command)
        rc, stderr = answers.pop(0)
        return CommandResult(self, rc, command.encode(), b"", stderr.encode())

    monkeypatch.setattr(PodmanBackend, "run", run)
    host = engine_host("podman", "root@0123456789ab")
    assert engine_host("podman", "root@0123456789ab").backend.run is host.backend.run, "wrapped once however often asked"
    lost = (125, f'Error: channel "68" found, 0-3 supported: {LOST_STREAM}\n')
    answers[:] = [lost, (0, "")]
    assert host.run("cat /etc/os-release").rc == 0 and len(ran) == 2
    answers[:], ran[:] = [(125, "Error: no container with that ID\n"), (0, "")], []
    assert host.run("true").rc == 125 and len(ran) == 1, "an engine's own error is the result"
    answers[:], ran[:] = [lost] * READS, []
    assert host.run("true").rc == 125 and len(ran) == READS
    assert not hasattr(engine_host("docker", "0123456789ab").backend, "steady")
