"""The engine tests' scheduler (tests/engine/images.py): each wanted build once, after what it
builds on, never more at once than its slots; a failure reaches whoever asks for what depended on it."""

import threading
import time

import pytest

from tests.engine.images import IMAGES, Call, Scheduler


def recorder(log: list, running: list, peak: list, name: str, seconds: float = 0.2, fails: bool = False):
    def work():
        running.append(name)
        peak[0] = max(peak[0], len(running))
        log.append(f"start {name}")
        time.sleep(seconds)
        running.remove(name)
        log.append(f"end {name}")
        if fails:
            raise RuntimeError(f"{name} broke")
        return name

    return work


def table(fails: str = "", slots: int = 2):
    log, running, peak = [], [], [0]
    jobs = {
        "a": Call(recorder(log, running, peak, "a", fails=fails == "a"), lambda value: None),
        "b": Call(recorder(log, running, peak, "b"), lambda value: None, after=("a",)),
        "c": Call(recorder(log, running, peak, "c"), lambda value: None),
        "d": Call(recorder(log, running, peak, "d"), lambda value: None),
        "unwanted": Call(recorder(log, running, peak, "unwanted"), lambda value: None),
    }
    return Scheduler(jobs, slots=slots), log, peak


def test_a_build_starts_only_after_what_it_builds_on_and_each_once():
    scheduler, log, _ = table()
    scheduler.want(["b", "c", "d"])
    try:
        assert scheduler.result("b") == "b" and scheduler.result("c") == "c" and scheduler.result("d") == "d"
        assert log.index("end a") < log.index("start b")
        assert sorted(line for line in log if line.startswith("start")) == ["start a", "start b", "start c", "start d"]
    finally:
        scheduler.stop()


def test_never_more_builds_at_once_than_its_slots():
    scheduler, _, peak = table(slots=1)
    scheduler.want(["a", "c", "d"])
    try:
        for name in ("a", "c", "d"):
            scheduler.result(name)
        assert peak[0] == 1
    finally:
        scheduler.stop()


def test_a_failure_reaches_the_test_that_asks_for_what_built_on_it():
    scheduler, log, _ = table(fails="a")
    try:
        with pytest.raises(pytest.fail.Exception, match="b was not built: a, which it builds on, failed"):
            scheduler.result("b")
        with pytest.raises(pytest.fail.Exception, match="a was not built: RuntimeError: a broke"):
            scheduler.result("a")
        assert "start b" not in log
    finally:
        scheduler.stop()


def test_stopping_starts_nothing_more():
    scheduler, log, _ = table(slots=1)
    scheduler.want(["a", "c"])
    time.sleep(0.05)
    scheduler.stop()
    time.sleep(0.5)
    assert [line for line in log if line.startswith("start")] == ["start a"]
    assert not [t for t in threading.enumerate() if t is scheduler.thread and t.is_alive()]


def test_the_sessions_table_names_only_images_it_holds():
    for name, build in IMAGES.table.items():
        assert set(build.after) <= set(IMAGES.table), name
        assert list(IMAGES.table).index(name) > max((list(IMAGES.table).index(n) for n in build.after), default=-1), name
