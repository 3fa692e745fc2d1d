"""Checks for what is added to the stack: each plugin wheel imports and runs what it registers,
zentorch says whether ZenDNN ran, the image reports KleidiAI and NNPA as the libraries that know
them see it, and the packages of --requirements are there and import."""

import json
import shlex

import pytest

from torchstack.base import layout

# A model through a torch.compile backend against eager mode; the backend's name is argv[1], the
# module that registers it argv[2]. Eager runs first: a backend may rewrite the module's weights in
# place (zentorch 2.13 reorders them for ZenDNN, after which the eager module computes garbage).
THROUGH_BACKEND = """
import importlib, sys, torch
importlib.import_module(sys.argv[2])
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 8)).eval()
x = torch.randn(4, 64)
with torch.no_grad():
    eager = model(x)
    torch.testing.assert_close(torch.compile(model, backend=sys.argv[1])(x), eager, rtol=1e-4, atol=1e-4)
print("matches eager")
"""
# zentorch's own account of one compile (ZENTORCH_PY_LOG_LEVEL=INFO on stderr), and which ops ran,
# as the profiler saw them: ZenDNN's kernels run as zentorch:: ops.
ZENTORCH_RUN = """
import json, torch, zentorch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 64)).eval()
x = torch.randn(32, 256)
with torch.no_grad():
    eager = model(x)
    compiled = torch.compile(model, backend="zentorch")
    torch.testing.assert_close(compiled(x), eager, rtol=1e-3, atol=1e-3)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        compiled(x)
ops = sorted({e.key for e in prof.key_averages() if e.key.startswith("zentorch::")})
print(json.dumps({"avx512": bool(zentorch._C.is_avx512_supported()), "zentorch_ops": ops}))
"""
OPTIMIZED = "Optimizing the fx_graph with zentorch ops"
NOT_OPTIMIZED = "ZenTorch optimization is only available on CPUs with AVX-512 support"


def plugins(ours):
    found = ours.get("plugins") or []
    if not found:
        pytest.skip("this image installs no plugin wheel")
    return found


def test_each_plugin_is_installed_at_its_recorded_version_and_imports(plugin_report, ours):
    for plugin in plugins(ours):
        assert "version" in plugin, f"plugin {plugin['name']} was recorded without its wheel: {plugin}"
        assert plugin_report["versions"][plugin["name"]] == plugin["version"], plugin


def test_each_app_requirement_is_installed_at_its_resolved_version_and_imports(plugin_report, ours, user_host):
    """What --requirements named, at the version pip resolved before the build, each of its
    top-level modules imported; and pip finds every installed requirement met (runtime "full")."""
    requested = (ours.get("requirements") or {}).get("requested") or pytest.skip("this image installs no --requirements")
    for pin in requested:
        name, version = pin.split("==")
        found = plugin_report["requirements"][name]
        assert found["version"] == version and found["modules"], f"{pin}: {found.get('error') or found}"
        print(f"{pin}: imports {', '.join(found['modules'])}")
    if ours["runtime"] == "full":
        checked = user_host.run("python3 -m pip check")
        assert checked.rc == 0, f"pip check:\n{checked.stdout}{checked.stderr}"


def test_each_plugin_passes_the_checks_the_catalog_names_for_it(plugin_report, ours):
    """What plugins.yaml names as a plugin's or library's own checks (files of this folder, each
    run in the image: torchvision's operators and transforms, say)."""
    ran = []
    for plugin in plugins(ours):
        for name in plugin.get("checks", []):
            outcome = plugin_report["checks"][name]
            assert outcome["passed"], f"{name} failed in the image:\n{outcome['output'][-2500:]}"
            print(outcome["output"].strip())
            ran.append(name)
    if not ran:
        pytest.skip("no plugin of this image has checks of its own")


def test_each_plugin_compile_backend_runs_a_model_that_matches_eager(user_host, ours):
    backends = [b for p in plugins(ours) for b in p["compile_backends"]]
    if not backends:
        pytest.skip("no plugin here registers a torch.compile backend")
    if ours["runtime"] == "slim":
        pytest.skip("a slim image refuses torch.compile (no C++ compiler)")
    for name in backends:
        # an entry point backend is listed by torch alone; one registered on import (zentorch)
        # once its module is imported
        module = next(p["module"] for p in ours["plugins"] if name in p["compile_backends"])
        code = f"import torch, torch._dynamo as d, {module}; print(' '.join(d.list_backends(exclude_tags=())))"
        listed = user_host.run(f"python3 -c {shlex.quote(code)}")
        assert listed.rc == 0 and name in listed.stdout.split(), f"torch.compile backend {name} is not registered:\n{listed.stderr[-1500:]}"
        result = user_host.run(f"python3 -c {shlex.quote(THROUGH_BACKEND)} {shlex.quote(name)} {shlex.quote(module)}")
        assert result.rc == 0 and "matches eager" in result.stdout, f"backend {name}:\n{result.stderr[-2500:]}"


def test_the_test_compile_backend_is_really_called(python, ours):
    """Our own test plugin counts the graphs it is handed. Nothing imports it before
    torch.compile asks for its backend: torch found it through the entry point alone."""
    if not any(p["name"] == "torchstack-test-compile" for p in plugins(ours)):
        pytest.skip("the test compile plugin is not in this image")
    code = (
        "import torch\n"
        "torch.compile(torch.nn.Linear(4, 4), backend='torchstack_test')(torch.randn(2, 4))\n"
        "import torchstack_test_compile as t\nprint(len(t.CALLS))"
    )
    assert int(python(code).strip()) >= 1


