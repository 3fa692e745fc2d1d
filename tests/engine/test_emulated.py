"""An arm64 onednn-acl image built under qemu emulation with an upstream aarch64 torch wheel from PyPI."""

from __future__ import annotations

import json

import pytest

from tests.engine.conftest import CA_BUNDLE, run_build_py

pytestmark = [pytest.mark.engine, pytest.mark.emulated]

# PyPI's aarch64 torch wheels are CPU builds carrying oneDNN with ACL up to torch 2.8; from 2.9
# on they are CUDA builds, which the toolkit refuses for a CPU image. The 2.8.0 wheel reports
# itself as 2.8.0+cpu: the labels carry that, the tag 2.8.0 (every image is a CPU build).
TORCH = "2.8.0"
REPORTED = "2.8.0+cpu"


def test_arm64_onednn_acl_image_under_emulation(client, tmp_path):
    summary = tmp_path / "arm64.json"
    result = run_build_py(
        "--backend", "onednn-acl", "--torch-from", "wheel", "--torch-wheel", "index", "--torch-version", TORCH,
        "--openblas-from", "distro", "--numpy-from", "wheel", "--ca-bundle", str(CA_BUNDLE), "--json", str(summary), "--recheck",
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    built = json.loads(summary.read_text())
    assert built["final_image"].endswith("-torch-2.8.0-onednn-acl-openblas.distro-numpy.wheel-torch.wheel")
    assert "failed" not in built["checks"] and "passed" in built["checks"], built["checks"]
    image = client.images.get(built["final_image"])
    assert image.attrs["Architecture"] == "arm64"
    out = client.containers.run(
        built["final_image"], ["python", "-c", "import torch; print(torch.__version__, torch.backends.mkldnn.is_available())"],
        remove=True, platform="linux/arm64",
    ).decode().split()  # fmt: skip
    assert out == [REPORTED, "True"]
