"""The unit tests plan as on a host with no wheelhouse that reaches no index, whatever this host has:
a test that wants an index serves one on loopback (tests/unit/test_torch_choice.py), one that wants a
wheelhouse names its wheels (`offered`)."""

import urllib.parse

import pytest

from torchstack.catalog import torch_choice
from torchstack.catalog.wheels import WheelName


@pytest.fixture(autouse=True)
def no_index_but_loopback(monkeypatch):
    real = torch_choice.listing

    def listing(index: str):
        if urllib.parse.urlsplit(index).hostname not in ("127.0.0.1", "localhost"):
            raise OSError("the unit tests reach no index but loopback")
        return real(index)

    monkeypatch.setattr(torch_choice, "listing", listing)
    monkeypatch.setattr(torch_choice, "wheelhouse_wheels", lambda: ())
    torch_choice.offers.cache_clear()
    yield
    torch_choice.offers.cache_clear()


@pytest.fixture
def offered(monkeypatch):
    """Make the wheelhouse hold these torch wheel file names."""

    def hold(*names: str) -> None:
        monkeypatch.setattr(torch_choice, "wheelhouse_wheels", lambda: tuple(WheelName.parse(n) for n in names))
        torch_choice.offers.cache_clear()

    return hold
