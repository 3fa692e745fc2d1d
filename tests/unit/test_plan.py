"""The plan: which stages build, and the exact environment each component's script receives."""

import json

import pytest

from torchstack.base.errors import UsageProblem
from torchstack.request.metadata import build_info, stage_labels

PIN = {"openblas": "0.3.33", "acl": "52.6.0", "zdnn": "1.0.1", "numpy": "2.3.5", "torch": "2.13.0"}


def env_of(plan, name):
    return plan.component(name).env


def test_openblas_on_neoverse_v1(plan_for):
    plan = plan_for(backend="onednn-acl", build_target="neoverse-v1", jobs=8)
    assert env_of(plan, "openblas") == {
        "SOURCE": "/opt/torchstack/sources/OpenBLAS-0.3.33.tar.gz",
        "VERSION": "0.3.33",
        "PATCHES": "/opt/torchstack/patches/openblas",
        "TREE": "/tmp/torchstack-src/openblas",
        "PREFIX": "/opt/openblas",
        "OPENBLAS_MAKE_FLAGS": "TARGET=NEOVERSEV1 USE_OPENMP=1 NUM_THREADS=256 NO_STATIC=1 COMMON_OPT=-O2 BUILD_BFLOAT16=1 CROSS=1",
        "JOBS": "8",
    }


def test_acl_on_neoverse_v1(plan_for):
    plan = plan_for(backend="onednn-acl", build_target="neoverse-v1", jobs=8)
    assert env_of(plan, "acl") == {
        "SOURCE": "/opt/torchstack/sources/ComputeLibrary-52.6.0.tar.gz",
        "VERSION": "52.6.0",
        "PATCHES": "/opt/torchstack/patches/acl",
        "TREE": "/tmp/torchstack-src/acl",
        "PREFIX": "/opt/acl",
        "ACL_SCONS_FLAGS": "Werror=0 debug=0 neon=1 opencl=0 embed_kernels=0 os=linux arch=armv8.2-a build=native "
        "multi_isa=1 fixed_format_kernels=1 openmp=1 cppthreads=0 -j8",
    }


def test_torch_on_neoverse_v1_with_acl(plan_for):
    plan = plan_for(backend="onednn-acl", build_target="neoverse-v1", jobs=8)
    assert env_of(plan, "torch") == {
        "SOURCE": "/opt/torchstack/sources/pytorch-v2.13.0.tar.gz",
        "VERSION": "2.13.0",
        "PATCHES": "/opt/torchstack/patches/torch",
        "TREE": "/tmp/torchstack-src/torch",
        "CMAKE_BUILD_TYPE": "Release",
        "USE_CUDA": "0",
        "USE_ROCM": "0",
        "USE_XPU": "0",
        "BUILD_TEST": "0",
        "USE_DISTRIBUTED": "0",
        "USE_ITT": "0",
        "USE_NUMA": "0",
        "USE_OPENMP": "1",
        "USE_LAPACK": "1",
        "CMAKE_POLICY_VERSION_MINIMUM": "3.5",
        "CMAKE_SHARED_LINKER_FLAGS": "-Wl,-z,max-page-size=0x10000",
        "BLAS": "OpenBLAS",
        "USE_MKLDNN": "1",
        "USE_MKLDNN_ACL": "1",
        "USE_FBGEMM": "0",
        "OpenBLAS_HOME": "/opt/openblas",
        "PKG_CONFIG_PATH": "/opt/openblas/lib/pkgconfig",
        "ACL_ROOT_DIR": "/opt/acl",
        "MAX_JOBS": "8",
        "PYTORCH_BUILD_VERSION": "2.13.0",
        "PYTORCH_BUILD_NUMBER": "1",
        "CFLAGS": "-mcpu=neoverse-v1",
        "CXXFLAGS": "-mcpu=neoverse-v1",
        "BUILD_REQUIREMENTS": "setuptools==80.9.0 wheel==0.45.1 packaging==25.0 pyyaml==6.0.3 requests==2.32.5 "
        "six==1.17.0 typing-extensions==4.15.0 ninja==1.13.0 cmake==4.1.2",
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": "/opt/torchstack/downloads",
        "VENV": "/opt/venv",
        "WHEELS": "/opt/torchstack/wheels",
        "KEEP_SOURCE": "/opt/torchstack/src/pytorch",
        "USE_CCACHE": "0",
    }


