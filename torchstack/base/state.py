"""Where the toolkit keeps its state on this host: $TORCHSTACK_CACHE, else the user's cache folder."""

from __future__ import annotations

import os
from pathlib import Path


def state_dir() -> Path:
    """Where torchstack keeps its cache, logs and build contexts ($TORCHSTACK_CACHE)."""
    base = os.environ.get("TORCHSTACK_CACHE") or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "torchstack"
    return Path(base)


def cache_dir() -> Path:
    return state_dir() / "sources"
