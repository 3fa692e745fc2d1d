"""Images built on ours: a child `FROM` the release image adds a package that needs torch, with no
network, and keeps our torch's files; another torch is refused, naming the image's pin (README:
"Building on the image")."""

from __future__ import annotations

import shlex
import shutil

import pytest

from tests.engine.children import LOAD, write_docs_child
from tests.engine.conftest import pypi_wheel
from tests.engine.images import X86_ARGS, run_build_py, x86_wheelhouse
from torchstack.base import layout, sharing

pytestmark = pytest.mark.engine

# The torch package's files, each with its digest: equal output, the very same torch.
TORCH_FILES = (
    'cd "$(python3 -c \'import sysconfig; print(sysconfig.get_path("purelib"))\')" '
    "&& find torch torch-*.dist-info -type f -print0 | sort -z | xargs -0 sha256sum"
)


def _run(client, image: str, command: str, user: str | None = None) -> tuple[int, str]:
    container = client.containers.run(
        image, ["-c", command], entrypoint=["bash"], user=user, detach=True, network_mode="none", labels=sharing.labels()
    )
    try:
        code = container.wait(timeout=300)["StatusCode"]
        return code, container.logs().decode()
    finally:
        container.remove(force=True)


def test_a_child_image_adds_a_package_that_needs_torch_and_keeps_our_torch(client, x86_build, plugin_wheels, tmp_path, unique_tag):
    parent = x86_build["final_image"]
    wanted, other = plugin_wheels["compile_backend"], plugin_wheels["old_torch"]  # torch>=2.4; torch==2.0.1
    for wheel in (wanted, other):
        shutil.copy(wheel, tmp_path / wheel.name)
    # As the README's child Dockerfile, offline: pip finds torch installed and the pins hold it.
    (tmp_path / "Dockerfile").write_text(
        f"FROM {parent}\nUSER 0\nCOPY *.whl /tmp/\nRUN pip install --no-index /tmp/{wanted.name}\nUSER 1000:1000\n"
    )
    child = f"torchstack-child:{unique_tag}"
    client.images.build(path=str(tmp_path), tag=child, network_mode="none", rm=True)
    try:
        code, added = _run(client, child, "pip show torchstack-test-compile && pip check")
        assert code == 0, added
        code, ours = _run(client, parent, TORCH_FILES)
        assert code == 0 and ours.count("torch/") > 1000, ours[-1500:]
        code, theirs = _run(client, child, TORCH_FILES)
        assert code == 0 and theirs == ours, "the child's torch files differ from the image's"

        for asked, says in ((f"/tmp/{other.name}", "depends on torch==2.0.1"), ("torch==2.12.0", "The user requested torch==2.12.0")):
            code, said = _run(client, child, f"pip install --no-index {asked}", user="0")
            assert code != 0, said[-1500:]
            assert says in said and "The user requested (constraint) torch==" in said, said[-1500:]
        code, pins = _run(client, child, f"cat {layout.PINS}")
        assert "torchstack-test-compile" not in pins, "the child's addition changed the parent's pins"
    finally:
        client.images.remove(child, force=True)


def test_pypis_cuda_built_torchvision_beside_our_cpu_torch_is_refused_before_any_build(tmp_path):
    """PyPI's torchvision 0.28.0 declares torch==2.13.0, which our 2.13.0+cpu satisfies; its _C.so
    needs libtorch_cuda.so: beside a CPU torch it would import, then fail at its first operator."""
    wheel = pypi_wheel(tmp_path, "torchvision==0.28.0")
    result = run_build_py(*X86_ARGS, "--torch-wheel", x86_wheelhouse(), "--plugin-wheel", str(wheel))
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr[-2000:]
    assert "plugin torchvision 0.28.0 is built against a CUDA torch" in result.stderr and "libtorch_cuda.so" in result.stderr
    assert "this image's torch 2.13.0+cpu is a CPU build" in result.stderr


def test_a_child_that_bakes_a_model_as_the_docs_say_keeps_the_package_and_no_working_files(client, x86_build, tmp_path, unique_tag):
    """The docs' Dockerfile word for word, on the README image: the bake leaves its package, which a
    new container loads without compiling, and nothing else (its compile's working files went with the step)."""
    write_docs_child(tmp_path, x86_build["final_image"])
    child = f"torchstack-child:bake-{unique_tag}"
    client.images.build(path=str(tmp_path), tag=child, network_mode="none", rm=True)
    try:
        code, left = _run(client, child, layout.WORKING_FILES_COMMAND + "; true")
        assert code == 0 and not left.split(), f"working files the child's bake left: {left.split()[:20]}"
        code, said = _run(client, child, f"cd /tmp && python3 -c {shlex.quote(LOAD)}")
        assert code == 0 and said.split()[-2:] == ["baked", "True"], said[-2000:]
    finally:
        client.images.remove(child, force=True)
