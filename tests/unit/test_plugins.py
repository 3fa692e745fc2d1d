"""Vendor plugin wheels, read from real wheels the tests build (tests/plugins/): what they need
from torch and register, and refused in one line before any build when they cannot work."""

import shutil
import subprocess
import sys
import zipfile

import pytest

from torchstack.base.errors import UsageProblem
from torchstack.catalog.model import ROOT
from torchstack.catalog.plugins import read_wheel
from torchstack.making.render import assemble_context, banner
from torchstack.request.metadata import build_info


def run_cli(*args):
    return subprocess.run([sys.executable, str(ROOT / "build.py"), *args], capture_output=True, text=True, cwd=ROOT)


def test_a_wheel_says_what_it_registers_and_needs_from_torch(catalog, plugin_wheels):
    compile_plugin = read_wheel(plugin_wheels["compile_backend"], catalog, "x86_64", "3.11")
    assert compile_plugin.name == "torchstack-test-compile" and compile_plugin.version == "0.1.0"
    assert compile_plugin.module == "torchstack_test_compile"
    assert compile_plugin.compile_backends == ("torchstack_test",) and compile_plugin.requires_torch == ("torch>=2.4",)
    device = read_wheel(plugin_wheels["device"], catalog, "aarch64", "3.11")
    assert device.device_entry_points == ("torchstack_test_device",) and not device.compile_backends


def test_a_plugin_that_requires_another_torch_is_refused_in_one_line_before_any_build(plugin_wheels):
    result = run_cli("--dry-run", "--plugin-wheel", str(plugin_wheels["old_torch"]))
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1, result.stderr
    assert "torchstack-test-oldtorch 3.3.0 requires torch==2.0.1" in result.stderr and "2.13.0" in result.stderr


def test_plugins_that_fit_join_the_plan_the_tag_and_the_build_info(plan_for, plugin_wheels, tmp_path):
    folder = tmp_path / "wheelhouse"
    folder.mkdir()
    for name in ("compile_backend", "device"):
        shutil.copy2(plugin_wheels[name], folder)
    plan = plan_for(plugin_wheels=(str(folder),))
    assert [p.requirement for p in plan.plugins] == ["torchstack-test-compile==0.1.0", "torchstack-test-device==0.1.0"]
    assert plan.release_tag.endswith("-torchstack-test-compile-0.1.0-torchstack-test-device-0.1.0")
    recorded = build_info(plan)["plugins"]
    assert recorded[0]["summary"].startswith("torchstack's test plugin") and len(recorded[0]["sha256"]) == 64
    assert "plugin: torchstack-test-compile 0.1.0: torch.compile backend torchstack_test" in banner(plan)
    final = plan.stage("final")
    assemble_context(plan, final, tmp_path / "final", {})
    dockerfile = (tmp_path / "final" / "Dockerfile").read_text()
    assert "COPY plugins/ /tmp/plugins/" in dockerfile and "/tmp/plugins/*.whl" in dockerfile and 'pip" check' in dockerfile
    placed = tmp_path / "final" / "plugins"
    assert sorted(p.name for p in placed.glob("*.whl")) == sorted(p.name for p in folder.iterdir())
    # torch's step reads torch's pins alone (so that it is the step an image without plugins made);
    # the plugins' step reads every pin, theirs too.
    torch_pins = (tmp_path / "final" / "constraints" / "constraints.txt").read_text().split()
    assert torch_pins == list(plan.payload.torch_constraints) and "sympy==1.14.0" in torch_pins
    assert (placed / "constraints.txt").read_text().split() == list(plan.payload.python_constraints)
    assert dockerfile.index("/tmp/wheels/torch-*.whl") < dockerfile.index("COPY plugins/")


def test_a_plugin_for_another_platform_or_named_twice_is_refused(plan_for, plugin_wheels, tmp_path):
    arm = tmp_path / "torchstack_test_compile-0.1.0-cp311-cp311-manylinux_2_28_aarch64.whl"
    shutil.copy2(plugin_wheels["compile_backend"], arm)
    with pytest.raises(UsageProblem, match="not for x86_64 with Python 3.11"):
        plan_for(arch="x86_64", distribution="bookworm", plugin_wheels=(str(arm),))
    twice = (str(plugin_wheels["compile_backend"]), str(plugin_wheels["compile_backend"]))
    with pytest.raises(UsageProblem, match="named twice"):
        plan_for(plugin_wheels=twice)
    with pytest.raises(UsageProblem, match="stops before it"):
        plan_for(build_type="libs", plugin_wheels=twice[:1])
    with pytest.raises(UsageProblem, match="not a .whl file, a folder of wheels, or NAME==VERSION"):
        plan_for(plugin_wheels=("zentorch>=2",))