def test_zdnn_on_z16(plan_for):
    plan = plan_for(backend="zdnn", build_target="z16", jobs=4)
    assert env_of(plan, "zdnn") == {
        "SOURCE": "/opt/torchstack/sources/zDNN-1.0.1.tar.gz",
        "VERSION": "1.0.1",
        "PATCHES": "/opt/torchstack/patches/zdnn",
        "TREE": "/tmp/torchstack-src/zdnn",
        "PREFIX": "/opt/zdnn",
        "ZDNN_CFLAGS": "-O3 -march=arch14 -mzvector",
        "JOBS": "4",
    }
    assert env_of(plan, "openblas")["OPENBLAS_MAKE_FLAGS"] == "TARGET=Z14 USE_OPENMP=1 NUM_THREADS=256 NO_STATIC=1 COMMON_OPT=-O2 CROSS=1"
    torch = env_of(plan, "torch")
    assert (torch["USE_MKLDNN"], torch["USE_XNNPACK"], torch["CFLAGS"]) == ("0", "0", "-march=arch14")


def test_numpy_against_our_openblas_on_x86_64_v3(plan_for):
    plan = plan_for(backend="onednn", build_target="x86-64-v3", jobs=2)
    assert env_of(plan, "numpy") == {
        "SOURCE": "/opt/torchstack/sources/numpy-2.3.5.tar.gz",
        "VERSION": "2.3.5",
        "PATCHES": "/opt/torchstack/patches/numpy",
        "TREE": "/tmp/torchstack-src/numpy",
        "CFLAGS": "-march=x86-64-v3",
        "CXXFLAGS": "-march=x86-64-v3",
        "PKG_CONFIG_PATH": "/opt/openblas/lib/pkgconfig",
        "OpenBLAS_HOME": "/opt/openblas",
        "NUMPY_SETUP_ARGS": "-Dblas=openblas -Dlapack=openblas -Dallow-noblas=false -Dtest-simd=[]",
        # Bookworm's pip 23.0.1 would hand meson only the last -D: a newer pip is installed first.
        "PIP_INSTALLER": "pip==26.3",
        "BUILD_REQUIREMENTS": "meson-python==0.18.0 meson==1.9.1 ninja==1.13.0 cython==3.1.8 pyproject-metadata==0.9.1 packaging==25.0",
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": "/opt/torchstack/downloads",
        "VENV": "/opt/venv",
        "JOBS": "2",
    }
    assert env_of(plan, "torch")["USE_FBGEMM"] == "1"


def test_generic_openblas_dispatches_at_run_time(plan_for):
    plan = plan_for(backend="openblas", arch="aarch64")
    assert env_of(plan, "openblas")["OPENBLAS_MAKE_FLAGS"] == (
        "TARGET=ARMV8 DYNAMIC_ARCH=1 USE_OPENMP=1 NUM_THREADS=256 NO_STATIC=1 COMMON_OPT=-O2 BUILD_BFLOAT16=1 CROSS=1"
    )


def test_every_backend_and_target_passes_the_targets_flags(catalog, plan_for):
    """For every valid combination: each script gets the target's tuning and nothing conflicting."""
    for backend in catalog.backends.values():
        for arch in backend.arches:
            for target in catalog.targets_for(arch):
                if backend.targets and target.name not in backend.targets:
                    continue
                try:
                    plan = plan_for(backend=backend.name, arch=arch, build_target=target.name, distribution="trixie")
                except UsageProblem as exc:
                    assert "GCC" in str(exc), exc
                    continue
                openblas = env_of(plan, "openblas")["OPENBLAS_MAKE_FLAGS"].split()
                assert f"TARGET={target.openblas.target}" in openblas
                assert ("DYNAMIC_ARCH=1" in openblas) == target.openblas.dynamic_arch
                assert ("BUILD_BFLOAT16=1" in openblas) == target.openblas.bf16
                for name in ("numpy", "torch"):
                    env = env_of(plan, name)
                    assert env["CFLAGS"] == env["CXXFLAGS"] == target.flag
                    assert not ("-mcpu=" in env["CFLAGS"] and "-march=" in env["CFLAGS"])
                torch = env_of(plan, "torch")
                for key, value in backend.torch_env.items():
                    assert torch[key] == value
                if "acl" in backend.components:
                    assert f"arch={target.acl.arch}" in env_of(plan, "acl")["ACL_SCONS_FLAGS"].split()
                    assert torch["ACL_ROOT_DIR"] == "/opt/acl"
                if "zdnn" in backend.components:
                    assert env_of(plan, "zdnn")["ZDNN_CFLAGS"] == f"-O3 -march={target.zdnn.march} -mzvector"


