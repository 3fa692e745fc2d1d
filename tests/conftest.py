"""Shared test fixtures: the catalog, a plan maker with a fixed clock; and, at the end of every test
run, a check that the session left nothing of its own on the host (tests/session.py); after each test,
that it left the session's signal handlers as it found them."""

import os
import shutil
import signal
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from tests import session as tests_session
from torchstack.catalog.model import load_catalog
from torchstack.request.plan import Request
from torchstack.request.planner import make_plan

NOW = datetime(2026, 11, 21, tzinfo=timezone.utc)


@pytest.fixture(scope="session")
def catalog():
    return load_catalog()


@pytest.fixture
def plan_for(catalog):
    def make(**fields):
        return make_plan(catalog, Request(**{"now": NOW, "memory_gib": 64.0, **fields}))

    return make


@pytest.fixture(autouse=True)
def _signal_handlers_kept():
    """A test that changes the process's Ctrl-C or SIGTERM handler (the toolkit's own, installed in
    process) puts the session's back: the engine tests' SIGTERM handler is how a CI job's cancel
    tears the session down, its engines and builds with it."""
    before = {sent: signal.getsignal(sent) for sent in (signal.SIGINT, signal.SIGTERM)}
    yield
    changed = [sent.name for sent, handler in before.items() if signal.getsignal(sent) is not handler]
    for sent in before:
        signal.signal(sent, before[sent])
    assert not changed, f"the test left the session's {' and '.join(changed)} handler changed"


PLUGIN_SOURCES = Path(__file__).parent / "plugins"


def dev_tool(name: str) -> str | None:
    """A tool the dev extra installs (ruff, shellcheck, hadolint): the one beside the Python that runs
    the tests (the toolkit's .venv/bin, which `.venv/bin/python -m pytest` does not put on PATH), else one on PATH."""
    return shutil.which(name, path=os.pathsep.join((str(Path(sys.executable).parent), os.environ.get("PATH", ""))))


def build_plugin_wheels(out: Path, names: tuple[str, ...] | None = None) -> dict[str, Path]:
    """The test plugin packages (tests/plugins/; those of `names`, else all) built into real wheels
    by pip in `out`: folder name -> wheel file."""
    built = {}
    for source in sorted(p for p in PLUGIN_SOURCES.iterdir() if (p / "pyproject.toml").is_file()):
        if names is not None and source.name not in names:
            continue
        copy = shutil.copytree(source, out / "src" / source.name)
        before = set(out.glob("*.whl"))
        result = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "--wheel-dir", str(out), str(copy)],
            capture_output=True,
            text=True,
        )
        assert result.returncode == 0, f"pip could not build {source.name}:\n{result.stderr[-2000:]}"
        (wheel,) = set(out.glob("*.whl")) - before
        built[source.name] = wheel
    return built


@pytest.fixture(scope="session")
def plugin_wheels(tmp_path_factory) -> dict[str, Path]:
    """Every test plugin package built into a real wheel, once per session: folder name -> wheel file."""
    return build_plugin_wheels(tmp_path_factory.mktemp("plugin-wheels"))


def _checks_an_image(config) -> bool:
    """A run of the image checks (tests/image, started by `./build.py test` or a build), not of the
    project's tests: it makes no session of its own (its containers are its build's)."""
    return getattr(config.option, "image", None) is not None


def pytest_configure(config):
    """The session's temporary root (tests/session.py), before anything makes a temporary file."""
    if not _checks_an_image(config):
        tests_session.start()


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session):
    """After every fixture is torn down: whatever the session made and left (tests/session.py) is a
    failure of the run, listed, whether its tests passed or not. What others run on the host is not
    looked at."""
    if _checks_an_image(session.config):
        return
    left = {} if session.config.option.collectonly else tests_session.leftovers()
    tests_session.finish()
    if session.config.option.collectonly:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    reporter.write("\n")
    if not left:
        reporter.write_line(
            "the host is as the tests found it: no container, image name, mount, temporary file, "
            "build context or process of this session's left"
        )
        return
    for kind, found in left.items():
        reporter.write_line(f"LEFT BEHIND: {len(found)} {kind}: {'; '.join(found)}", red=True)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
