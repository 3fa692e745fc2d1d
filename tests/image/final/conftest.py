"""What the final checks read from torch: one Python process of the image reports it all.

Each `import torch` costs about 2 s natively and 15 s under qemu; the checks of torch's version,
configuration, oneDNN and backend libraries read one report instead of starting five processes.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from torchstack.host import host_arch

REPORT_MARK = "torchstack-report: "
# Complex dot/vdot/mm against a reference without BLAS: a file of its own (run by hand in an image too).
COMPLEX_BLAS = (Path(__file__).parent / "complex_blas.py").read_text()
# Run with oneDNN's verbose log on: its lines come first on stdout, the report last. Where oneDNN is
# there, a convolution and a linear layer in oneDNN's layout (an inner product or matmul primitive).
TORCH_REPORT = f"""
import json, torch
report = {{"version": torch.__version__, "mkldnn": torch.backends.mkldnn.is_available(),
          "config": torch.__config__.show(), "threads": torch.get_num_threads()}}
kleidiai = getattr(torch.backends, "kleidiai", None)
report["kleidiai"] = None if kleidiai is None else kleidiai.is_available()
if report["mkldnn"]:
    import torch.utils.mkldnn
    x = torch.randn(1, 16, 64, 64)
    conv = torch.nn.Conv2d(16, 32, 3).eval()
    linear = torch.utils.mkldnn.to_mkldnn(torch.nn.Linear(64, 32).eval())
    with torch.inference_mode():
        conv(x)
        linear(torch.randn(8, 64).to_mkldnn())

complex_blas = {{"__name__": "complex_blas"}}
exec({COMPLEX_BLAS!r}, complex_blas)
report["complex_blas"] = complex_blas["report"](torch)

with open("/proc/self/maps") as maps:
    report["maps"] = maps.read()
print({REPORT_MARK!r} + json.dumps(report))
"""


@pytest.fixture(scope="session")
def emulated_cpu(catalog, image_attrs) -> str:
    """For an image of another architecture than this host's (run under qemu-user), the CPU
    qemu is told to emulate (QEMU_CPU), where the catalog names one; else empty."""
    arch = next((a for a in catalog.architectures.values() if a.debian == image_attrs["Architecture"]), None)
    if arch is None or arch.name == host_arch() or not arch.qemu_cpu:
        return ""
    return arch.qemu_cpu


@pytest.fixture(scope="session")
def torch_report(user_host, emulated_cpu) -> dict:
    """torch's version, configuration, oneDNN availability and KleidiAI's, the libraries mapped
    into the process after oneDNN work (where oneDNN is there), and oneDNN's verbose log of it
    (`onednn_log`): from one process, as the image's default user (under qemu, on the CPU the
    catalog picks for emulation)."""
    cpu = f"QEMU_CPU={emulated_cpu} " if emulated_cpu else ""
    result = user_host.run(f"{cpu}ONEDNN_VERBOSE=1 python3 -c {shlex.quote(TORCH_REPORT)}")
    assert result.rc == 0, f"python3 failed in the image (exit {result.rc}):\n{result.stderr[-2000:]}"
    log, _, report = result.stdout.rpartition(REPORT_MARK)
    return {**json.loads(report), "onednn_log": log}
