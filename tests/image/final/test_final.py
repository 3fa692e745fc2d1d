"""Checks for the final image: the backend really runs, the tag tells the truth, nothing extra ships."""

import concurrent.futures
import contextlib
import functools
import json
import os
import re
import shlex
import tarfile
import types
from pathlib import Path

import docker
import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.image.engine_host import engine_host
from tests.image.libs.test_libs import assert_openblas_is_the_openmp_build
from torchstack.base import layout, sharing
from torchstack.base.layout import EXAMPLES_DIR as EXAMPLES
from torchstack.engines import connection
from torchstack.request.host import host_arch
from torchstack.request.tags import tag_version

# What torch.compile needs at run time ("full" runtime); a "slim" image ships none of it.
COMPILERS = ("gcc", "g++", "cc", "c++", "cpp", "as", "ld")
# What builds use and no final image may keep, whatever its runtime.
BUILD_TOOLS = ("gfortran", "clang", "cmake", "ninja", "make", "ccache", "scons", "autoconf", "patch", "git")
# A model through torch.compile (Inductor generates C++ and compiles it) against eager mode, and
# the vector ISA Inductor picks for its kernels, as upstream's wheel smoke test checks. Run where
# examples/compile.py is not: under qemu (an emulated g++ compiling a ResNet's kernels takes
# minutes) and in a slim image (to see torch itself refuse, not only the example's guard).
COMPILE = """
import torch
from torch._inductor import cpu_vec_isa
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 8)).eval()
x = torch.randn(4, 64)
with torch.no_grad():
    torch.testing.assert_close(torch.compile(model)(x), model(x), rtol=1e-4, atol=1e-4)
isa = cpu_vec_isa.pick_vec_isa()
print(f"Inductor's vector ISA: {str(isa) if isa else 'none'}")
"""
# Under qemu user emulation (an image of another architecture than this host's) the examples loop
# runs one example: resnet.py, whose convolutions and linear layers go through the image's oneDNN
# (with ACL on aarch64). The others are architecture-independent Python over the same runtime:
# they run natively on the x86_64 image and on native runners of each architecture (the CI
# matrix), and under qemu each costs a minute or more and proves only qemu's arithmetic.
# torch.compile on the foreign architecture is its own check (test_torch_compile_...).
# (aarch64 torch's default int8 engine, oneDNN with ACL, also dies of SIGILL under bookworm's
# qemu 7.2, an instruction qemu does not implement.)
UNDER_EMULATION = ("resnet.py",)
# Scripts run one after another in one Python process (torch imported once: 2 of the 3 CPU-seconds
# of each run): each as `python3 NAME ARGS` runs it (its own __main__, argv and output), its exit
# status what SystemExit or an exception would give, its output in JSON. argv[1] is JSON:
# [[NAME, [ARGS...], CODE], ...], CODE null for a file of the working folder, else its text.
IN_ONE_PROCESS = """
import contextlib, io, json, runpy, sys, traceback
ran = {}
for name, args, code_text in json.loads(sys.argv[1]):
    out, err, code = io.StringIO(), io.StringIO(), 0
    sys.argv = [name, *args]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            if code_text is None:
                runpy.run_path(name, run_name="__main__")
            else:
                exec(compile(code_text, name, "exec"), {"__name__": "__main__"})
        except SystemExit as end:
            code = end.code if isinstance(end.code, int) else 0 if end.code is None else 1
            if isinstance(end.code, str):
                print(end.code, file=sys.stderr)
        except BaseException:
            traceback.print_exc()
            code = 1
    ran[name] = {"rc": code, "stdout": out.getvalue(), "stderr": err.getvalue()}
print(json.dumps(ran))
"""
# The example whose --benchmark mode the examples loop runs (a short one), and its arguments.
BENCHMARKED = {
    "native": ("sdpa.py", ["--benchmark", "--runs", "2", "--warmup", "1"]),
    "emulated": ("resnet.py", ["--benchmark", "--runs", "1", "--warmup", "0"]),
}


def _benchmarked(ours) -> tuple[str, list[str]]:
    """The example this image's examples loop runs in --benchmark mode, and its arguments."""
    return BENCHMARKED["emulated" if ours["arch"] != host_arch() else "native"]


# OpenShift's restricted policy: a random user id, in group 0, with no passwd entry.
ANY_USER = "123456:0"
# A restricted pod (Kubernetes' restricted profile with a read-only root file system): that user,
# no capabilities, no privilege escalation, no network. Its /tmp is what the pod mounts there.
RESTRICTED = {"user": ANY_USER, "read_only": True, "cap_drop": ["ALL"], "security_opt": ["no-new-privileges"], "network_mode": "none"}
EXEC_TMP = {"/tmp": "rw,exec"}  # an emptyDir, or docker run --tmpfs /tmp:rw,exec
NOEXEC_TMP = {"/tmp": "rw,noexec,nosuid,nodev"}  # docker run --tmpfs /tmp (Docker's default; Podman's allows exec)
# What a read-only root leaves of /var/tmp in a pod: Podman's --read-only mounts writable tmpfs
# folders there and at /tmp (its --read-only-tmpfs, which the API cannot turn off): these undo it.
READ_ONLY_TEMP = {"/var/tmp": "ro"}
# Eager mode, then torch.compile of the same model: where no folder allows running code, the first
# works and the second ends with the start-up hook's one line (scripts/torchstack_startup.py).
EAGER_THEN_COMPILE = """
import torch
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 8)).eval()
with torch.no_grad():
    model(torch.randn(4, 64))
    print("eager ran", flush=True)
    torch.compile(model)(torch.randn(4, 64))
print("compiled")
"""
# Inductor's header precompile (11 s of a first compile natively, a 150 MB file), skipped where it
# proves nothing: where no folder allows running code the kernel fails to load either way, and where
# the check is where the kernels are loaded from (the header is g++'s input, never run from its
# folder). compile.py's run, natively, keeps it, as users run it.
NO_HEADER_PRECOMPILE = "TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS=0"
# Every installed distribution with its requirements, and the image's marker environment.
DISTRIBUTIONS = """
import importlib.metadata, json, os, platform, sys
print(json.dumps({
    "env": {"python_version": "%d.%d" % sys.version_info[:2], "python_full_version": platform.python_version(),
            "platform_machine": platform.machine(), "platform_system": platform.system(),
            "platform_release": platform.release(), "sys_platform": sys.platform, "os_name": os.name,
            "implementation_name": sys.implementation.name,
            "platform_python_implementation": platform.python_implementation()},
    "dists": {d.metadata["Name"]: {"version": d.version, "requires": d.requires or []}
              for d in importlib.metadata.distributions()},
}))
"""
# Where an image may keep certificates: the system CA store.
CA_STORE = ("etc/ssl/", "usr/share/ca-certificates/")
# A PEM certificate: its body, not only the marker (code that parses PEM names the marker: pip
# 23.0's vendored urllib3 has it in a string).
PEM_CERTIFICATE = re.compile(rb"-----BEGIN CERTIFICATE-----\r?\n[A-Za-z0-9+/=\r\n]{64,}-----END CERTIFICATE-----")
MAX_CERTIFICATE_FILE = 64 * 2**20  # larger files (torch's libraries) are not read