def test_build_type_builds_what_it_needs(plan_for):
    assert [s.name for s in plan_for(build_type="libs").stages] == ["base", "libs"]
    assert [s.name for s in plan_for(build_type="full").stages] == ["base", "libs", "tools", "dev", "final"]
    assert [s.name for s in plan_for(build_type="pytorch").stages] == ["base", "libs", "tools", "dev", "final"]


def test_final_builds_from_base_and_copies_from_the_others(plan_for):
    final = plan_for().stage("final")
    plan = plan_for()
    assert final.parent_image == plan.stage("base").image
    assert final.copies == {name: plan.stage(name).image for name in ("libs", "tools", "dev")}


def test_acl_is_not_built_when_torch_comes_from_a_wheel(plan_for, tmp_path):
    plan = plan_for(backend="onednn-acl", methods={"torch": "wheel"}, torch_wheel="index", torch_version="2.8.0")
    assert [c.name for c in plan.components] == ["openblas", "numpy", "torch"]
    assert plan.release_tag == "r26.11-torch-2.8.0-onednn-acl-torch.wheel"


def test_a_distro_openblas_is_named_in_the_tag_and_not_compiled(plan_for):
    plan = plan_for(methods={"openblas": "distro"})
    openblas = plan.component("openblas")
    assert (openblas.source, openblas.prefix, openblas.build_packages) == (None, "/usr", ("libopenblas-openmp-dev",))
    assert openblas.runtime_packages == ("libopenblas0-openmp",) and openblas.ships == ()
    assert plan.release_tag == "r26.11-torch-2.13.0-onednn-openblas.distro"
    assert env_of(plan, "numpy")["PKG_CONFIG_PATH"] == "/usr/lib/pkgconfig"


def test_another_pinned_version_is_built_and_named_in_the_tag(plan_for):
    plan = plan_for(versions={"openblas": "0.3.28"})
    assert plan.component("openblas").source.sha256.startswith("f1003466")
    assert plan.release_tag == "r26.11-torch-2.13.0-onednn-openblas-0.3.28"
    assert plan_for(versions={"openblas": "0.3.33"}).release_tag == "r26.11-torch-2.13.0-onednn"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"backend": "zdnn", "build_target": "neoverse-v1"}, "backend zdnn builds for s390x, not aarch64"),
        ({"backend": "onednn-acl", "build_target": "z16"}, "backend onednn-acl builds for aarch64, not s390x"),
        ({"backend": "onednn-acl", "arch": "x86_64"}, "backends for x86_64: onednn, openblas"),
        ({"backend": "nope"}, "unknown --backend 'nope'; valid: onednn, onednn-acl, openblas, zdnn"),
        ({"build_target": "zen9"}, "unknown --build-target 'zen9'; valid:"),
        ({"arch": "x86_64", "build_target": "neoverse-v1"}, "--build-target neoverse-v1 is for aarch64, not x86_64"),
        (
            {"backend": "zdnn", "build_target": "z17"},
            "needs GCC 15.1 or newer, which no Debian release the toolkit builds on has yet (GCC: bookworm 12.2, trixie 14.2)",
        ),
        (
            {"backend": "onednn-acl", "build_target": "neoverse-v2", "distribution": "bookworm"},
            "needs GCC 12.3 or newer; bookworm has GCC 12.2: build it with --distribution trixie (GCC 14.2), or choose another target",
        ),
        ({"backend": "onednn-acl", "build_target": "graviton5", "distribution": "bookworm"}, "target neoverse-v3 (-mcpu=neoverse-v3)"),
        ({"build_target": "graniterapids", "distribution": "bookworm"}, "build it with --distribution trixie (GCC 14.2)"),
        ({"versions": {"openblas": "0.1"}}, "openblas 0.1 has no pinned, checksummed source"),
        ({"torch_version": "2.99.0"}, "torch 2.99.0 is not a release the catalog knows (newest: 2.15.0; known: 2.15.0, "),
        ({"torch_version": "2.15.0"}, "torch 2.15.0 has no pinned, checksummed source"),
        ({"methods": {"torch": "wheel"}, "backend": "openblas"}, "backend openblas needs torch built from source"),
        ({"torch_wheel": "/nonexistent.whl"}, "--torch-wheel needs --torch-from wheel"),
        ({"release": "2026-11"}, "expected rYY.MM"),
        ({"build_target": "custom"}, "needs --custom-target FILE"),
    ],
)
def test_impossible_requests_say_what_is_wrong_and_what_is_valid(plan_for, fields, message):
    with pytest.raises(UsageProblem, match=message.replace("(", r"\(").replace(")", r"\)")):
        plan_for(**fields)


