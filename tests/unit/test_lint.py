"""The code as ruff holds it (pyproject.toml's [tool.ruff]): what the workflow's checks job runs, run here too."""

import subprocess

import pytest

from tests.conftest import dev_tool
from torchstack.catalog.model import ROOT


@pytest.mark.parametrize("command", [["check", "."], ["format", "--check", "."]])
def test_ruff_finds_nothing(command):
    ruff = dev_tool("ruff")
    assert ruff, "ruff is missing: pip install '.[dev]' (scripts/setup-host.sh installs it)"
    result = subprocess.run([ruff, *command], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-1000:]
