"""Shared test fixtures: the catalog, and a plan maker with a fixed clock."""

import shutil
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from torchstack.model import load_catalog
from torchstack.plan import Request
from torchstack.planner import make_plan

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


@pytest.fixture(scope="session")
def plugin_wheels(tmp_path_factory) -> dict[str, Path]:
    """The test plugin packages (tests/plugins/) built into real wheels by pip, once per session:
    folder name -> wheel file."""
    out = tmp_path_factory.mktemp("plugin-wheels")
    built = {}
    for source in sorted(p for p in PLUGIN_SOURCES.iterdir() if (p / "pyproject.toml").is_file()):
        copy = shutil.copytree(source, out / "src" / source.name)
        before = set(out.glob("*.whl"))
        result = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "--wheel-dir", str(out), str(copy)],
            capture_output=True, text=True,
        )  # fmt: skip
        assert result.returncode == 0, f"pip could not build {source.name}:\n{result.stderr[-2000:]}"
        (wheel,) = set(out.glob("*.whl")) - before
        built[source.name] = wheel
    return built