def test_torch_version_matches_the_tag(torch_report, ours, labels):
    version = torch_report["version"]
    assert version == ours["torch_version"], f"expected torch {ours['torch_version']}, found {version}"
    tag = labels.get("org.opencontainers.image.version", "")
    assert f"-torch-{tag_version(version)}-" in tag, f"the image's release tag {tag!r} does not name torch {version}"
    # The tag leaves a `+cpu` local label out; the label keeps the whole version.
    assert labels.get("io.torchstack.torch.version") == version, f"label torch version, torch says {version}"


def test_oci_labels_agree_with_the_tag(labels, ours, image_attrs):
    assert labels.get("org.opencontainers.image.version") == ours["release_tag"], (
        f"label version {labels.get('org.opencontainers.image.version')!r}, build info {ours['release_tag']!r}"
    )
    for name in ("arch", "backend", "target"):
        assert labels.get(f"io.torchstack.{name}") == ours[name], f"label io.torchstack.{name} disagrees with the build"
    # The release tag, or the dated tag a push adds beside it (TAG-YYYYMMDDHHMM), or a name of the user's.
    dated = re.compile(re.escape(ours["release_tag"]) + r"-\d{12}")
    for repo_tag in image_attrs.get("RepoTags") or []:
        tag = repo_tag.rsplit(":", 1)[1]
        assert tag == ours["release_tag"] or dated.fullmatch(tag) or not tag.startswith("r"), (
            f"{repo_tag} names another release than {ours['release_tag']}"
        )
    assert ours["backend"] in ours["release_tag"], f"release tag {ours['release_tag']} does not name {ours['backend']}"


def test_onednn_availability_is_what_the_backend_promises(torch_report, backend):
    available = torch_report["mkldnn"]
    assert available == backend.mkldnn, f"backend {backend.name}: mkldnn.is_available() should be {backend.mkldnn}, is {available}"


def test_conv_and_matmul_run_the_kernels_the_backend_promises(torch_report, backend):
    """oneDNN's own log names the implementation of each primitive it ran: the convolution and
    the matmul (or inner product) must run the ones the backend promises (onednn_kernels in
    backends.yaml) on the CPU oneDNN reports (its "isa:" line)."""
    if not backend.mkldnn:
        pytest.skip(f"backend {backend.name} does not use oneDNN")
    log = torch_report["onednn_log"]
    isa = next((line.split("isa:", 1)[1] for line in log.splitlines() if ",info,cpu,isa:" in line), "unknown")
    ran: dict[str, set[str]] = {}
    for line in log.splitlines():
        if ",exec,cpu," in line:
            fields = line.split(",")
            ran.setdefault(fields[5], set()).add(fields[6])
    print(f"oneDNN on {isa}: " + "; ".join(f"{kind} {sorted(impls)}" for kind, impls in sorted(ran.items())))
    assert "convolution" in ran, f"no oneDNN convolution ran; verbose output:\n{log[-1500:]}"
    linear = ran.get("matmul", set()) | ran.get("inner_product", set())
    assert linear, f"no oneDNN inner product or matmul ran; ran {ran}"
    kernels = backend.onednn_kernels
    if kernels is None:
        return
    expected = kernels.expected(isa)
    for kind, impls in (("convolution", ran["convolution"]), ("matmul or inner product", linear)):
        assert any(re.search(expected, impl) for impl in impls), (
            f"the {kind} ran {sorted(impls)} on {isa}; backend {backend.name} promises implementations matching {expected}: {kernels.why}"
        )


def test_backend_libraries_are_in_the_image(torch_report, user_host, backend):
    """The backend's libraries are mapped into torch's process after oneDNN work, where the
    backend runs through oneDNN (ACL); otherwise (zDNN, reached through plugins) installed."""
    if not backend.libraries:
        pytest.skip(f"backend {backend.name} names no extra library")
    maps = torch_report["maps"]
    if backend.onednn_kernels:
        unmapped = [library for library in backend.libraries if library not in maps]
        assert not unmapped, f"{', '.join(unmapped)} not mapped into torch's process after oneDNN work"
        return
    linker_cache = user_host.run("/sbin/ldconfig -p").stdout
    for library in backend.libraries:
        assert library in maps or library in linker_cache, f"{library} is neither loaded by torch nor in the linker cache of the image"


def test_torch_names_the_blas_and_lapack_the_plan_promised(torch_report, ours):
    """torch.__config__.show() names the BLAS and LAPACK it was built on: ours (torch_blas in the
    build-info) when compiled here; a wheel's own, whichever, but some, when it came prebuilt."""
    config = torch_report["config"]
    found = dict(re.findall(r"\b(BLAS_INFO|LAPACK_INFO)=([^,\s]+)", config))
    promised = ours.get("torch_blas")
    for key in ("BLAS_INFO", "LAPACK_INFO"):
        assert found.get(key), f"torch names no {key}:\n{config}"
        if promised:
            assert found[key] == promised, f"{key}={found[key]}, but the plan promised {promised}:\n{config}"
    promise = promised or "the wheel's own"
    print(f"BLAS_INFO={found['BLAS_INFO']} LAPACK_INFO={found['LAPACK_INFO']} (promised: {promise})")


