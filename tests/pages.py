"""The Markdown pages the repository ships, for the docs' unit tests: which they are, and their prose."""

from __future__ import annotations

import os
import re
from pathlib import Path

from torchstack.catalog.model import ROOT

FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def shipped_pages(*skipped: str) -> list[Path]:
    """Every Markdown page the repository ships but the image checks' notes under tests/ and `skipped`
    (paths from the repository's root), sorted. Read from the files, not from git: a new host's
    copy of the checkout (tests/engine/test_hosts.py) has no git and no .git."""
    found = []
    for folder, subfolders, files in os.walk(ROOT):
        here = Path(folder)
        if here == ROOT:
            subfolders[:] = [d for d in subfolders if not d.startswith(".") and d not in ("tests", "build", "out")]
        found += [here / f for f in files if f.endswith(".md") and (here / f).relative_to(ROOT).as_posix() not in skipped]
    return sorted(found)


def prose(text: str) -> str:
    """A page's text without its fenced blocks."""
    return FENCE.sub("", text)
