"""Prebuilt torch wheels: refused when the tag would lie, versioned as torch reports itself."""

import zipfile
from pathlib import Path

import pytest

from torchstack.base.errors import UsageProblem
from torchstack.catalog.wheels import complex_dot_defect, pip_conf_text, pip_index_settings


def make_wheel(folder, name, files):
    path = folder / name
    with zipfile.ZipFile(path, "w") as wheel:
        for member, text in files.items():
            wheel.writestr(member, text)
    return path


@pytest.fixture
def wheelhouse(tmp_path):
    make_wheel(
        tmp_path,
        "torch-2.8.0-cp311-cp311-manylinux_2_28_aarch64.whl",
        {
            "torch/version.py": "__version__ = '2.8.0+cpu'\n",
            "torch.libs/libarm_compute-cf8c0b82.so": "",
        },
    )
    make_wheel(
        tmp_path,
        "torch-2.13.0-cp311-cp311-manylinux_2_28_aarch64.whl",
        {
            "torch/version.py": "__version__ = '2.13.0'\n",
            "torch/lib/libarm_compute.so": "",
            "torch/lib/libtorch_cuda.so": "",
        },
    )
    make_wheel(
        tmp_path,
        "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl",
        {
            "torch/version.py": "__version__ = '2.13.0+cpu'\n",
            "torch/include/dnnl.h": "",
        },
    )
    return tmp_path


def test_an_aarch64_cpu_wheel_with_acl_is_onednn_acl(plan_for, wheelhouse):
    plan = plan_for(backend="onednn-acl", methods={"torch": "wheel"}, torch_wheel=str(wheelhouse), torch_version="2.8.0")
    assert plan.torch_version == "2.8.0+cpu"
    # A cp311 wheel: bookworm, the newest Debian release with its Python, named in the tag.
    assert plan.distribution.name == "bookworm" and plan.release_tag == "r26.11-torch-2.8.0-onednn-acl-bookworm-torch.wheel"
    assert plan.component("torch").env == {"WHEEL": "/opt/torchstack/wheels/torch-2.8.0-cp311-cp311-manylinux_2_28_aarch64.whl"}


def test_a_cuda_wheel_is_refused_for_a_cpu_image(plan_for, wheelhouse):
    with pytest.raises(UsageProblem, match="is not a CPU-only build \\(it has libtorch_cuda\\)"):
        plan_for(backend="onednn-acl", methods={"torch": "wheel"}, torch_wheel=str(wheelhouse), torch_version="2.13.0")


def test_an_x86_wheel_without_onednn_is_refused(plan_for, tmp_path):
    wheel = make_wheel(tmp_path, "torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl", {"torch/version.py": ""})
    with pytest.raises(UsageProblem, match="is not a onednn build \\(it lacks dnnl.h\\)"):
        plan_for(methods={"torch": "wheel"}, torch_wheel=str(wheel))


def test_a_wheel_for_another_architecture_or_python_is_refused(plan_for, wheelhouse):
    wheel = wheelhouse / "torch-2.8.0-cp311-cp311-manylinux_2_28_aarch64.whl"
    with pytest.raises(UsageProblem, match="is not for x86_64 with Python 3.13"):
        plan_for(methods={"torch": "wheel"}, torch_wheel=str(wheel))
    with pytest.raises(UsageProblem, match="no torch 2.13.0 for cp313 x86_64"):
        plan_for(methods={"torch": "wheel"}, torch_wheel=str(wheelhouse), torch_version="2.13.0", distribution="trixie")


def test_a_version_the_folder_does_not_hold(plan_for, wheelhouse):
    with pytest.raises(UsageProblem, match="no torch 2.99.0 for cp313 x86_64"):
        plan_for(methods={"torch": "wheel"}, torch_wheel=str(wheelhouse), torch_version="2.99.0")