def test_complex_dot_and_mm_agree_with_a_reference_without_blas(torch_report, ours):
    """torch.dot, vdot and mm of complex tensors (BLAS's cdotu_/zdotc_/cgemm_) equal plain Python
    arithmetic (complex_blas.py): a torch built with the wrong complex-dot convention fails here.
    A prebuilt torch the build found that defect in (build-info torch_defects, read from the
    wheel, and said as a warning) must show exactly it: dot and vdot wrong, mm right."""
    found = torch_report["complex_blas"]
    assert len(found["checked"]) == 6, found["checked"]
    known = ours.get("torch_defects", {}).get("complex-dot")
    if known:
        wrong = {line.split()[0] for line in found["problems"]}
        assert wrong == {"dot", "vdot"}, f"the build said complex dots are wrong ({known}); found: {found['problems']}"
        pytest.xfail(f"as the build warned: {known}")
    assert not found["problems"], "complex BLAS results are wrong:\n" + "\n".join(found["problems"])
    print(f"complex BLAS agrees with the reference: {', '.join(found['checked'])}")


def test_torch_is_compiled_with_the_target_flag(torch_report, ours):
    if ours["components"]["torch"]["method"] != "source":
        pytest.skip("torch comes from a prebuilt wheel: its flags are upstream's")
    config = torch_report["config"]
    assert ours["target_flag"] in config, f"torch was not compiled with {ours['target_flag']}:\n{config}"


def test_every_shared_library_resolves(host, ours):
    """Every shared object of torch (lib/ and its extension modules, with all they load: a
    wheel's bundled torch.libs among them) and every library the payload ships finds all it needs
    (ldd: no "not found"), as upstream's check_binary.sh requires of torch/lib. The bundled
    libraries are not checked alone: they find one another through the object that loads them."""
    torch_dir = host.run(
        "python3 -c 'import importlib.util; print(importlib.util.find_spec(\"torch\").submodule_search_locations[0])'"
    ).stdout.strip()
    assert torch_dir, "torch is not installed"
    globs = [f"{torch_dir}/lib/*.so*", f"{torch_dir}/_C*.so"]
    globs += [f"{lib['directory']}/{p}" for lib in ours["payload"]["libraries"] for p in lib["patterns"]]
    listing = host.run(f"ls -1 {' '.join(globs)} 2>/dev/null").stdout.split()
    assert any("/lib/libtorch" in f for f in listing), f"no libtorch found under {torch_dir}/lib"
    script = 'for f in "$@"; do ldd "$f" 2>&1 | sed -n "s|^|$f: |; /not found/p"; done'
    missing = host.run(f"sh -c {shlex.quote(script)} sh {' '.join(listing)}").stdout.strip()
    assert not missing, f"unresolved libraries:\n{missing[:3000]}"
    print(f"{len(listing)} shared objects, all resolved")


def test_the_payload_ships_each_library_and_its_loader_path(host, ours):
    """What the build-info's payload lists is in the image, on the loader's path (layout.LD_SO_CONF)."""
    libraries = ours["payload"]["libraries"]
    if not libraries:
        pytest.skip("this image ships no compiled library of its own")
    conf = host.file(layout.LD_SO_CONF).content_string.split()
    cache = host.run("ldconfig -p").stdout
    for lib in libraries:
        assert lib["directory"] in conf, f"{lib['directory']} ({lib['component']}) is not in {layout.LD_SO_CONF}: {conf}"
        for pattern in lib["patterns"]:
            files = host.run(f"ls -1 {lib['directory']}/{pattern} 2>/dev/null").stdout.split()
            assert files, f"{lib['component']}: nothing matches {lib['directory']}/{pattern}"
            assert any(f"=> {f}" in cache for f in files), f"{lib['component']}: {files} not in the loader's cache"


def test_debian_openblas_is_the_openmp_build(host, ours):
    openblas = ours["components"].get("openblas")
    if openblas is None or openblas["method"] != "distro":
        pytest.skip("OpenBLAS does not come from Debian packages here")
    assert_openblas_is_the_openmp_build(host)


def test_what_torch_pulls_in_is_pinned(python, ours):
    """torch's requirements and theirs, as the image's own metadata lists them, are each at the pin
    the build gave pip (torch.yaml: each release's runtime_requirements)."""
    if "python_constraints" not in ours:
        pytest.skip("this build recorded no Python constraints")
    found = json.loads(python(DISTRIBUTIONS))
    env = {**default_environment(), **found["env"], "extra": ""}
    installed = {canonicalize_name(name): d for name, d in found["dists"].items()}
    pins = dict(pin.split("==") for pin in ours["python_constraints"])
    pins = {canonicalize_name(name): version for name, version in pins.items()}
    pulled, todo = set(), ["torch"]
    while todo:
        for text in installed[todo.pop()]["requires"]:
            requirement = Requirement(text)
            name = canonicalize_name(requirement.name)
            if (requirement.marker is None or requirement.marker.evaluate(env)) and name not in pulled:
                assert name in installed, f"{requirement} is required but not installed"
                pulled.add(name)
                todo.append(name)
    unpinned = sorted(pulled - set(pins))
    assert not unpinned, f"torch pulls in {unpinned}, which components.yaml does not pin"
    wrong = {name: installed[name]["version"] for name in pulled if installed[name]["version"] != pins[name]}
    assert not wrong, f"installed at other versions than pinned: {wrong}"
    assert pulled, "torch pulls in nothing: the image's metadata was not read"


def _on_path(host, names) -> list[str]:
    """Which of `names` the image's PATH has, asked in one command."""
    found = host.run(f'for name in {" ".join(names)}; do command -v "$name"; done').stdout.split()
    return [path.rsplit("/", 1)[-1] for path in found]