def test_neoverse_v2_builds_on_a_distribution_with_a_new_enough_gcc(plan_for):
    plan = plan_for(backend="onednn-acl", build_target="neoverse-v2", distribution="trixie")
    assert plan.release_tag == "r26.11-torch-2.13.0-onednn-acl-neoverse-v2"  # trixie is the default: not in the tag
    assert plan.base_image == "torchstack-os:trixie-arm64"


def test_custom_target_from_a_users_file(plan_for, tmp_path):
    custom = tmp_path / "graviton3e.yaml"
    custom.write_text(
        "name: graviton3e\narch: aarch64\nflag: -mcpu=neoverse-v1\ngcc: '10.3'\n"
        "openblas: {target: NEOVERSEV1}\nacl: {arch: armv8.2-a, multi_isa: true}\n"
    )
    plan = plan_for(build_target="custom", custom_target=custom, arch="aarch64")
    assert plan.target.name == "graviton3e"
    assert plan.release_tag.endswith("-onednn-acl-graviton3e")


def test_a_broken_custom_target_names_the_file_and_field(plan_for, tmp_path):
    custom = tmp_path / "bad.yaml"
    custom.write_text("name: bad\narch: aarch64\nflag: -O3\ngcc: '9'\nopenblas: {target: ARMV8}\n")
    with pytest.raises(UsageProblem, match=r"bad.yaml: flag: Value error, must be exactly one"):
        plan_for(build_target="custom", custom_target=custom, arch="aarch64")


def test_a_stage_image_is_labelled_only_with_what_it_depends_on(plan_for):
    """Labels are part of an image, and the next stage is built FROM it: another release (or
    another torch) must not change the libs image, or it would recompile OpenBLAS and ACL."""
    this = plan_for(backend="onednn-acl", build_target="neoverse-v1")
    later = plan_for(backend="onednn-acl", build_target="neoverse-v1", release="r27.01")
    for name in ("base", "libs", "tools"):
        assert stage_labels(this, this.stage(name)) == stage_labels(later, later.stage(name)), name
    assert stage_labels(this, this.stage("final")) != stage_labels(later, later.stage("final"))

    libs = json.loads(stage_labels(this, this.stage("libs"))["io.torchstack.build-info"])
    assert set(libs["components"]) == {"openblas", "acl"} and "torch_version" not in libs
    assert stage_labels(this, this.stage("libs"))["io.torchstack.stage"] == "libs"
    final = stage_labels(this, this.stage("final"))
    assert final["org.opencontainers.image.version"] == this.release_tag
    assert json.loads(final["io.torchstack.build-info"]) == build_info(this)
    dev = json.loads(stage_labels(this, this.stage("dev"))["io.torchstack.build-info"])
    assert dev["torch_version"] == "2.13.0" and "release_tag" not in dev


def test_the_full_runtime_ships_what_torch_compile_needs_and_slim_does_not(plan_for):
    full = plan_for(backend="onednn", release="r26.11")
    slim = plan_for(backend="onednn", release="r26.11", runtime="slim")
    assert {"g++", "libpython3.13-dev", "openssl"} <= set(full.payload.packages)
    assert not {"g++", "libpython3.13-dev", "openssl"} & set(slim.payload.packages)
    assert "libtcmalloc-minimal4" in slim.payload.packages  # the allocator is installed (opt-in) either way
    # Inductor trusts the CPU's report for its vector ISA where it can compile; a slim image sets nothing for it.
    assert full.payload.env == {"TORCHINDUCTOR_VEC_ISA_OK": "1"} and slim.payload.env == {}
    assert full.release_tag == "r26.11-torch-2.13.0-onednn" and slim.release_tag == "r26.11-torch-2.13.0-onednn-slim"
    assert plan_for(backend="openblas", arch="s390x", distribution="trixie").payload.packages.count("libpython3.13-dev") == 1
    labels = stage_labels(slim, slim.stage("final"))
    assert labels["io.torchstack.runtime"] == "slim" and json.loads(labels["io.torchstack.build-info"])["runtime"] == "slim"
    assert "io.torchstack.runtime" not in stage_labels(slim, slim.stage("libs"))