def test_a_package_index_becomes_pip_settings():
    assert pip_index_settings("https://user:token@pypi.example.com/simple") == {"index-url": "https://user:token@pypi.example.com/simple"}
    # pip ignores a plain-http index unless its host is trusted
    assert pip_conf_text("http://172.17.0.1:8080/simple/") == (
        "[global]\nindex-url = http://172.17.0.1:8080/simple/\ntrusted-host = 172.17.0.1:8080\n"
    )
    with pytest.raises(UsageProblem, match="not an http"):
        pip_index_settings("/srv/wheels")


@pytest.mark.parametrize(
    ("library", "bundled", "wrong"),
    [
        (b"\0zdotu_\0cdotu_\0", "torch.libs/libopenblasp-r0-121ca252.3.30.so", True),  # PyPI's torch 2.8.0 aarch64
        (b"\0zdotu_\0cblas_zdotu_sub\0", "torch.libs/libopenblasp-r0-121ca252.3.30.so", False),  # BLAS_USE_CBLAS_DOT
        (b"\0zdotu_\0", None, False),  # no OpenBLAS bundled (MKL linked in, as x86_64 wheels)
    ],
)
def test_a_wheel_whose_complex_dot_is_wrong_is_found_from_its_own_library(tmp_path, library, bundled, wrong):
    path = tmp_path / "torch-2.8.0-cp311-cp311-manylinux_2_28_aarch64.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr("torch/lib/libtorch_cpu.so", b"\x7fELF" + bytes(1 << 20) + library + bytes(64))
        if bundled:
            wheel.writestr(bundled, b"\x7fELF")
    found = complex_dot_defect(path)
    assert (found is not None) == wrong, found
    if wrong:
        assert "torch.dot and torch.vdot of complex tensors are wrong" in found and "libopenblasp-r0-121ca252.3.30.so" in found


def test_without_distribution_a_wheel_takes_the_newest_debian_with_its_python_and_says_why(plan_for, tmp_path):
    cp311 = make_wheel(
        tmp_path,
        "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl",
        {"torch/version.py": "__version__ = '2.13.0+cpu'\n", "torch/include/dnnl.h": ""},
    )
    plan = plan_for(methods={"torch": "wheel"}, torch_wheel=str(cp311))
    assert plan.distribution.name == "bookworm"
    assert plan.distribution_note == (
        "bookworm (Python 3.11): the newest Debian release whose Python the torch wheel is for (cp311; trixie has Python 3.13)"
    )
    cp313 = make_wheel(
        tmp_path,
        "torch-2.13.0+cpu-cp313-cp313-manylinux_2_28_x86_64.whl",
        {"torch/version.py": "__version__ = '2.13.0+cpu'\n", "torch/include/dnnl.h": ""},
    )
    assert plan_for(methods={"torch": "wheel"}, torch_wheel=str(tmp_path)).distribution.name == "trixie"
    assert plan_for(methods={"torch": "wheel"}, torch_wheel=str(cp313)).distribution_note.startswith("trixie (Python 3.13)")
    # Source builds take the newest release too.
    assert plan_for().distribution.name == "trixie"
    with pytest.raises(UsageProblem, match=r"torch-2.13.0\+cpu-cp311-.* is not for x86_64 with Python 3.13 \(trixie\)"):
        plan_for(methods={"torch": "wheel"}, torch_wheel=str(cp311), distribution="trixie")


def test_the_engine_tests_take_the_wheel_the_readme_command_takes_where_no_folder_is_named(monkeypatch):
    """No TORCHSTACK_TEST_WHEELHOUSE nor PIP_FIND_LINKS: the tests download the README plan's wheel the
    toolkit's own way, from the catalog's PyTorch CPU index (PyPI's x86_64 wheels are CUDA builds)."""
    import contextlib

    from tests.engine import images

    monkeypatch.delenv("TORCHSTACK_TEST_WHEELHOUSE", raising=False)
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    asked = []
    monkeypatch.setattr(images, "download_from_index", lambda *args: asked.append(args))
    with contextlib.ExitStack() as stack:
        folder = images._readme_wheel(stack)
        assert asked[0][0] == Path(folder)
    (_, arch, python, version, index) = asked[0]
    assert (arch, index) == ("x86_64", "https://download.pytorch.org/whl/cpu")
    assert python in ("3.11", "3.13") and version.startswith("2."), (python, version)