def test_zentorch_pairs_with_torch_by_its_version(plan_for, catalog):
    plan = plan_for(backend="zendnn", arch="x86_64")
    assert [p.requirement for p in plan.plugins] == ["zentorch==2.13.0.2"]
    assert {"deprecated==1.3.1", "wrapt==2.5.2", "safetensors==0.8.0"} <= set(plan.payload.python_constraints)
    with pytest.raises(UsageProblem, match=r"zentorch==2.12.0.1 is built for torch 2.12.0 .*zentorch==2.13.0.2 pairs"):
        plan_for(arch="x86_64", plugin_wheels=("zentorch==2.12.0.1",))
    pairs = r"\(2.14.0.1 for torch 2.14.0, 2.13.0.2 for torch 2.13.0\) pairs with torch 2.15.0"
    with pytest.raises(UsageProblem, match=f"^backend zendnn installs zentorch, and none of its pinned versions {pairs}"):
        plan_for(backend="zendnn", arch="x86_64", methods={"torch": "wheel"}, torch_version="2.15.0")
    with pytest.raises(UsageProblem, match="torch_nnpa is not on a package index"):
        plan_for(arch="x86_64", plugin_wheels=("torch_nnpa==1.0.0",))


def test_zendnn_is_for_amd_targets_and_says_what_it_wants_from_the_cpu(plan_for):
    with pytest.raises(UsageProblem, match="for the targets generic, znver4, znver5, not x86-64-v3"):
        plan_for(backend="zendnn", build_target="x86-64-v3")
    plan = plan_for(backend="zendnn", build_target="znver5", distribution="trixie")
    assert plan.cflags == "-march=znver5" and plan.backend.cpu_wants.features == ("avx512f",)
    listed = run_cli("list", "backends").stdout
    assert "zendnn       x86_64" in listed and "CPU: wants avx512f" in listed and "targets: generic, znver4, znver5" in listed
    assert "reports at run time: kleidiai (aarch64)" in listed and "reports at run time: nnpa" in listed


def test_probes_name_the_library_the_image_ships(plan_for):
    assert plan_for(backend="zdnn", arch="s390x").probe_args == ("nnpa=/opt/zdnn/lib/libzdnn.so",)
    assert plan_for(backend="onednn-acl", arch="aarch64").probe_args == ("kleidiai",)
    assert plan_for(backend="onednn", arch="x86_64").probe_args == ()


def test_a_known_plugins_wheel_for_another_torch_is_refused_by_its_version(plan_for, tmp_path):
    """A zentorch wheel file from the torch 2.12 series says nothing of torch in a way pip would
    stop: its version alone tells, and the refusal names the one that pairs."""
    wheel = tmp_path / "zentorch-2.12.0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("zentorch-2.12.0.1.dist-info/METADATA", "Metadata-Version: 2.1\nName: zentorch\nVersion: 2.12.0.1\n")
        archive.writestr("zentorch/__init__.py", "")
    with pytest.raises(UsageProblem, match=r"zentorch 2.12.0.1 is built for torch 2.12.0 .*zentorch==2.13.0.2 pairs"):
        plan_for(arch="x86_64", plugin_wheels=(str(wheel),))


def _wheel_built_against(tmp_path, torch_libraries: list[str]):
    """A wheel like torchvision's: requires torch 2.13.0, with a compiled module (made by gcc) that
    needs `torch_libraries` (stand-ins made by gcc too), as a wheel built against that torch would."""
    work = tmp_path / "build"
    work.mkdir()
    (work / "stub.c").write_text("int stub(void) { return 0; }\n")
    for library in torch_libraries:
        subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(work / f"lib{library}.so"), str(work / "stub.c")], check=True)
    links = [f"-l{library}" for library in torch_libraries]
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-o", str(work / "_C.so"), str(work / "stub.c"), f"-L{work}", "-Wl,--no-as-needed", *links], check=True
    )
    wheel = tmp_path / "fakevision-0.1.0-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as out:
        out.writestr(
            "fakevision-0.1.0.dist-info/METADATA",
            "Metadata-Version: 2.1\nName: fakevision\nVersion: 0.1.0\nRequires-Dist: torch (==2.13.0)\n",
        )
        out.write(work / "_C.so", "fakevision/_C.so")
    return wheel


