"""Source builds refused before any work when a pin cannot build what was asked (issue 34), and the
torch patch that keeps complex dot products right whatever the build host can run."""

import shutil
import subprocess
import sys
import tarfile

import pytest
import yaml

from tests.conftest import NOW
from torchstack.base.errors import UsageProblem
from torchstack.catalog.model import ROOT, load_catalog
from torchstack.making.render import SCRIPTS
from torchstack.request.plan import Request
from torchstack.request.planner import make_plan

V2_ON_OLD_OPENBLAS = ["plan", "--build-target", "neoverse-v2", "--distribution", "trixie", "--source-version", "openblas=0.3.28"]


def test_an_openblas_pin_that_cannot_build_the_target_is_refused_in_one_line():
    result = subprocess.run([sys.executable, str(ROOT / "build.py"), *V2_ON_OLD_OPENBLAS], capture_output=True, text=True)
    assert result.returncode == 2 and result.stdout == "", result.stdout
    assert result.stderr.count("\n") == 1, result.stderr
    assert "openblas 0.3.28 cannot build for NEOVERSEV2: that needs 0.3.31 or newer" in result.stderr
    assert "pinned versions that can: 0.3.33, 0.3.32" in result.stderr


def test_the_default_openblas_builds_neoverse_v2(plan_for):
    plan = plan_for(build_target="neoverse-v2", distribution="trixie")
    assert plan.component("openblas").version == "0.3.33"


def test_an_older_pin_still_builds_targets_it_knows(plan_for):
    plan = plan_for(build_target="neoverse-n1", versions={"openblas": "0.3.28"})
    assert plan.component("openblas").version == "0.3.28"


def test_the_generic_x86_64_openblas_target_is_the_oldest_model(plan_for):
    """OpenBLAS's README: with DYNAMIC_ARCH, TARGET is the oldest model expected (conda-forge and numpy: PRESCOTT)."""
    env = plan_for(arch="x86_64", build_target="generic").component("openblas").env
    assert "TARGET=PRESCOTT DYNAMIC_ARCH=1 " in env["OPENBLAS_MAKE_FLAGS"], env


def test_a_torch_pin_past_2_14_is_refused_until_the_script_builds_like_upstream(tmp_path, plan_for):
    """A 2.14.0 pin added to components.yaml (its sha256 made up: nothing is fetched) is refused in one
    line naming upstream's new build; a 2.14.0 wheel is not concerned."""
    data = tmp_path / "data"
    shutil.copytree(ROOT / "torchstack/data", data)
    components = yaml.safe_load((data / "components.yaml").read_text())
    components["torch"]["versions"].insert(0, {"version": "2.14.0", "sha256": "0" * 64, "sha256_from": "a test"})
    (data / "components.yaml").write_text(yaml.safe_dump(components))
    catalog = load_catalog(data)
    with pytest.raises(UsageProblem, match=r"^torch 2\.14\.0: scripts/build-pytorch\.sh builds torch<2\.14 only .*scikit-build-core"):
        make_plan(catalog, Request(now=NOW, memory_gib=64.0))
    assert make_plan(catalog, Request(now=NOW, memory_gib=64.0, torch_version="2.13.0")).torch_version == "2.13.0"
    assert plan_for(torch_version="2.14.0", methods={"torch": "wheel"}, torch_wheel="index").torch_version == "2.14.0"


def test_the_torch_patch_is_in_the_series_with_its_upstream():
    lines = [line.split() for line in (ROOT / "patches/torch/series").read_text().splitlines() if line and not line.startswith("#")]
    assert lines == [
        [
            "0001-use-cblas-dot-with-openblas.patch",
            "upstream:",
            "conda-forge/pytorch-cpu-feedstock",
            "recipe/patches/0002-Use-BLAS_USE_CBLAS_DOT-for-OpenBLAS-builds.patch",
        ]
    ]
    header = (ROOT / "patches/torch" / lines[0][0]).read_text().split("--- a/")[0]
    assert header.startswith("Why: ") and "Upstream: conda-forge/pytorch-cpu-feedstock" in header


def test_the_torch_patch_applies_by_name_in_the_openblas_branch(tmp_path):
    """prepare-source.sh applies the series to a tree whose cmake/Dependencies.cmake has PyTorch's
    OpenBLAS branch (its lines as in torch 2.13, at another line than the hunk says): the set lands
    in that branch, before the probe's include could run."""
    openblas_branch = [
        'elseif(BLAS STREQUAL "OpenBLAS")',
        "  find_package(OpenBLAS REQUIRED)",
        "  include_directories(SYSTEM ${OpenBLAS_INCLUDE_DIR})",
        "  list(APPEND Caffe2_PUBLIC_DEPENDENCY_LIBS ${OpenBLAS_LIB})",
        '  set(BLAS_INFO "open")',
        "  set(BLAS_FOUND 1)",
        "  set(BLAS_LIBRARIES ${OpenBLAS_LIB})",
        'elseif(BLAS STREQUAL "BLIS")',
        "  find_package(BLIS REQUIRED)",
        "  include_directories(SYSTEM ${BLIS_INCLUDE_DIR})",
        "  list(APPEND Caffe2_PUBLIC_DEPENDENCY_LIBS ${BLIS_LIB})",
    ]
    source = tmp_path / "pytorch-v2.13.0"
    (source / "cmake").mkdir(parents=True)
    (source / "cmake/Dependencies.cmake").write_text("\n".join(["# filler"] * 150 + openblas_branch + ["endif()"]) + "\n")
    with tarfile.open(tmp_path / "pytorch-v2.13.0.tar.gz", "w:gz") as archive:
        archive.add(source, arcname="pytorch-v2.13.0")
    tree = tmp_path / "tree"
    command = [SCRIPTS / "prepare-source.sh", "torch", "2.13.0", tmp_path / "pytorch-v2.13.0.tar.gz", tree, ROOT / "patches/torch"]
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "applied 0001-use-cblas-dot-with-openblas.patch to torch 2.13.0" in result.stdout
    lines = (tree / "cmake/Dependencies.cmake").read_text().splitlines()
    at = lines.index("  set(BLAS_USE_CBLAS_DOT TRUE)")
    assert lines[at - 1] == "  set(BLAS_LIBRARIES ${OpenBLAS_LIB})" and lines[at + 1] == 'elseif(BLAS STREQUAL "BLIS")'
