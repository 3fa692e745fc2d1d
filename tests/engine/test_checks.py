"""The image checks fail when they should: wrong backend, a planted build tool and CA, a numpy on
another BLAS, a foreign image, our image without its start-up hook."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.engine.conftest import numpy_wheel
from tests.engine.images import CA_BUNDLE, run_build_py

pytestmark = pytest.mark.engine


def checks_of_a_changed_image(client, context: Path, base: str, steps: str, tag: str, select: str):
    """The checks that `select` names (-k), run on `base` changed by `steps` (Dockerfile lines, run as
    root; the image's user comes back after them), built as `tag` from `context` and removed after."""
    (context / "Dockerfile").write_text(f"FROM {base}\nUSER 0\n{steps}USER 1000:1000\n")
    client.images.build(path=str(context), tag=tag, network_mode="host", rm=True)
    try:
        return run_build_py("test", tag, "-k", select)
    finally:
        client.images.remove(tag, force=True)


def test_onednn_acl_checks_fail_on_an_x86_onednn_image(x86_build):
    """The backend's checks only (-k): the rest of them passed on this very image in the build."""
    result = run_build_py("test", x86_build["final_image"], "--backend", "onednn-acl", "-k", "backend or onednn")
    assert result.returncode == 1
    # oneDNN itself runs on x86 too; what makes the image no onednn-acl image is that ACL's
    # kernels do not run (oneDNN's log names x86 ones) and ACL is not in the process.
    assert "FAILED tests/image/final/test_final.py::test_conv_and_matmul_run_the_kernels_the_backend_promises" in result.stdout
    assert "; backend onednn-acl promises implementations matching" in result.stdout
    assert "FAILED tests/image/final/test_final.py::test_backend_libraries_are_in_the_image" in result.stdout
    assert "libarm_compute not mapped into torch's process" in result.stdout
    last = result.stdout.splitlines()[-1]
    assert "2 failed" in last and "1 passed" in last and "deselected" in last, last


def test_a_planted_build_tool_and_ca_bundle_are_caught(client, x86_build, tmp_path):
    tools = next(s for s in x86_build["stages"] if s["stage"] == "tools")["image"]
    pem = "-----BEGIN CERTIFICATE-----" + CA_BUNDLE.read_text().split("-----BEGIN CERTIFICATE-----")[-1]
    (tmp_path / "proxy-ca.pem").write_text(pem)
    steps = f"COPY --from={tools} /usr/bin/patch /usr/local/bin/patch\nCOPY proxy-ca.pem /opt/venv/lib/proxy-ca.pem\n"
    result = checks_of_a_changed_image(
        client, tmp_path, x86_build["final_image"], steps, "torchstack-test:planted", "build_tools or ca_bundles"
    )
    assert result.returncode == 1
    assert "FAILED tests/image/final/test_final.py::test_no_build_tools" in result.stdout
    assert "build tools left in the final image: ['patch']" in result.stdout
    assert "FAILED tests/image/final/test_final.py::test_no_extra_ca_bundles" in result.stdout
    assert "/opt/venv/lib/proxy-ca.pem" in result.stdout
    assert "2 failed" in result.stdout.splitlines()[-1], result.stdout.splitlines()[-1]


def test_an_image_the_toolkit_did_not_build(x86_build, plain_image):
    """Plain Debian (our bootstrapped one) with torch installed by pip, as root (the benchmark's
    plain image): which checks apply."""
    result = run_build_py("test", plain_image, "--backend", "onednn")
    out = result.stdout
    assert result.returncode == 1
    assert "not a torchstack image (no io.torchstack.build-info label)" in out
    assert "FAILED tests/image/base/test_base.py::test_default_user_is_not_root" in out
    # Its pip installs anything: no pins of the image hold torch there.
    assert "FAILED tests/image/final/test_final.py::test_the_pins_are_what_the_venv_holds" in out
    for applies in ("test_onednn_availability_is_what_the_backend_promises", "test_conv_and_matmul_run_the_kernels_the_backend_promises"):
        assert f"FAILED tests/image/final/test_final.py::{applies}" not in out
    assert "passed" in out.splitlines()[-1] and "skipped" in out.splitlines()[-1]


def test_a_numpy_on_another_blas_than_the_promised_one_is_caught(client, x86_build, tmp_path):
    """The tools image with its numpy swapped for PyPI's wheel (which carries scipy-openblas), its
    build-info still promising Debian's OpenBLAS: numpy's own build configuration gives it away."""
    tools = next(s for s in x86_build["stages"] if s["stage"] == "tools")["image"]
    wheel = numpy_wheel(tmp_path).name
    steps = f"COPY {wheel} /tmp/\nRUN /opt/venv/bin/pip install --no-index --no-deps --force-reinstall /tmp/{wheel} && rm /tmp/{wheel}\n"
    result = checks_of_a_changed_image(client, tmp_path, tools, steps, "torchstack-test:other-blas", "numpy_is_linked")
    assert result.returncode == 1, result.stdout[-2000:]
    assert "FAILED tests/image/tools/test_tools.py::test_numpy_is_linked_against_the_expected_blas" in result.stdout
    assert "expected numpy's blas to be openblas, found {'name': 'scipy-openblas" in result.stdout, result.stdout[-2000:]


def test_without_the_start_up_hook_the_cpu_limit_and_restricted_pod_checks_fail(client, x86_build, tmp_path):
    """The final image with the hook (torchstack-startup.pth and its module) taken out, the rest as
    built: under --cpus=1 torch starts a thread per core, and torch.compile without a folder it
    can run code from dies with Inductor's or Python's traceback instead of the one line."""
    site = "$(/opt/venv/bin/python3 -c 'import sysconfig; print(sysconfig.get_path(\"purelib\"))')"
    steps = f'RUN rm "{site}/torchstack-startup.pth" "{site}/torchstack_startup.py"\n'
    result = checks_of_a_changed_image(
        client,
        tmp_path,
        x86_build["final_image"],
        steps,
        "torchstack-test:no-start-up-hook",
        "threads_follow_a_cpu_limit or restricted_pod_without or noexec_tmp",
    )
    out = result.stdout
    assert result.returncode == 1, out[-3000:]
    assert "FAILED tests/image/final/test_final.py::test_threads_follow_a_cpu_limit" in out
    threads = re.search(r"AssertionError: (\d+) threads under --cpus=1", out)
    assert threads and int(threads[1]) > 1, out[-3000:]
    for case, died_of in (("noexec-tmp", "failed to map segment from shared object"), ("no-tmp", "No usable temporary directory")):
        assert (
            "FAILED tests/image/final/test_final.py::"
            f"test_a_restricted_pod_without_an_exec_folder_runs_eager_and_says_what_compile_needs[{case}]" in out
        )
        assert died_of in out, (case, out[-3000:])
    assert "FAILED tests/image/final/test_final.py::test_a_noexec_tmp_with_a_writable_home_compiles" in out
    assert "4 failed" in out.splitlines()[-1], out.splitlines()[-1]
