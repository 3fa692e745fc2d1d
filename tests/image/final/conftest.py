"""What the final checks read from torch: one Python process of the image reports it all.

Each `import torch` costs about 2 s natively and 15 s under qemu; the checks of torch's version,
configuration, oneDNN and backend libraries read one report instead of starting five processes.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from torchstack.base import layout
from torchstack.request.host import host_arch

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


@pytest.fixture(scope="session")
def banner(container) -> tuple[int, str]:
    """What the entry point prints on a pseudo-terminal (docker run -it) and its exit status: one
    start, read by the checks of what it shows (under qemu a start costs seconds)."""
    code, out = container.exec_run([layout.ENTRYPOINT, "true"], tty=True, stdin=True)
    return code, out.decode()


# Each plugin imported with its installed version, then each check file its data names run, then
# each package --requirements named imported (its top-level modules, from its RECORD), in one
# Python process of the image as its default user: one `import torch` (15 s under qemu), not one
# per plugin and per check. A failure is kept as its traceback, for the check it belongs to.
PLUGIN_REPORT = (
    """
import contextlib, importlib, importlib.metadata as metadata, io, json, sys, traceback
plugins, checks, requested = json.loads(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[3])
report = {"versions": {}, "checks": {}, "requirements": {}}
for name, module in plugins:
    try:
        importlib.import_module(module)
        report["versions"][name] = metadata.version(name)
    except BaseException:
        report["versions"][name] = "import failed: " + traceback.format_exc()
for name, code in checks.items():
    said = io.StringIO()
    try:
        with contextlib.redirect_stdout(said):
            exec(compile(code, name, "exec"), {"__name__": "__main__"})
        report["checks"][name] = {"passed": True, "output": said.getvalue()}
    except BaseException:
        report["checks"][name] = {"passed": False, "output": said.getvalue() + traceback.format_exc()}
for pin in requested:
    name = pin.split("==")[0]
    try:
        files = metadata.distribution(name).files or []
        tops = sorted({f.parts[0].removesuffix(".py") for f in files if len(f.parts) > 1 and f.name == "__init__.py"
                       or len(f.parts) == 1 and f.suffix == ".py"} - {"__pycache__"})
        for module in tops:
            importlib.import_module(module)
        report["requirements"][name] = {"version": metadata.version(name), "modules": tops}
    except BaseException:
        report["requirements"][name] = {"version": None, "modules": [], "error": traceback.format_exc()}
print("""
    + repr(REPORT_MARK)
    + """ + json.dumps(report))
"""
)


@pytest.fixture(scope="session")
def plugin_report(user_host, ours) -> dict:
    """The installed version of each plugin as it imports (`versions`), each of the check files
    plugins.yaml names for them with its output (`checks`), and each package --requirements named
    with its installed version and the top-level modules that imported (`requirements`)."""
    plugins = [(p["name"], p["module"]) for p in ours.get("plugins") or []]
    checks = {name: (Path(__file__).parent / name).read_text() for p in ours.get("plugins") or [] for name in p.get("checks", [])}
    requested = (ours.get("requirements") or {}).get("requested", [])
    argv = " ".join(shlex.quote(json.dumps(arg)) for arg in (plugins, checks, requested))
    result = user_host.run(f"python3 -c {shlex.quote(PLUGIN_REPORT)} {argv}")
    assert result.rc == 0, f"python3 failed in the image (exit {result.rc}):\n{result.stderr[-2000:]}"
    return json.loads(result.stdout.rpartition(REPORT_MARK)[2])