def test_compilers_are_what_the_runtime_promises(host, ours):
    found = _on_path(host, COMPILERS)
    if ours["runtime"] == "full":
        assert {"g++", "gcc"} <= set(found), f"runtime full, but torch.compile's compiler is missing (found {found})"
    else:
        cc1 = host.run("ls /usr/lib/gcc/*/*/cc1* 2>/dev/null").stdout.split()
        assert not found and not cc1, f"compilers left in a slim image: {found + cc1}"


def test_no_build_tools(host):
    found = _on_path(host, BUILD_TOOLS)
    assert not found, f"build tools left in the final image: {found}"


@pytest.mark.side_by_side("compile")
def test_torch_compile_compiles_a_model_that_matches_eager(side_by_side, ours):
    """Natively, examples/compile.py (a ResNet-style model with freezing, as users run it) in a
    restricted pod; the examples loop leaves it to this check. Else the small model of COMPILE."""
    result = side_by_side("compile")["compile"]
    if ours["runtime"] == "slim":
        assert result.rc != 0 and "InvalidCxxCompiler" in result.stderr, (
            f"a slim image should refuse torch.compile for want of a C++ compiler (exit {result.rc}):\n{result.stderr[-1500:]}"
        )
        return
    assert result.rc == 0, f"torch.compile failed:\n{result.stderr[-2500:]}"
    vec_isa = re.search(r"Inductor's vector ISA: (.+)", result.stdout)
    assert vec_isa and vec_isa[1].strip() != "none", f"Inductor found no vector ISA for its kernels ({result.stdout[-500:]})"
    print(result.stdout.strip())


# A package baked for another CPU (warm_elsewhere.py), run in the image.
WARM_ELSEWHERE = (Path(__file__).parent / "warm_elsewhere.py").read_text()


def _baked(ours) -> bool:
    """Whether the build compiled the warm example ahead of time (examples/warm.py): a full runtime
    built natively. An emulated build would compile it for qemu's CPU, and a slim one has no compiler."""
    return ours["runtime"] == "full" and ours["arch"] == host_arch()


def _compile(image, engine, ours) -> dict:
    """How torch.compile ends ("compile"): natively compile.py in a restricted pod; under qemu and in
    a slim image, the small model of COMPILE as the default user (under qemu without Inductor's header
    precompile: for one graph it only adds work). Where a package was baked, warm_elsewhere.py
    ("warm-elsewhere") follows compile.py in its process, as a server loads its models one after
    another: the fallback compiles the same model frozen, as compile.py does, with what compile.py left
    in Inductor's caches. compile.py's own compile is the one from nothing."""
    if ours["runtime"] == "slim" or ours["arch"] != host_arch():
        env = NO_HEADER_PRECOMPILE if ours["arch"] != host_arch() else ""
        with _running(image, engine) as plain:
            return {"compile": plain.run(f"{env} python3 -c {shlex.quote(COMPILE)}"), "warm-elsewhere": None}
    plan = [("compile.py", [], None)] + ([("warm_elsewhere.py", [], WARM_ELSEWHERE)] if _baked(ours) else [])
    with _running(image, engine, tmpfs=EXEC_TMP, **RESTRICTED) as pod:
        ran = _in_one_process(pod, plan)
    return {"compile": ran["compile.py"], "warm-elsewhere": ran.get("warm_elsewhere.py")}


@pytest.mark.side_by_side("compile")
def test_a_package_made_for_another_cpu_is_refused_and_the_model_compiled(side_by_side):
    """An image baked where other vector instructions were: its package is not used, the model is compiled
    here instead, and the answer matches eager mode (warm_elsewhere.py)."""
    result = side_by_side("compile")["warm-elsewhere"] or pytest.skip("no package baked: an emulated or slim image")
    assert result.rc == 0, result.stderr[-2500:]
    assert "was refused" in result.stdout and "made for another machine: cpu" in result.stderr, result.stdout + result.stderr


@pytest.mark.side_by_side("examples")
def test_a_baked_model_answers_a_new_restricted_pod_without_compiling(side_by_side, ours):
    """A new container under the restricted profile, with Docker's noexec /tmp (the examples loop): the
    example's model answers from the package compiled when the image was built, Dynamo compiles no frame,
    and it matches eager mode."""
    if not _baked(ours):
        pytest.skip("no package baked: an emulated or slim image")
    result = side_by_side("examples")["warm.py"]
    assert result.rc == 0, result.stderr[-1500:]
    assert "answered from the baked model" in result.stdout and "frames compiled in this process: 0" in result.stdout, result.stdout


def test_no_headers_sources_or_wheels(host, labels):
    """No build leftovers: our components' headers, sources, build trees, wheels. A "full" runtime
    keeps the system headers (/usr/include) that torch.compile's C++ includes."""
    info = json.loads(labels.get("io.torchstack.build-info", "{}"))
    prefixes = [c["prefix"] for c in info.get("components", {}).values() if c.get("prefix") not in (None, "/usr")]
    folders = " ".join(["/usr/local/include", *prefixes] + ([] if info.get("runtime") == "full" else ["/usr/include"]))
    leftovers = host.run(
        f"find {folders} -name '*.h' 2>/dev/null;"
        "find / -xdev \\( -path /proc -o -path /sys \\) -prune -o "
        f"\\( -name '*.whl' -o -name '*.tar.gz' -o -name '*.tar.xz' -o -path '{layout.SOURCE_TREES_DIR}' \\) -print"
    ).stdout.split()
    assert not leftovers, f"left in the final image: {leftovers[:20]}"


def test_no_working_files_of_a_build_step(image, engine):
    """Nothing a build step used stays in the image: in a new container of it (nothing run there
    yet), every folder where steps leave working files is empty (layout.WORKING_FOLDERS)."""
    with _running(image, engine) as pod:
        found = pod.run(layout.WORKING_FILES_COMMAND).stdout.split()
    assert not found, f"working files left in the image: {found[:20]}"


