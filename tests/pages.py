"""The Markdown pages the repository ships, for the docs' unit tests: which they are, and their prose."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from torchstack.catalog.model import ROOT

FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def shipped_pages(*skipped: str) -> list[Path]:
    """Every Markdown page git tracks but the image checks' notes under tests/ and `skipped` (paths from
    the repository's root), sorted."""
    listed = subprocess.run(["git", "ls-files", "*.md"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    return [ROOT / name for name in sorted(listed) if not name.startswith("tests/") and name not in skipped]


def prose(text: str) -> str:
    """A page's text without its fenced blocks."""
    return FENCE.sub("", text)
