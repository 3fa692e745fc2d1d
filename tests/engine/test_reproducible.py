"""The README's request built twice, cold, each on an empty engine of a current Docker release
(BuildKit), with a state folder of its own and at another time, from the same wheel: the OS image,
every stage and the release image come out with the same image IDs."""

from __future__ import annotations

import pytest

from tests.engine.images import IMAGES

pytestmark = pytest.mark.engine


@pytest.fixture(scope="session")
def built_on_current(x86_build) -> dict:
    return IMAGES.result("built_on_current")


@pytest.fixture(scope="session")
def rebuilt_on_current(built_on_current) -> dict:
    return IMAGES.result("rebuilt_on_current")


def _ids(summary: dict) -> dict[str, str]:
    stages = {s["stage"]: s["image_id"] for s in summary["stages"]}
    return {"os": summary["reproducible"]["base_image_id"], **stages, "release": summary["image_id"]}


def test_the_same_request_and_inputs_give_the_same_images_on_another_engine(built_on_current, rebuilt_on_current):
    first, again = built_on_current, rebuilt_on_current
    assert first["reproducible"]["why_not"] is None and again["reproducible"]["why_not"] is None
    assert first["reproducible"]["source_date_epoch"] == again["reproducible"]["source_date_epoch"]
    if first["reproducible"]["archive"] != again["reproducible"]["archive"]:
        pytest.skip("the Debian archive changed between the two builds (a new InRelease): they had different inputs")
    assert [s["stage"] for s in again["stages"]] == [s["stage"] for s in first["stages"]]
    assert {s["status"] for s in again["stages"]} == {"built"}, "the second build is cold: it built every stage"
    differ = {name: (_ids(first)[name], image) for name, image in _ids(again).items() if _ids(first)[name] != image}
    assert not differ, f"images that differ (first, again): {differ}"