def test_what_nothing_at_run_time_reads_is_not_shipped(host, catalog, ours):
    """torch's C++ test programs and protoc (components.yaml: unread) and what the packages carry for no
    run-time use (platforms.yaml: unread_paths, which dpkg leaves unpacked) are not in the image; the
    examples and torch.compile, checked beside this, run without them."""
    site = host.run(f"{ours['venv']}/bin/python3 -c 'import sysconfig; print(sysconfig.get_path(\"purelib\"))'").stdout.strip()
    unread = [f"{site}/{path}" for c in catalog.components.values() for path in c.unread]
    unread += list(catalog.distributions[ours["distribution"]].unread_paths)
    found = host.run(f"ls -d {' '.join(unread)} 2>/dev/null").stdout.split()
    assert site and not found, f"shipped, though nothing at run time reads them: {found[:20]}"
    assert host.file(f"{site}/torch/bin/torch_shm_manager").exists, "torch_shm_manager (shared memory between processes) is gone"


def test_the_installer_is_what_the_runtime_promises_and_no_pip_caches(host, user_host, ours):
    """A "full" image keeps pip for the images built on it, held by the image's pins (pip's and
    uv's constraints) and trusting the system CA store; a "slim" one has no installer. Neither
    keeps pip's caches."""
    has_pip = user_host.run("python3 -m pip --version").rc == 0
    if ours["runtime"] == "full":
        assert has_pip, "runtime full, but pip is missing: no image can be built on this one"
        env = user_host.run("printenv PIP_CONSTRAINT UV_CONSTRAINT").stdout.split()
        assert env == [layout.PINS] * 2, f"PIP_CONSTRAINT and UV_CONSTRAINT should name {layout.PINS}: {env}"
        vendored = host.run(f"find {layout.VENV} -path '*/pip/_vendor/certifi/cacert.pem'").stdout.split()
        assert vendored and all(host.file(f).linked_to == layout.SYSTEM_CA_BUNDLE for f in vendored), (
            f"pip's CA bundle {vendored} should be a link to the system store {layout.SYSTEM_CA_BUNDLE}"
        )
        assert host.file(layout.SYSTEM_CA_BUNDLE).exists, f"no system CA store ({layout.SYSTEM_CA_BUNDLE}) for pip to trust"
    else:
        assert not has_pip, "pip is still installed in a slim image"
    caches = host.run("ls -d /root/.cache/pip /home/*/.cache/pip /tmp/pip-* 2>/dev/null").stdout.split()
    assert not caches, f"pip caches left: {caches}"


def test_the_pins_are_what_the_venv_holds(host, python):
    """layout.PINS lists every distribution of the venv at its exact version (the installer's own
    tools aside), torch and numpy among them: what images built on this one keep."""
    pins = host.file(layout.PINS)
    assert pins.exists, f"no {layout.PINS}: images built on this one would keep nothing"
    pinned = {canonicalize_name(n): v for n, _, v in (line.partition("==") for line in pins.content_string.split())}
    found = json.loads(
        python("import importlib.metadata as m, json; print(json.dumps({d.metadata['Name']: d.version for d in m.distributions()}))")
    )
    installed = {canonicalize_name(n): v for n, v in found.items() if canonicalize_name(n) not in layout.INSTALLER_TOOLS}
    assert pinned == installed, (
        f"pinned only: {sorted(set(pinned.items()) - set(installed.items()))[:5]}, "
        f"installed only: {sorted(set(installed.items()) - set(pinned.items()))[:5]}"
    )
    assert {"torch", "numpy"} <= set(pinned), f"torch or numpy not pinned: {sorted(pinned)}"


def test_the_installer_cannot_move_torch_or_numpy(user_host, ours):
    """pip in the image refuses another torch or numpy, naming the image's pin (offline: the pins
    decide before any index is asked)."""
    if ours["runtime"] != "full":
        pytest.skip("a slim image has no installer")
    for other in ("torch==2.0.1", "numpy==1.26.4"):
        result = user_host.run(f"python3 -m pip install --dry-run --no-index {other}")
        said = result.stdout + result.stderr
        name = other.partition("==")[0]
        assert result.rc != 0 and f"(constraint) {name}==" in said, f"pip install {other} (exit {result.rc}):\n{said[-1500:]}"


@pytest.mark.side_by_side("ca-bundles")
def test_no_extra_ca_bundles(side_by_side, ours):
    """No PEM certificate outside the system CA store, in any file of the image."""
    found = side_by_side("ca-bundles")
    assert not found, f"certificates outside the system CA store: {found}"


def _certificates(image, engine, ours) -> list[str]:
    """Files under 64 MiB holding a PEM certificate outside the system CA store. Natively, grep in a
    container as root lists the files that name the marker and each is then matched whole (2 s);
    under qemu, where that grep would be emulated, the files are read from the container's export
    on the host instead (created, never started)."""
    if ours["arch"] == host_arch():
        with _running(image, engine, user="root") as box:
            listed = box.run(
                f"find / -xdev -type f -size -{MAX_CERTIFICATE_FILE}c -print0 "
                f"| xargs -0r grep -lFZ -e {shlex.quote('-----BEGIN CERTIFICATE-----')}"
            )
            assert not listed.stderr, f"the search for certificates failed (exit {listed.rc}): {listed.stderr[-800:]}"
            candidates = [path for path in listed.stdout.split("\0") if path and not path.lstrip("/").startswith(CA_STORE)]
            return [path for path in candidates if PEM_CERTIFICATE.search(box.file(path).content)]
    found = []
    created = docker.from_env().containers.create(image, entrypoint=["true"], network_mode="none", labels=sharing.labels())
    try:
        with tarfile.open(fileobj=_Stream(created.export()), mode="r|") as files:
            for entry in files:
                if entry.isfile() and not entry.name.startswith(CA_STORE) and entry.size < MAX_CERTIFICATE_FILE:
                    if PEM_CERTIFICATE.search(files.extractfile(entry).read()):
                        found.append("/" + entry.name)
    finally:
        created.remove(force=True)
    return found


class _Stream:
    """A file-like view of the chunks docker-py streams, for tarfile's stream mode."""

    def __init__(self, chunks):
        self.chunks, self.buffer = iter(chunks), b""

    def read(self, size: int) -> bytes:
        while len(self.buffer) < size:
            chunk = next(self.chunks, b"")
            if not chunk:
                break
            self.buffer += chunk
        data, self.buffer = self.buffer[:size], self.buffer[size:]
        return data


