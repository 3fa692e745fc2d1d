"""A container as testinfra reaches it, through the engine's own CLI, steady on Podman's remote client."""

from __future__ import annotations

import secrets

import testinfra

# Podman's remote client (podman exec through the API service, as with CONTAINER_HOST) now and then
# loses a command's output: it reads a frame of it as a header and gives up (containers/podman#15321),
# or it ends with the command's status and none, or only part, of what the command wrote
# (containers/podman#25855, open). So each command's output is framed by a mark of its own, at the
# start and the end of stdout and of stderr, the end of stdout with the command's status; a result
# without its whole frame is read again (the checks' commands read; they change nothing that a
# second run minds), and after READS such reads it is a failure that says so, never a silent empty
# answer that a check would take for the image's.
LOST_STREAM = "lost synchronization with multiplexed stream"
READS = 4
LOST = "torchstack: Podman's remote client lost this command's output {reads} times (containers/podman#25855)\n"


def framed(command: str, mark: str) -> str:
    """`command` (a shell command line) with `mark` written before and after its output on both
    streams, its exit status after the last mark on stdout. It runs in a subshell: an `exit` or
    `exec` of its own ends the subshell, not the frame."""
    start = f"printf %s {mark}; printf %s {mark} >&2"
    end = f'status=$?; printf %s%d {mark} "$status"; printf %s {mark} >&2; exit "$status"'
    return f"{start}; (\n{command}\n); {end}"


def unframed(stdout: bytes, stderr: bytes, mark: str) -> tuple[int, bytes, bytes] | None:
    """The command's status, stdout and stderr from a framed run's streams; None when a frame is not
    whole (the client lost some of the output). Stderr outside its frame is Podman's own, kept."""
    token = mark.encode()
    end = stdout.rfind(token)
    status = stdout[end + len(token) :]
    if not stdout.startswith(token) or end < len(token) or not status.isdigit():
        return None
    first, last = stderr.find(token), stderr.rfind(token)
    if first < 0 or last == first:
        return None
    return int(status), stdout[len(token) : end], stderr[:first] + stderr[first + len(token) : last] + stderr[last + len(token) :]


def engine_host(engine: str, target: str):
    """testinfra's host for `target` (a container ID, with `user@` before it) through `engine`'s CLI."""
    host = testinfra.get_host(f"{engine}://{target}")
    backend = host.backend
    if engine != "podman" or getattr(backend, "steady", False):
        return host
    run = backend.run

    def steady(command, *args, **kwargs):
        line = backend.quote(command, *args)
        mark = f"torchstack-{secrets.token_hex(8)}-"
        for _ in range(READS):
            result = run(framed(line, mark), **kwargs)
            whole = unframed(result.stdout_bytes, result.stderr_bytes, mark)
            if whole is not None:
                return backend.result(whole[0], backend.encode(line), whole[1], whole[2])
            seen = result.stdout_bytes + result.stderr_bytes
            if result.rc == 125 and LOST_STREAM.encode() not in seen and mark.encode() not in seen:
                return result  # Podman's own error (no such container, ...): the command did not run
        lost = LOST.format(reads=READS).encode()
        return backend.result(result.rc or 125, backend.encode(line), result.stdout_bytes, lost + result.stderr_bytes)

    backend.run, backend.steady = steady, True
    return host