def test_a_wheel_built_against_a_cuda_torch_is_refused_in_one_line_before_any_build(tmp_path):
    """Its Requires-Dist (torch==2.13.0) admits the image's 2.13.0+cpu; what gives it away is what its
    compiled module needs, as PyPI's torchvision 0.28.0 needs libtorch_cuda.so."""
    wheel = _wheel_built_against(tmp_path, ["torch_cpu", "torch_cuda", "c10_cuda"])
    result = run_cli("--dry-run", "--distribution", "bookworm", "--plugin-wheel", str(wheel))
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1, result.stderr
    assert "fakevision 0.1.0 is built against a CUDA torch (its compiled modules need libc10_cuda.so, libtorch_cuda.so)" in result.stderr
    assert (
        "this image's torch 2.13.0" in result.stderr
        and "is a CPU build" in result.stderr
        and "download.pytorch.org/whl/cpu" in result.stderr
    )


def test_a_wheel_built_against_a_cpu_torch_fits(catalog, plan_for, tmp_path):
    wheel = _wheel_built_against(tmp_path, ["torch_cpu", "c10"])
    assert {"libtorch_cpu.so", "libc10.so"} <= set(read_wheel(wheel, catalog, "x86_64", "3.11").needs)
    assert [p.requirement for p in plan_for(distribution="bookworm", plugin_wheels=(str(wheel),)).plugins] == ["fakevision==0.1.0"]


def test_with_torchvision_takes_the_version_paired_with_the_images_torch(plan_for):
    plan = plan_for(methods={"torch": "wheel"}, torch_version="2.13.0", libraries=("torchvision",))
    assert [(p.requirement, p.why) for p in plan.plugins] == [("torchvision==0.28.0", "--with")]
    assert plan.release_tag.endswith("-torch.wheel-torchvision-0.28.0") and "pillow==13.0.0" in plan.payload.python_constraints
    old = plan_for(arch="aarch64", methods={"torch": "wheel"}, torch_version="2.8.0", libraries=("torchvision",))
    assert [p.requirement for p in old.plugins] == ["torchvision==0.23.0"]
    for release in ("2.14.0", "2.15.0"):  # 0.29.2: built on torch's stable ABI, for torch>=2.14.0
        new = plan_for(methods={"torch": "wheel"}, torch_version=release, libraries=("torchvision",))
        assert [p.requirement for p in new.plugins] == ["torchvision==0.29.2"] and new.torch_version == release
    with pytest.raises(UsageProblem, match="not one compiled here, .* use --torch-from wheel"):
        plan_for(libraries=("torchvision",))
    with pytest.raises(UsageProblem, match="--with installs into the final image; --build-type dev stops before it"):
        plan_for(methods={"torch": "wheel"}, build_type="dev", libraries=("torchvision",))


def test_an_unknown_library_is_one_line_naming_the_known_ones():
    result = run_cli("--dry-run", "--torch-from", "wheel", "--with", "torchvision,torchaudio")
    assert result.returncode == 2 and result.stderr == "torchstack: error: unknown --with 'torchaudio'; valid: torchvision\n"


def test_a_torchvision_wheel_for_another_torch_is_refused_by_the_pairing_table(plan_for, tmp_path):
    """Without the Requires-Dist that would stop pip, the published pairing still tells."""
    wheel = tmp_path / "torchvision-0.23.0-cp311-cp311-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("torchvision-0.23.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: torchvision\nVersion: 0.23.0\n")
        archive.writestr("torchvision/__init__.py", "")
    with pytest.raises(
        UsageProblem,
        match=r"torchvision 0.23.0 is built for torch 2.8 \(torchvision's compatibility table.*"
        r"torchvision==0.28.0 pairs with it",
    ):
        plan_for(methods={"torch": "wheel"}, torch_version="2.13.0", distribution="bookworm", plugin_wheels=(str(wheel),))


def test_a_plugin_named_by_version_is_fetched_before_the_plan_that_builds_it(catalog, plugin_wheels, monkeypatch, tmp_path):
    """--plugin-wheel NAME==VERSION: the settling step downloads it into the plugin folder the request
    always names, then makes the plan that finds it there (the plan made before the download had none)."""
    from click.testing import CliRunner

    from torchstack.cli import make_cli

    def download(dest, arch, python, requirement, index_url=None, extra=None):
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copy2(plugin_wheels["compile_backend"], dest)

    monkeypatch.setenv("TORCHSTACK_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr("torchstack.run.settle.download_wheel", download)
    result = CliRunner().invoke(make_cli(catalog), ["--dry-run", "--plugin-wheel", "torchstack-test-compile==0.1.0"])
    assert result.exit_code == 0, result.output
    assert "torchstack-test-compile-0.1.0" in result.output, result.output