def test_runtime_defaults_are_data_and_documented_ones_stay_unset(plan_for):
    arm = plan_for(backend="onednn-acl")
    # tcmalloc was never measured on aarch64 (no native host here): installed, documented, off.
    assert arm.payload.env == {"TORCHINDUCTOR_VEC_ISA_OK": "1"}  # the distribution's, for torch.compile
    tcmalloc = build_info(arm)["runtime_env"]["LD_PRELOAD"]
    assert tcmalloc["default"] is False and tcmalloc["value"] == "/usr/lib/aarch64-linux-gnu/libtcmalloc_minimal.so.4"
    documented = build_info(arm)["runtime_env"]["ONEDNN_DEFAULT_FPMATH_MODE"]
    assert documented["default"] is False and documented["value"] == "BF16" and documented["why"]
    # Nothing measured or documented to help on IBM Z yet, beyond torch.compile's (the distribution's).
    assert plan_for(backend="zdnn").payload.env == {"TORCHINDUCTOR_VEC_ISA_OK": "1"}


def test_openblas_bf16_gemm_only_where_it_is_fast(plan_for):
    """torch calls OpenBLAS's sbgemm_ for bf16 matmuls before oneDNN: build it for COOPERLAKE
    (znver4), which has bf16 kernels, and on aarch64 as PyTorch does; not for SKYLAKEX or HASWELL,
    where OpenBLAS falls back to a generic C kernel."""
    flags = {
        t: env_of(plan_for(build_target=t, distribution="trixie"), "openblas")["OPENBLAS_MAKE_FLAGS"].split()
        for t in ("znver4", "x86-64-v4", "x86-64-v3", "neoverse-n2")
    }
    assert {t: "BUILD_BFLOAT16=1" in f for t, f in flags.items()} == {
        "znver4": True,
        "x86-64-v4": False,
        "x86-64-v3": False,
        "neoverse-n2": True,
    }


@pytest.mark.parametrize(
    ("fields", "jobs", "torch_jobs", "note"),
    [
        ({"jobs": 16, "memory_gib": 24.0}, 16, 8, "--jobs 16 is more than 24.0 GiB of memory allows: 8 for PyTorch (3 GiB a job)"),
        (
            {"jobs": 32, "memory_gib": 16.0},
            16,
            5,
            "--jobs 32 is more than 16.0 GiB of memory allows: 5 for PyTorch (3 GiB a job), 16 for the others (1 GiB a job)",
        ),
        ({"jobs": 4, "memory_gib": 24.0}, 4, 4, ""),
        # A prebuilt torch: its bound does not apply, and is not mentioned.
        ({"jobs": 16, "memory_gib": 24.0, "methods": {"torch": "wheel"}}, 16, 8, ""),
    ],
)
def test_jobs_never_exceed_what_memory_allows_and_the_plan_says_so(plan_for, fields, jobs, torch_jobs, note):
    plan = plan_for(backend="onednn", build_target="x86-64-v3", **fields)
    assert (plan.jobs, plan.torch_jobs, plan.jobs_note) == (jobs, torch_jobs, note)
    if "methods" not in fields:
        assert env_of(plan, "torch")["MAX_JOBS"] == str(torch_jobs)