@contextlib.contextmanager
def _running(image, engine, **options):
    """A container of the image that sleeps, with docker run's `options`, as a testinfra host
    reached through the engine's CLI (docker or podman)."""
    options.setdefault("network_mode", "none")
    started = docker.from_env().containers.run(image, entrypoint=["sleep", "infinity"], detach=True, labels=sharing.labels(), **options)
    try:
        yield engine_host(engine, started.id)
    finally:
        started.remove(force=True)


@pytest.fixture(scope="session")
def any_user_host(image, engine):
    """A second container of the image, run as an arbitrary user id in group 0."""
    with _running(image, engine, user=ANY_USER) as started:
        yield started


# What the start-up hook set and decided, without importing torch (OMP_NUM_THREADS is what torch then
# uses); without the hook, what is set, as backend_info.py says it.
HOOK_THREADS = """
import os
try:
    import torchstack_startup
    why = torchstack_startup.decision
except ImportError:
    why = "not a torchstack image: torch's own choice"
print(f"threads: {os.environ.get('OMP_NUM_THREADS', 'unset')} ({why})")
"""


def _threads(host, ours, env: str = "", torch: bool = True) -> tuple[str, str]:
    """The thread count torch starts with, and what the start-up hook decided, from backend_info.py.
    Without `torch`, and under qemu (an image of another architecture, where an import of torch takes
    15 s), what the hook set instead: that torch follows OMP_NUM_THREADS is checked natively."""
    if not torch or ours["arch"] != host_arch():
        result = host.run(f"{env} python3 -c {shlex.quote(HOOK_THREADS)}")
    else:
        result = host.run(f"cd {EXAMPLES} && {env} python3 backend_info.py")
    assert result.rc == 0, result.stderr[-1500:]
    shown = re.search(r"^threads: (\S+) \((.*)\)$", result.stdout, re.M)
    assert shown, f"no thread line with its reason:\n{result.stdout}"
    return shown[1], shown[2]


# The runs under a CPU limit (docker run --cpus=1: a CFS quota, as a Kubernetes CPU limit): as the
# image starts (torch's own count), with the user's OMP_NUM_THREADS, and with the switch that leaves
# threads to torch (what the hook set: torch reads OMP_NUM_THREADS, as the first run shows).
UNDER_A_CPU_LIMIT = {"plain": ("", True), "user's": ("OMP_NUM_THREADS=2", False), "switched off": ("TORCHSTACK_FOLLOW_CPU_LIMIT=0", False)}


def _cpu_limit(image, engine, ours) -> dict[str, tuple[str, str]] | None:
    if len(os.sched_getaffinity(0)) < 2:
        return None  # this host has one CPU: no limit below its cores to run under
    with _running(image, engine, nano_cpus=10**9) as limited:
        return {name: _threads(limited, ours, env, torch) for name, (env, torch) in UNDER_A_CPU_LIMIT.items()}


def _eager_then_compile(image, engine, ours, env: str = "", **options) -> tuple[str, str]:
    """How EAGER_THEN_COMPILE ends in a container run with `options` (natively; under qemu, where a
    compile takes minutes, and in a slim image: empty), and what the start-up hook says of
    torch.compile's scratch."""
    with _running(image, engine, **options) as pod:
        ran = ""
        if ours["arch"] == host_arch() and ours["runtime"] != "slim":
            result = pod.run(f"{env} python3 -c {shlex.quote(EAGER_THEN_COMPILE)}")
            ran = f"exit {result.rc}\n{result.stdout}{result.stderr}"
        scratch = pod.run("python3 -m torchstack_startup")
        return ran, scratch.stdout + scratch.stderr


def _examples(image, engine, ours) -> dict:
    """Each example's run in a restricted pod with Docker's noexec /tmp (none but compile.py needs a
    folder to run code from), in one Python process (IN_ONE_PROCESS; compile.py's is the compile
    check's, natively), one of them in --benchmark mode: {NAME: its run as a testinfra result has it
    (rc, stdout, stderr), or None where not run}."""
    emulated = ours["arch"] != host_arch()
    benchmarked, benchmark_args = _benchmarked(ours)
    pinned = {} if emulated else {"cpuset_cpus": "0"}  # docker run --cpuset-cpus=0: the affinity check reads backend_info.py
    with _running(image, engine, tmpfs=NOEXEC_TMP, **RESTRICTED, **pinned) as pod:
        names = [path.rsplit("/", 1)[1] for path in pod.run(f"ls {EXAMPLES}/[!_]*.py").stdout.split()]
        wanted = [
            name
            for name in names
            if not (emulated and name not in UNDER_EMULATION) and not (name == "compile.py" and ours["runtime"] != "slim")
        ]
        ran = _in_one_process(pod, [(name, benchmark_args if name == benchmarked else [], None) for name in wanted])
    return {name: ran.get(name) for name in names if name in ran or emulated}


def _in_one_process(pod, plan: list[tuple[str, list[str], str | None]]) -> dict[str, types.SimpleNamespace]:
    """Each (NAME, ARGS, CODE) of `plan` run in one Python process of the pod, in the examples' folder
    (IN_ONE_PROCESS): {NAME: its run as a testinfra result has it (rc, stdout, stderr)}."""
    result = pod.run(f"cd {EXAMPLES} && python3 -c {shlex.quote(IN_ONE_PROCESS)} {shlex.quote(json.dumps(plan))}")
    assert result.rc == 0, f"the runner of {[name for name, _, _ in plan]} failed:\n{result.stderr[-2500:]}"
    return {name: types.SimpleNamespace(**outcome) for name, outcome in json.loads(result.stdout.splitlines()[-1]).items()}


# The slow checks' runs, each in a container of its own, independent of one another: started side by
# side (within the host's cores, one more to cover container start-ups) when the first check that
# reads one needs it. Only the runs of the checks selected start. A run's failure is its check's.
RUNS = {
    "compile": _compile,
    "noexec-home": functools.partial(_eager_then_compile, env=NO_HEADER_PRECOMPILE, user=ANY_USER, tmpfs=NOEXEC_TMP),
    "noexec-tmp": functools.partial(_eager_then_compile, env=NO_HEADER_PRECOMPILE, **RESTRICTED, tmpfs={**READ_ONLY_TEMP, **NOEXEC_TMP}),
    "examples": _examples,
    "no-tmp": functools.partial(_eager_then_compile, **RESTRICTED, tmpfs={**READ_ONLY_TEMP, "/tmp": "ro"}),
    "ca-bundles": _certificates,
    "cpu-limit": _cpu_limit,
}


