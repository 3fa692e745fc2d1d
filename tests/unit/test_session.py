"""The test session's own housekeeping (tests/session.py): the roots of sessions killed before their
end (a CI job at its time limit) are removed by the next session; a running session's, and a folder
that is no session's, are not."""

from __future__ import annotations

import os
import subprocess

from tests import session


def _root(parent, name: str, owner: str | None):
    root = parent / name
    (root / "engine" / "data").mkdir(parents=True)
    if owner is not None:
        (root / session.OWNER_FILE).write_text(owner)
    return root


def test_a_killed_sessions_root_goes_and_a_running_ones_stays(tmp_path, monkeypatch):
    finished = subprocess.Popen(["true"])
    finished.wait()
    killed = _root(tmp_path, "tst-killed", f"{finished.pid} 1\n")  # its pid gone (or another process's now)
    restarted = _root(tmp_path, "tst-reused", f"{os.getpid()} 1\n")  # this pid, but not this start time
    running = _root(tmp_path, "tst-running", f"{os.getpid()} {session._started(os.getpid())}\n")
    not_ours = _root(tmp_path, "tst-nobodys", None)
    being_made = _root(tmp_path, "tst-being-made", "")
    other = _root(tmp_path, "other", f"{finished.pid} 1\n")
    monkeypatch.setattr(session, "ROOTS", tmp_path)

    session._remove_roots_of_killed_sessions()

    assert not killed.exists() and not restarted.exists()
    assert running.is_dir() and not_ours.is_dir() and being_made.is_dir() and other.is_dir()