def test_acl_is_the_version_torch_is_built_with_upstream_and_no_other(plan_for, catalog):
    plan = plan_for(backend="onednn-acl", build_target="neoverse-v1")
    acl = plan.component("acl")
    assert acl.version == "52.6.0" and acl.source.url.endswith("/007264fa740de5723ebddef16b7bb3657692c088.tar.gz")
    assert "Homebrew" in acl.source.sha256_from
    with pytest.raises(UsageProblem, match=r"^acl 25.02 does not pair with torch 2.13.0: upstream builds it with acl 52.6.0 \("):
        plan_for(backend="onednn-acl", build_target="neoverse-v1", versions={"acl": "25.02"})
    component = catalog.components["acl"]
    assert component.paired_with("2.8.0+cpu").version == "25.02" and component.paired_with("2.15.0").version == "53.2.0"
    assert component.paired_with("2.16.0") is None
    # A prebuilt torch wheel brings its own ACL: nothing is compiled, nothing to pair.
    assert plan_for(backend="onednn-acl", methods={"torch": "wheel"}, torch_wheel="index").component("acl") is None


def test_a_build_takes_the_security_and_updates_suites_unless_asked_by_name(plan_for):
    plan = plan_for(backend="onednn", release="r26.11")
    assert plan.apt.sources_list() == (
        "deb http://deb.debian.org/debian trixie main\n"
        "deb http://deb.debian.org/debian trixie-updates main\n"
        "deb http://deb.debian.org/debian-security trixie-security main\n"
    )
    site = plan_for(backend="onednn", debian_mirror="http://mirror.example/debian/", security_mirror="http://mirror.example/security")
    assert [s.url for s in site.apt.suites] == ["http://mirror.example/debian"] * 2 + ["http://mirror.example/security"]
    bare = plan_for(backend="onednn", release="r26.11", security_updates=False)
    assert [s.name for s in bare.apt.suites] == ["trixie"] and not bare.apt.updates
    # Another image: its tag, its OS image (Debian as released), so no stage of it is taken for one with the fixes.
    assert bare.release_tag == "r26.11-torch-2.13.0-onednn-no-security-updates"
    assert bare.base_image == "torchstack-os:trixie-amd64-as-released" != plan.base_image
    with pytest.raises(UsageProblem, match="--security-mirror names the -security suite that --no-security-updates leaves out"):
        plan_for(backend="onednn", security_updates=False, security_mirror="http://mirror.example/security")


def test_a_snapshot_of_the_archive_is_asked_for_by_its_time_and_the_images_name_the_live_suites(plan_for):
    plan = plan_for(backend="onednn", release="r26.11", debian_snapshot="2026-11-01")
    assert plan.apt.sources_list() == (
        "deb [check-valid-until=no] http://snapshot.debian.org/archive/debian/20261101T000000Z trixie main\n"
        "deb [check-valid-until=no] http://snapshot.debian.org/archive/debian/20261101T000000Z trixie-updates main\n"
        "deb [check-valid-until=no] http://snapshot.debian.org/archive/debian-security/20261101T000000Z trixie-security main\n"
    )
    assert plan.apt.kept == plan_for(backend="onednn", release="r26.11").apt.suites
    assert plan.apt.kept_sources_list().splitlines()[0] == "# Built from Debian's archive as it was at 20261101T000000Z:"
    assert build_info(plan)["debian_snapshot"]["image_apt_sources"] == [s.line for s in plan.apt.kept]
    # Another image than the live archive's: its own tag and OS image; the same time, however written, the same.
    assert plan.release_tag == "r26.11-torch-2.13.0-onednn-debian-20261101T000000Z"
    assert plan.base_image == "torchstack-os:trixie-amd64-20261101T000000Z"
    same = plan_for(backend="onednn", release="r26.11", debian_snapshot="20261101T000000Z")
    assert same.release_tag == plan.release_tag and same.apt == plan.apt
    site = plan_for(backend="onednn", debian_snapshot="2026-11-01T06:30:00Z", snapshot_archive="http://snap.example/")
    assert site.apt.suites[2].url == "http://snap.example/archive/debian-security/20261101T063000Z"
    for asked, said in (
        ({"debian_snapshot": "yesterday"}, "--debian-snapshot yesterday: not a time in UTC"),
        ({"debian_snapshot": "2026-12-01"}, "--debian-snapshot 2026-12-01: still to come"),
        ({"snapshot_archive": "http://snap.example"}, "--snapshot-archive says who serves --debian-snapshot"),
        ({"debian_snapshot": "2026-11-01", "base_image": "debian:trixie"}, "cannot apply to a --base-image"),
    ):
        with pytest.raises(UsageProblem, match=said):
            plan_for(backend="onednn", **asked)