@pytest.fixture(scope="session", autouse=True)
def side_by_side(request, image, engine, labels):
    """The runs the selected checks read, started as the first check of this folder starts; a check
    takes its run's result (or its exception) with side_by_side(NAME)."""
    ours = json.loads(labels.get("io.torchstack.build-info", "null"))
    wanted = {name for item in request.session.items for mark in item.iter_markers("side_by_side") for name in mark.args}
    workers = len(os.sched_getaffinity(0)) + 1
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="check-run") as pool:
        started = {name: pool.submit(run, image, engine, ours) for name, run in RUNS.items() if ours and name in wanted}
        try:
            yield lambda name: started[name].result()
        finally:
            for future in started.values():
                future.cancel()


@pytest.mark.side_by_side("cpu-limit")
def test_threads_follow_a_cpu_limit(side_by_side, ours):
    runs = side_by_side("cpu-limit") or pytest.skip("this host has one CPU: no limit below its cores to run under")
    count, why = runs["plain"]
    assert count == "1", f"{count} threads under --cpus=1 ({why})"
    assert why.startswith("OMP_NUM_THREADS=1 from the CPU quota of 1 CPU (cgroup "), why


@pytest.mark.side_by_side("examples")
def test_threads_follow_the_affinity_mask(side_by_side, ours):
    """docker run --cpuset-cpus=0 (the examples' pod, natively): torch counts the CPUs it may run on;
    the hook leaves it so. backend_info.py, the first example, shows both."""
    if ours["arch"] != host_arch():
        pytest.skip("torch's own count (the hook sets nothing here): checked on the native image")
    shown = re.search(r"^threads: (\S+) \((.*)\)$", side_by_side("examples")["backend_info.py"].stdout, re.M)
    assert shown, f"backend_info.py shows no thread line with its reason:\n{side_by_side('examples')['backend_info.py'].stdout}"
    count, why = shown[1], shown[2]
    assert count == "1", f"{count} threads on one CPU ({why})"
    assert why == "1 CPU in the affinity mask, no CPU quota: torch's own choice", why


@pytest.mark.side_by_side("cpu-limit")
def test_a_users_omp_num_threads_wins_over_the_cpu_limit(side_by_side, ours):
    runs = side_by_side("cpu-limit") or pytest.skip("this host has one CPU: no limit below its cores to run under")
    assert runs["user's"] == ("2", "OMP_NUM_THREADS=2, as set by the user")


@pytest.mark.side_by_side("cpu-limit")
def test_the_switch_leaves_threads_to_torch_under_a_cpu_limit(side_by_side):
    runs = side_by_side("cpu-limit") or pytest.skip("this host has one CPU: no limit below its cores to run under")
    assert runs["switched off"] == ("unset", "not following the CPU limit (TORCHSTACK_FOLLOW_CPU_LIMIT=0)")


@pytest.mark.side_by_side("noexec-tmp", "no-tmp")
@pytest.mark.parametrize("run", ["noexec-tmp", "no-tmp"])
def test_a_restricted_pod_without_an_exec_folder_runs_eager_and_says_what_compile_needs(side_by_side, ours, run):
    """A read-only root with Docker's noexec /tmp, or with no writable folder at all: eager mode
    runs; torch.compile (Inductor loads the kernels it compiles) ends with one line, no traceback."""
    ran, scratch = side_by_side(run)
    if ran:
        assert ran.startswith("exit 1\neager ran\n") and "compiled" not in ran and "Traceback" not in ran, ran[-2500:]
        assert ran.rstrip().splitlines()[-1].startswith("torchstack: torch.compile needs a writable folder"), ran[-2500:]
    assert "torch.compile scratch: /tmp: " in scratch and "/dev/shm: " in scratch, scratch


@pytest.mark.side_by_side("noexec-home")
def test_a_noexec_tmp_with_a_writable_home_compiles(side_by_side, ours):
    """docker run --tmpfs /tmp (noexec) as an arbitrary user, the root writable: Inductor's cache
    goes where its kernels can be loaded from."""
    ran, scratch = side_by_side("noexec-home")
    if ran:
        assert ran.startswith("exit 0\neager ran\ncompiled"), ran[-2500:]
    assert "torch.compile scratch: TORCHINDUCTOR_CACHE_DIR=" in scratch and "(/tmp: mounted noexec)" in scratch, scratch


def test_an_arbitrary_user_id_has_a_writable_home(any_user_host):
    result = any_user_host.run('id -u && echo "$HOME" && touch "$HOME/.written" && rm "$HOME/.written"')
    assert result.rc == 0, f"user {ANY_USER} cannot write its home: {result.stdout} {result.stderr}"
    assert result.stdout.split() == [ANY_USER.split(":")[0], layout.USER.home], result.stdout
    # What torch.compile names its cache after, and many tools call: it must not need a passwd entry.
    named = any_user_host.run("python3 -c 'import getpass; print(getpass.getuser())'")
    assert named.rc == 0, f"getpass.getuser() fails for user {ANY_USER}:\n{named.stderr[-800:]}"


@pytest.mark.side_by_side("examples")
def test_every_example_runs_in_a_restricted_pod(side_by_side, ours):
    """As an arbitrary user with a read-only root, no capabilities and Docker's noexec /tmp."""
    ran = side_by_side("examples")
    assert len(ran) >= 7, f"expected the examples in {EXAMPLES}, found {sorted(ran)}"
    for name, result in ran.items():
        if result is None:
            print(f"{name}: not run under qemu emulation (see UNDER_EMULATION)")
        elif name in ("compile.py", "warm.py") and ours["runtime"] == "slim":  # the example's own one line
            assert result.rc == 3 and "needs a C++ compiler" in result.stderr, result.stderr[-1500:]
        else:
            assert result.rc == 0, f"{name} failed in a restricted pod (user {ANY_USER}):\n{result.stderr[-1500:]}"
            print(result.stdout.strip())


