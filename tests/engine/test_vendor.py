"""The zendnn image with vendor plugins, built and checked on this engine: zentorch paired with
torch, the test plugins' compile backend and device, and what the image records about them."""

from __future__ import annotations

import hashlib
import json
import re

import pytest

pytestmark = pytest.mark.engine

PLUGINS = ["torchstack-test-compile==0.1.0", "torchstack-test-device==0.1.0", "zentorch==2.13.0.2"]


def _avx512() -> bool:
    with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
        return "avx512f" in next((line for line in cpuinfo if line.startswith("flags")), "").split()


def test_the_zendnn_image_installs_each_plugin_and_its_vendor_checks_ran(zendnn_build):
    built = zendnn_build
    assert built["backend"] == "zendnn" and sorted(built["plugins"]) == PLUGINS, built["plugins"]
    assert "-torch-2.13.0-zendnn-" in built["final_image"], built["final_image"]
    assert built["final_image"].endswith("-torchstack-test-compile-0.1.0-torchstack-test-device-0.1.0"), built["final_image"]
    assert "failed" not in built["checks"] and "passed" in built["checks"], built["checks"]
    # -rfs lists every skipped check: the vendor checks ran, but for those this host cannot run
    skipped = [line for line in built["output"].splitlines() if line.startswith("SKIPPED") and "test_vendor.py" in line]
    allowed = [] if _avx512() else ["its CPU has no AVX-512"]
    allowed += ["nothing to probe"]  # an x86_64 zendnn image has no run-time probe
    # Checks of a plugin's own (plugins.yaml: checks) are torchvision's so far; none of these has any.
    allowed += ["no plugin of this image has checks of its own"]
    allowed += ["this image installs no --requirements"]  # those are test_requirements' image
    unexpected = [line for line in skipped if not any(reason in line for reason in allowed)]
    assert not unexpected, "vendor checks skipped:\n" + "\n".join(unexpected)


def test_each_plugin_is_recorded_with_the_sha256_of_the_wheel_installed(client, zendnn_build):
    image = client.images.get(zendnn_build["final_image"])
    assert sorted(image.labels["io.torchstack.plugins"].split()) == PLUGINS, image.labels["io.torchstack.plugins"]
    recorded = {p["name"]: p for p in json.loads(image.labels["io.torchstack.build-info"])["plugins"]}
    for folder, name in (("compile_backend", "torchstack-test-compile"), ("device", "torchstack-test-device")):
        assert recorded[name]["sha256"] == hashlib.sha256(zendnn_build["plugin_wheels"][folder].read_bytes()).hexdigest()
    assert recorded["torchstack-test-compile"]["compile_backends"] == ["torchstack_test"]
    assert recorded["zentorch"]["version"] == "2.13.0.2" and re.fullmatch(r"[0-9a-f]{64}", recorded["zentorch"]["sha256"])
    assert any(r.startswith("torch") for r in recorded["zentorch"]["requires_torch"]), recorded["zentorch"]


def test_zentorch_runs_as_a_user_would_run_it(client, zendnn_build):
    """Outside the checks, as `docker run` does: a model through backend="zentorch" matches eager."""
    code = (
        "import torch, zentorch; m = torch.nn.Linear(32, 16).eval(); x = torch.randn(8, 32)\n"
        "with torch.no_grad(): torch.testing.assert_close(torch.compile(m, backend='zentorch')(x), m(x))\n"
        "print(zentorch.__version__)"
    )
    out = client.containers.run(zendnn_build["final_image"], ["python3", "-c", code], remove=True, stderr=True).decode()
    assert out.strip().splitlines()[-1] == "2.13.0.2", out
