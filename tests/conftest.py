"""Shared test fixtures: the catalog, a plan maker with a fixed clock; and, at the end of every test
run, a check that the tests left the host as they found it."""

import os
import shutil
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import docker
import pytest

from torchstack.model import load_catalog
from torchstack.plan import Request
from torchstack.planner import make_plan
from torchstack.sources import state_dir

NOW = datetime(2026, 11, 21, tzinfo=timezone.utc)


@pytest.fixture(scope="session")
def catalog():
    return load_catalog()


@pytest.fixture
def plan_for(catalog):
    def make(**fields):
        return make_plan(catalog, Request(**{"now": NOW, "memory_gib": 64.0, **fields}))

    return make


PLUGIN_SOURCES = Path(__file__).parent / "plugins"


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


# The Docker engine's handle on the host's network namespace: its first container or build step on
# the host's network (every build's, the README's first command's too) bind-mounts it under the
# engine's exec root, and it stays for the engine's life and after. On a new host the tests' first
# build makes it (seen in a cold run on 2026-11-25); it is the engine's, not something a run left.
ENGINE_OWN_MOUNTS = {"/run/docker/netns/default", "/var/run/docker/netns/default"}


def _host_state() -> dict[str, set[str]]:
    """What tests could leave on this host: mounts, temporary folders (pytest's own, which it keeps
    for a few runs by design, aside), processes they started, build contexts, and on the engine
    containers, networks and image names other than the toolkit's own (torchstack*)."""
    temporary = {str(p) for d in ("/tmp", "/var/tmp") for p in Path(d).iterdir() if not p.name.startswith("pytest-of-")}
    children = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if fields[1] == str(os.getpid()):
            children.add(f"pid {stat.parent.name}: {(stat.parent / 'cmdline').read_bytes().replace(bytes(1), b' ').decode()[:120]}")
    state = {
        "mounts": {line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()} - ENGINE_OWN_MOUNTS,
        "temporary folders": temporary,
        "processes": children,
        "build contexts": {str(p) for p in (state_dir() / "contexts").glob("*")},
    }
    try:
        client = docker.from_env(timeout=30)
        client.ping()
    except docker.errors.DockerException:
        return state  # no engine: the unit tests alone
    state["containers"] = {
        f"{c.short_id} {c.name} ({' '.join(c.attrs['Config']['Cmd'] or [])[:60]})" for c in client.containers.list(all=True)
    }
    state["networks"] = {n.name for n in client.networks.list()}
    state["image names"] = {t for i in client.images.list() for t in i.tags if not t.startswith("torchstack")}
    return state


def _checks_an_image(config) -> bool:
    """A run of the image checks (tests/image, started by `./build.py test` or a build), not of the
    project's tests: the host is not its own to judge, other runs work on it meanwhile."""
    return getattr(config.option, "image", None) is not None


def pytest_sessionstart(session):
    if not _checks_an_image(session.config):
        session.config.stash[HOST_BEFORE] = _host_state()


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session):
    """After every fixture is torn down: whatever the run added to the host and left is a failure
    of the run, listed, whether its tests passed or not."""
    before = session.config.stash.get(HOST_BEFORE, None)
    if before is None or session.config.option.collectonly:
        return
    after = _host_state()
    left = {kind: sorted(after[kind] - before.get(kind, set())) for kind in after}
    left = {kind: found for kind, found in left.items() if found}
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    reporter.write("\n")
    if not left:
        reporter.write_line(
            "the host is as the tests found it: no container, network, image name, mount, "
            "temporary folder, build context or process of theirs left"
        )
        return
    for kind, found in left.items():
        reporter.write_line(f"LEFT BEHIND: {len(found)} {kind}: {'; '.join(found)}", red=True)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


HOST_BEFORE = pytest.StashKey[dict]()
