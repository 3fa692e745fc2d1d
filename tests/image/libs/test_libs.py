"""Checks for the libs stage and its children: each library of the backend, built for the target."""

import pytest

from torchstack.base.layout import LD_SO_CONF, PAYLOAD_DIR


def _components(ours, catalog, stage="libs", method=None):
    return {
        name: c
        for name, c in ours["components"].items()
        if catalog.components[name].stage == stage and (method is None or c["method"] == method)
    }


def test_each_compiled_library_is_installed_and_staged_for_the_final_image(host, ours, catalog):
    """What components.yaml says a compiled component ships is installed under its prefix, staged
    (links kept) under layout.PAYLOAD_DIR for the final stage, and on the loader's path."""
    compiled = _components(ours, catalog, method="source")
    if not compiled:
        pytest.skip("no library of this image was compiled from source")
    conf = host.file(LD_SO_CONF).content_string.split()
    for name, c in compiled.items():
        for pattern in catalog.components[name].ships:
            folder = f"{c['prefix']}/{pattern.rsplit('/', 1)[0]}"
            installed = host.run(f"cd {folder} && ls -1 {pattern.rsplit('/', 1)[1]}").stdout.split()
            staged = host.run(f"cd {PAYLOAD_DIR}{folder} && ls -1 {pattern.rsplit('/', 1)[1]}").stdout.split()
            assert installed, f"{name} {c['version']}: nothing matches {c['prefix']}/{pattern}"
            assert staged == installed, f"{name}: staged {staged}, installed {installed}"
            assert folder in conf, f"{name}: {folder} is not in {LD_SO_CONF} ({conf})"


def test_openblas_is_built_for_the_target(host, ours, target, python):
    openblas = ours["components"].get("openblas")
    if openblas is None or openblas["method"] != "source":
        pytest.skip("OpenBLAS is not compiled here (distro package or not part of this backend)")
    code = (
        "import ctypes; lib = ctypes.CDLL('{p}/lib/libopenblas.so'); "
        "lib.openblas_get_config.restype = ctypes.c_char_p; "
        "lib.openblas_get_corename.restype = ctypes.c_char_p; "
        "print(lib.openblas_get_config().decode()); print(lib.openblas_get_corename().decode())"
    ).format(p=openblas["prefix"])
    config, corename = python(code).strip().splitlines()
    if target.openblas.dynamic_arch:
        assert "DYNAMIC_ARCH" in config, f"expected a DYNAMIC_ARCH build, openblas_get_config() = {config!r}"
    else:
        assert target.openblas.target.lower() == corename.lower(), (
            f"expected OpenBLAS core {target.openblas.target}, openblas_get_corename() = {corename!r} ({config})"
        )
    recorded = host.file(f"{openblas['prefix']}/share/torchstack/openblas-make-flags").content_string
    assert f"TARGET={target.openblas.target}" in recorded.split(), f"recorded make flags: {recorded!r}"


def test_openblas_from_debian_is_the_packaged_one(host, ours):
    openblas = ours["components"].get("openblas")
    if openblas is None or openblas["method"] != "distro":
        pytest.skip("OpenBLAS does not come from Debian packages here")
    assert "libopenblas.so.0" in host.run("ldconfig -p").stdout, "Debian's libopenblas.so.0 is not in the linker cache"
    assert_openblas_is_the_openmp_build(host)


def assert_openblas_is_the_openmp_build(host):
    """Debian's libopenblas.so.0 (an alternatives link) resolves to the OpenMP build, the threading
    torch uses: the pthreads build would oversubscribe the cores next to torch's OpenMP threads."""
    resolved = host.run("readlink -f \"$(ldconfig -p | awk '/libopenblas.so.0 /{print $NF; exit}')\"").stdout.strip()
    assert "/openblas-openmp/" in resolved, f"libopenblas.so.0 resolves to {resolved or 'nothing'}, not Debian's OpenMP build"


def test_acl_is_built_for_the_target(host, ours, target):
    acl = ours["components"].get("acl")
    if acl is None:
        pytest.skip("the Arm Compute Library is not compiled for this image")
    assert host.file(f"{acl['prefix']}/build/libarm_compute.so").exists, "libarm_compute.so is missing"
    recorded = host.file(f"{acl['prefix']}/share/torchstack/acl-scons-flags").content_string.split()
    assert f"arch={target.acl.arch}" in recorded, f"expected arch={target.acl.arch}, recorded {recorded}"


def test_zdnn_is_built_for_the_target(host, ours, target):
    zdnn = ours["components"].get("zdnn")
    if zdnn is None:
        pytest.skip("zDNN is not part of this image")
    assert host.file(f"{zdnn['prefix']}/lib/libzdnn.so").exists, "libzdnn.so is missing"
    recorded = host.file(f"{zdnn['prefix']}/share/torchstack/zdnn-cflags").content_string
    assert f"-march={target.zdnn.march}" in recorded.split(), f"expected -march={target.zdnn.march}, recorded {recorded!r}"


def test_zdnn_answers_whether_this_machine_has_an_nnpa(host, ours, python):
    """libzdnn's own zdnn_is_nnpa_installed(), through ctypes as the image's probe asks it: an
    answer on any s390x machine (under qemu, no NNPA), and yes where the kernel lists the facility."""
    zdnn = ours["components"].get("zdnn")
    if zdnn is None:
        pytest.skip("zDNN is not part of this image")
    code = (
        f"import ctypes; z = ctypes.CDLL('{zdnn['prefix']}/lib/libzdnn.so'); z.zdnn_init.restype = None; "
        "z.zdnn_is_nnpa_installed.restype = ctypes.c_bool; z.zdnn_init(); print(z.zdnn_is_nnpa_installed())"
    )
    answer = python(code).strip()
    assert answer in ("True", "False"), answer
    features = host.run("grep -m1 '^features' /proc/cpuinfo").stdout.split()
    if "nnpa" in features:
        assert answer == "True", f"the kernel lists the NNPA facility, libzdnn says {answer}"
    print(f"libzdnn: NNPA {'present' if answer == 'True' else 'not present'} on this machine")
