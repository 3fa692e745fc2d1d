"""`verify --rebuild` asks for the build an image records: the same plan, the same Dockerfiles, the same
build-info; what it cannot make again (a dirty or other toolkit revision, a team's file) is one line."""

import dataclasses
import json

import pytest
from click.testing import CliRunner

from torchstack.base.errors import UsageProblem
from torchstack.cli import make_cli
from torchstack.engines.connection import engine_of
from torchstack.engines.engine import Image
from torchstack.verify import rebuild


def _render(cli, folder, args) -> tuple[dict, str]:
    result = CliRunner().invoke(cli, ["render", "--output", str(folder), *args])
    assert result.exit_code == 0, result.output
    final = folder / "final"
    return json.loads((final / "toolkit" / "build-info.json").read_text()), (final / "Dockerfile").read_text()


@pytest.mark.parametrize(
    "request_args",
    [
        ["--backend", "openblas", "--arch", "s390x", "--build-target", "z16", "--release", "r26.01"],
        ["--backend", "onednn", "--arch", "x86_64", "--source-version", "openblas=0.3.33", "--no-security-updates", "--runtime", "slim"],
        ["--arch", "aarch64", "--debian-mirror", "http://mirror.example/debian", "--security-mirror", "http://mirror.example/security"],
        ["--arch", "x86_64", "--debian-snapshot", "2026-11-01", "--debian-mirror", "http://mirror.example/debian"],
        ["--debian-snapshot", "20261101T120000Z", "--snapshot-archive", "http://snap.example/", "--no-security-updates"],
    ],
)
def test_the_rebuild_asks_for_the_build_the_image_records(catalog, tmp_path, request_args):
    cli = make_cli(catalog)
    info, dockerfile = _render(cli, tmp_path / "first", request_args)
    labels = {rebuild.BASE_NAME_LABEL: "torchstack-os:whatever"}
    again, again_dockerfile = _render(cli, tmp_path / "again", rebuild.arguments(catalog, info, labels))
    assert again == info
    assert again_dockerfile == dockerfile


def test_what_cannot_be_built_again_is_one_line(catalog):
    here = {"version": "0.1.0", "revision": "0123456789ab", "committed": 1}
    for toolkit, said in (
        ({"revision": "0123456789ab-dirty"}, "uncommitted changes"),
        ({"revision": "ba9876543210"}, "run `git checkout ba9876543210`"),
        ({"version": "0.1.0", "revision": None}, "no revision to check out"),
    ):
        with pytest.raises(UsageProblem, match=said):
            rebuild.check_revision("img", {"toolkit": toolkit}, here)
    rebuild.check_revision("img", {"toolkit": {"revision": "0123456789ab"}}, here)
    info = {"requirements": {"sha256": "0" * 64}, "target": "generic", "arch": "x86_64"}
    with pytest.raises(UsageProblem, match="--requirements"):
        rebuild.arguments(catalog, info, {})
    on_a_base_image = {"target": "generic", "arch": "x86_64", "backend": "onednn", "distribution": "bookworm", "release": "r26.11"}
    on_a_base_image |= {"runtime": "full", "components": {}, "apt_sources": []}
    with pytest.raises(UsageProblem, match="neither Debian suites nor the image it was built on"):
        rebuild.arguments(catalog, on_a_base_image, {})


def test_the_images_date_is_its_source_date_epoch():
    assert rebuild.epoch_of(Image("sha256:0", created="2026-11-27T09:30:00Z")) == 1795771800
    assert rebuild.epoch_of(Image("sha256:0", created="2026-11-27T09:30:00.123456789Z")) == 1795771800


def test_a_rebuild_on_another_image_store_is_refused_in_one_line():
    """Docker's overlay2 store writes opaque whiteouts and lock files into the layers that its
    containerd store does not: the same steps, other layers. Another release of the same store is tried."""
    built_on = {"engine": {"kind": "docker", "store": "containerd"}}
    overlay = engine_of("docker", "unix:///x.sock", "test", "29.1.3", "1.52", "1.44", "overlay2")
    with pytest.raises(UsageProblem, match="built on Docker with the containerd image store; this engine is Docker with the overlay2"):
        rebuild.check_engine("img", built_on, overlay)
    rebuild.check_engine("img", built_on, dataclasses.replace(overlay, version="29.2.0", store="containerd"))
    rebuild.check_engine("img", {}, overlay)  # an image that records no engine: tried as it is
