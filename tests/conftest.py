"""Shared test fixtures: the catalog, and a plan maker with a fixed clock."""

from datetime import datetime, timezone

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
        return make_plan(catalog, Request(now=NOW, **fields))

    return make
