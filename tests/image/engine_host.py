"""A container as testinfra reaches it, through the engine's own CLI, steady on Podman's remote client."""

from __future__ import annotations

import testinfra

# Podman's remote client (podman exec through the API service) now and then reads a frame of a
# command's output as a header and gives up (containers/podman#15321, a known flake): the command
# ran, its output was lost. Such a read is made again; any other result is the command's own.
LOST_STREAM = "lost synchronization with multiplexed stream"
READS = 3


def engine_host(engine: str, target: str):
    """testinfra's host for `target` (a container ID, with `user@` before it) through `engine`'s CLI."""
    host = testinfra.get_host(f"{engine}://{target}")
    backend = host.backend
    if engine != "podman" or getattr(backend, "steady", False):
        return host
    run = backend.run

    def steady(command, *args, **kwargs):
        for _ in range(READS):
            result = run(command, *args, **kwargs)
            if not (result.rc == 125 and LOST_STREAM in result.stderr):
                break
        return result

    backend.run, backend.steady = steady, True
    return host