@pytest.mark.side_by_side("examples")
def test_each_example_benchmarks_to_one_json_line(side_by_side, ours):
    """The example the examples loop runs in --benchmark mode (BENCHMARKED) prints one JSON line."""
    name, args = _benchmarked(ours)
    result = side_by_side("examples")[name]
    assert result.rc == 0, result.stderr[-1500:]
    report = json.loads(result.stdout)
    assert report["example"] == name.removesuffix(".py") and report["runs"] == int(args[args.index("--runs") + 1]), report
    assert report["median_s"] > 0, report


def test_interactive_start_shows_the_banner_and_the_defaults(banner, ours):
    """On a pseudo-terminal (docker run -it) the entry point greets; the runtime defaults are listed."""
    code, text = banner
    assert code == 0, text
    assert f"torchstack {ours['release_tag']}" in text and EXAMPLES in text, text
    for name, setting in ours["runtime_env"].items():
        shown = f"{name}={setting['value']}" if setting["default"] else f"-e {name}={setting['value']}"
        assert shown in text, f"the banner does not show {shown}:\n{text}"
    # What the start-up hook decided (threads, torch.compile's scratch), as every python3 here does.
    assert "threads: " in text and "torch.compile scratch: " in text, text


def test_a_non_interactive_run_prints_only_its_own_output(image):
    """docker run IMAGE CMD: through the entry point (and its CPU check, which passes on this
    host), nothing added to the output."""
    engine = connection.connect(connection.choose("auto"))  # the checks' engine: DOCKER_HOST
    out = engine.output_of(image, ["python3", "-c", "print('only this')"], stderr=True, network_mode="none")
    assert out.decode() == "only this\n", out


def test_the_cpu_guard_refuses_a_cpu_that_lacks_a_required_feature(user_host, ours, catalog):
    field = catalog.architectures[ours["arch"]].cpuinfo_features
    required = ours["cpu_features"]
    assert required, f"target {ours['target']} lists no cpu_features to guard"
    simulated = f"{field}\t: {' '.join(required[:-1])} some-other-feature"
    start = f"printf '%s\\n' {shlex.quote(simulated)} > /tmp/cpuinfo && TORCHSTACK_CPUINFO=/tmp/cpuinfo"
    refused = user_host.run(f"{start} {layout.ENTRYPOINT} python3 -c 'print(1)'")
    assert refused.rc == 1 and refused.stdout == "", (refused.rc, refused.stdout)
    assert f"this CPU lacks {required[-1]}" in refused.stderr and f"built for {ours['target']}" in refused.stderr, refused.stderr
    assert refused.stderr.count("\n") == 1, refused.stderr
    skipped = user_host.run(f"{start} TORCHSTACK_SKIP_CPU_CHECK=1 {layout.ENTRYPOINT} python3 -c 'print(1)'")
    assert skipped.rc == 0 and skipped.stdout == "1\n", skipped.stderr


def _payload_files(host, ours) -> list[str]:
    globs = [f"{lib['directory']}/{p}" for lib in ours["payload"]["libraries"] for p in lib["patterns"]]
    return host.run(f"ls -1 {' '.join(globs)} 2>/dev/null").stdout.split() if globs else []


def _mib(host, *paths: str) -> str:
    if not paths:
        return "0 MiB"
    out = host.run(f"du -scL {' '.join(paths)} | tail -1").stdout.split()
    return f"{int(out[0]) / 1024:,.0f} MiB" if out else "?"


def test_image_size_is_within_budget(image_attrs, catalog, ours, stage, host):
    budget = catalog.stage(stage).size_budget_mib
    if budget is None:
        pytest.skip(f"no size budget for stage {stage}")
    size = image_attrs["Size"] / 2**20
    print(f"image size {size:,.0f} MiB of a {budget:,} MiB budget")
    print(f"payload: venv {_mib(host, ours['venv'])}, libraries {_mib(host, *_payload_files(host, ours))}")
    assert size <= budget, f"the image is {size:,.0f} MiB, over its {budget:,} MiB budget"


def test_the_sbom_lists_what_the_image_holds(host, python, ours):
    """The CycloneDX SBOM in the image names this release, every Debian package dpkg says is
    installed, and every distribution of the venv, torch at the version torch reports."""
    sbom_file = host.file(layout.TOOLKIT_DIR + "/sbom.cdx.json")
    assert sbom_file.exists, "the release image carries no SBOM"
    bom = json.loads(sbom_file.content_string)
    assert bom["bomFormat"] == "CycloneDX" and bom["metadata"]["component"]["version"] == ours["release_tag"]
    purls = [c.get("purl", "") for c in bom["components"]]
    installed = host.run("dpkg-query -W -f '${Package} ${db:Status-Status}\\n'").stdout.split("\n")
    debian = {line.split()[0] for line in installed if line.endswith(" installed")}
    listed = {c["name"] for c in bom["components"] if c.get("purl", "").startswith("pkg:deb/")}
    assert listed == debian, f"dpkg only: {sorted(debian - listed)[:5]}, SBOM only: {sorted(listed - debian)[:5]}"
    venv = json.loads(
        python(
            "import importlib.metadata as m, json, sys; "
            "print(json.dumps(sorted({d.metadata['Name'] for d in m.distributions(path=sys.path)})))"
        )
    )
    names = {c["name"] for c in bom["components"] if c.get("purl", "").startswith("pkg:pypi/")}
    assert names == set(venv), f"venv only: {sorted(set(venv) - names)[:5]}, SBOM only: {sorted(names - set(venv))[:5]}"
    # As pip records it (PyPI's aarch64 torch 2.8.0 wheel says 2.8.0; torch.__version__ 2.8.0+cpu).
    torch = python("import importlib.metadata as m; print(m.version('torch'))").strip()
    assert f"pkg:pypi/torch@{torch.replace('+', '%2B')}" in purls, f"torch {torch} not in the SBOM"
