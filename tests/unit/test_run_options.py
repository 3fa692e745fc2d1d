"""The build's own options reach the pipeline as one frozen value made by the command line."""

import dataclasses
from pathlib import Path

import pytest

from torchstack.request.run_settings import RunOptions


def test_made_from_clicks_options_it_keeps_its_own_and_leaves_the_requests():
    parsed = {"push": True, "registry": "localhost:5000/ml", "json_file": Path("s.json"), "backend": "onednn", "jobs": 4}
    run = RunOptions.from_cli(parsed)
    assert (run.push, run.registry, run.json_file) == (True, "localhost:5000/ml", Path("s.json"))
    assert not hasattr(run, "backend") and not hasattr(run, "jobs")


def test_an_option_click_left_unset_keeps_its_default():
    run = RunOptions.from_cli({"engine": None, "quiet": None, "cache_from": None})
    assert (run.engine, run.quiet, run.cache_from) == ("auto", False, None)


def test_it_cannot_be_changed_once_made():
    run = RunOptions.from_cli({"sign": "cosign.key"})
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.sign = "other.key"


def test_the_engine_refusals_name_only_what_podman_weighs():
    run = RunOptions(buildx_builder="remote", ccache_dir=Path("/c"), push=True)
    assert run.engine_refusals("buildx") == {"builder": "buildx", "buildx_builder": "remote", "ccache_dir": Path("/c"), "zstd": False}