def test_each_device_plugin_registers_its_device_at_import_torch(user_host, ours):
    """A device plugin (torch.backends entry point, as torch_nnpa) renames PrivateUse1 when torch
    is imported; TORCH_DEVICE_BACKEND_AUTOLOAD=0 (documented runtime data) keeps it out."""
    device_plugins = [p for p in plugins(ours) if p["device_entry_points"]]
    if not device_plugins:
        pytest.skip("no plugin here registers a device")
    code = (
        "import torch; name = torch._C._get_privateuse1_backend_name(); "
        "print(name, torch.device(name).type, hasattr(torch, name) and name != 'privateuseone')"
    )
    loaded = user_host.run(f"python3 -c {shlex.quote(code)}")
    assert loaded.rc == 0, loaded.stderr[-2000:]
    name, device_type, has_module = loaded.stdout.split()
    assert name != "privateuseone" and device_type == name and has_module == "True", loaded.stdout
    known = {d for p in device_plugins for d in p["devices"]}
    assert not known or name in known, f"the plugin registered {name}, its data says {sorted(known)}"
    off = user_host.run(f"TORCH_DEVICE_BACKEND_AUTOLOAD=0 python3 -c {shlex.quote(code)}")
    assert off.rc == 0 and off.stdout.split()[0] == "privateuseone", off.stdout + off.stderr[-1000:]
    print(f"device plugin registered torch.device({name!r}) at import torch")


def _zentorch(ours):
    if not any(p["name"] == "zentorch" for p in plugins(ours)):
        pytest.skip("zentorch is not in this image")


def _has_avx512(host) -> bool:
    flags = host.run("grep -m1 '^flags' /proc/cpuinfo").stdout.split()
    return "avx512f" in flags


def test_zentorch_says_whether_zendnn_ran_as_this_cpu_allows(user_host, host, ours):
    """zentorch runs ZenDNN's kernels only on a CPU with AVX-512, and says so. On one, its ops
    must show in the profile; on one without, zentorch must say it left the model alone and no
    zentorch op may run. Either way the result matches eager."""
    _zentorch(ours)
    result = user_host.run(f"ZENTORCH_PY_LOG_LEVEL=INFO python3 -c {shlex.quote(ZENTORCH_RUN)}")
    assert result.rc == 0, result.stderr[-2500:]
    ran = json.loads(result.stdout.strip().splitlines()[-1])
    assert ran["avx512"] == _has_avx512(host), f"zentorch's AVX-512 check disagrees with /proc/cpuinfo: {ran}"
    if ran["avx512"]:
        assert OPTIMIZED in result.stderr and ran["zentorch_ops"], f"AVX-512 CPU but no zentorch op ran: {ran}"
        print(f"ZenDNN ran: {', '.join(ran['zentorch_ops'])}")
    else:
        assert NOT_OPTIMIZED in result.stderr and not ran["zentorch_ops"], (ran, result.stderr[-1500:])
        print("this CPU has no AVX-512: zentorch said so and left the model to Inductor (ZenDNN not run)")


def test_zendnn_kernels_run_on_an_avx512_cpu(user_host, host, ours):
    _zentorch(ours)
    if not _has_avx512(host):
        pytest.skip("not verified on this host: its CPU has no AVX-512, and ZenDNN's kernels need it")
    result = user_host.run(f"ZENTORCH_PY_LOG_LEVEL=INFO python3 -c {shlex.quote(ZENTORCH_RUN)}")
    assert result.rc == 0, result.stderr[-2500:]
    assert any(op.startswith("zentorch::") for op in json.loads(result.stdout.strip().splitlines()[-1])["zentorch_ops"])


def test_the_image_reports_each_probe_from_the_library_that_knows(user_host, python, torch_report, ours):
    """probe.py's answers are those of the libraries themselves: torch.backends.kleidiai, libzdnn."""
    probes = ours.get("probes") or []
    if not probes:
        pytest.skip("this image has nothing to probe at run time")
    result = user_host.run(f"python3 {layout.TOOLKIT_DIR}/probe.py --json {' '.join(map(shlex.quote, probes))}")
    assert result.rc == 0, result.stderr[-1500:]
    answers = json.loads(result.stdout)
    for probe in probes:
        name, _, library = probe.partition("=")
        answer = answers[name]
        if name == "kleidiai":
            direct = torch_report["kleidiai"]
            assert answer["available"] == direct, (answer, direct)
        else:
            direct = python(
                f"import ctypes; z = ctypes.CDLL({library!r}); z.zdnn_init(); "
                "z.zdnn_is_nnpa_installed.restype = ctypes.c_bool; print(z.zdnn_is_nnpa_installed())"
            )
            assert str(answer["available"]) == direct.strip(), (answer, direct)
        print(answer["says"])


def test_the_banner_names_the_plugins_what_the_cpu_lacks_and_the_probes(banner, ours):
    if not (ours.get("plugins") or ours.get("cpu_wants") or ours.get("probes")):
        pytest.skip("no plugin, CPU wish or probe to show")
    code, text = banner
    assert code == 0, text
    for plugin in ours.get("plugins") or []:
        assert f"plugin: {plugin['name']} {plugin.get('version', '')}" in text, text
    if ours.get("cpu_wants"):
        assert ("this CPU lacks" in text) or ("which the backend wants" in text), text
    for probe in ours.get("probes") or []:
        assert f"{probe.partition('=')[0].replace('kleidiai', 'KleidiAI').replace('nnpa', 'NNPA')}:" in text, text
