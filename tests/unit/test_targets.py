"""The target table and `native` resolution from real /proc/cpuinfo samples."""

from pathlib import Path

import pytest

from torchstack.base.errors import UsageProblem
from torchstack.request.host import cpu_features, default_jobs, resolve_native

SAMPLES = Path(__file__).parent / "cpuinfo"


@pytest.mark.parametrize(
    ("sample", "arch", "expected"),
    [
        ("neoverse-n1.txt", "aarch64", "neoverse-n1"),
        ("neoverse-v2.txt", "aarch64", "neoverse-v2"),
        ("x86-avx2.txt", "x86_64", "x86-64-v3"),
        ("x86-avx512-amd.txt", "x86_64", "znver4"),
        ("z16.txt", "s390x", "z16"),
    ],
)
def test_native_resolves_from_cpuinfo(catalog, sample, arch, expected):
    assert resolve_native(catalog, arch, (SAMPLES / sample).read_text()).name == expected


@pytest.mark.parametrize(
    ("sample", "arch", "runs", "refuses"),
    [
        ("neoverse-n1.txt", "aarch64", ["generic", "neoverse-n1"], ["neoverse-v1", "neoverse-n2", "neoverse-v2", "ampere1"]),
        ("neoverse-v2.txt", "aarch64", ["generic", "neoverse-n1", "neoverse-v1", "neoverse-n2", "neoverse-v2"], []),
        ("x86-avx2.txt", "x86_64", ["generic", "x86-64-v2", "x86-64-v3"], ["x86-64-v4", "znver4"]),
        ("z16.txt", "s390x", ["generic", "z14", "z15", "z16"], []),
    ],
)
def test_the_cpu_guard_features_of_each_target_against_real_cpus(catalog, sample, arch, runs, refuses):
    """What the final image's CPU guard requires: a real CPU runs the images of the targets it
    can execute, and would refuse (not crash on) the newer ones."""
    have = cpu_features((SAMPLES / sample).read_text())
    for name in runs + refuses:
        target = catalog.find_target(name, arch)
        assert target.cpu_features, f"{name} lists no cpu_features"
        lacking = set(target.cpu_features) - have
        assert bool(lacking) == (name in refuses), f"{sample} on {name}: lacks {sorted(lacking)}"


def test_an_unknown_cpu_is_an_error_not_a_guess(catalog):
    cpuinfo = (SAMPLES / "neoverse-n1.txt").read_text().replace("0xd0c", "0xfff")
    with pytest.raises(UsageProblem, match="matches none of"):
        resolve_native(catalog, "aarch64", cpuinfo)


def test_native_prints_its_resolution_in_the_plan(plan_for, monkeypatch):
    monkeypatch.setattr("torchstack.request.host.host_arch", lambda: "aarch64")
    plan = plan_for(build_target="native", cpuinfo=(SAMPLES / "neoverse-n1.txt").read_text())
    assert plan.target.name == "neoverse-n1"
    assert "native resolved to neoverse-n1" in plan.target_note
    assert plan.release_tag.endswith("-neoverse-n1")


def test_every_target_passes_exactly_one_tuning_flag(catalog):
    for target in catalog.targets:
        assert len(target.flag.split()) == 1 and target.flag.startswith(("-mcpu=", "-march=")), target


@pytest.mark.parametrize(
    ("name", "arch", "flag", "openblas", "acl"),
    [
        ("neoverse-n1", "aarch64", "-mcpu=neoverse-n1", "NEOVERSEN1", ("armv8.2-a", True)),
        ("neoverse", "aarch64", "-mcpu=neoverse-n1", "NEOVERSEN1", ("armv8.2-a", True)),
        ("neoverse-v1", "aarch64", "-mcpu=neoverse-v1", "NEOVERSEV1", ("armv8.2-a", True)),
        ("neoverse-n2", "aarch64", "-mcpu=neoverse-n2", "NEOVERSEN2", ("armv8.2-a", True)),
        ("neoverse-v2", "aarch64", "-mcpu=neoverse-v2", "NEOVERSEV2", ("armv8.2-a", True)),
        ("neoverse-v3", "aarch64", "-mcpu=neoverse-v3", "NEOVERSEV2", ("armv8.2-a", True)),
        ("neoverse-n3", "aarch64", "-mcpu=neoverse-n3", "NEOVERSEN2", ("armv8.2-a", True)),
        ("ampere1a", "aarch64", "-mcpu=ampere1a", "NEOVERSEN1", ("armv8.2-a", True)),
        ("ampere1b", "aarch64", "-mcpu=ampere1b", "NEOVERSEN1", ("armv8.2-a", True)),
        ("thunderx2t99", "aarch64", "-mcpu=thunderx2t99", "THUNDERX2T99", ("armv8a", True)),
        ("sapphirerapids", "x86_64", "-march=sapphirerapids", "SAPPHIRERAPIDS", None),
        ("graniterapids", "x86_64", "-march=graniterapids", "SAPPHIRERAPIDS", None),
        ("generic", "aarch64", "-march=armv8-a", "ARMV8", ("armv8a", True)),
        ("generic", "x86_64", "-march=x86-64", "PRESCOTT", None),
        ("x86-64-v3", "x86_64", "-march=x86-64-v3", "HASWELL", None),
        ("z16", "s390x", "-march=arch14", "Z14", None),
    ],
)
def test_target_table(catalog, name, arch, flag, openblas, acl):
    target = catalog.find_target(name, arch)
    assert target.flag == flag
    assert target.openblas.target == openblas
    assert (target.acl.arch, target.acl.multi_isa) == acl if acl else target.acl is None


def test_generic_openblas_is_runtime_dispatching_everywhere(catalog):
    for arch in catalog.architectures:
        assert catalog.find_target("generic", arch).openblas.dynamic_arch


@pytest.mark.parametrize(("cores", "mem", "per_job", "expected"), [(64, 24, 3.0, 8), (2, 24, 3.0, 2), (16, 4, 3.0, 1), (8, 64, 1.0, 8)])
def test_jobs_are_bounded_by_cores_and_memory(cores, mem, per_job, expected):
    assert default_jobs(per_job, cores, mem) == expected


# Product names and the cores they are built on (docs/using/targets-and-backends.md lists the same).
PRODUCTS = {
    "graviton2": "neoverse-n1",
    "graviton3": "neoverse-v1",
    "graviton4": "neoverse-v2",
    "graviton5": "neoverse-v3",
    "grace": "neoverse-v2",
    "axion": "neoverse-v2",
    "cobalt100": "neoverse-n2",
    "ampereone": "ampere1",
    "genoa": "znver4",
    "turin": "znver5",
    "emeraldrapids": "sapphirerapids",
}


@pytest.mark.parametrize(("name", "core"), sorted(PRODUCTS.items()))
def test_a_product_name_plans_its_core_and_says_so(plan_for, catalog, name, core):
    target = catalog.find_target(name, *catalog.arches_of_target(name))
    plan = plan_for(arch=target.arch, build_target=name, methods={"torch": "wheel"}, torch_wheel="index")
    assert plan.target.name == core and plan.target.flag == target.flag
    assert f"{name} is an alias of {core}" in plan.target_note
    assert plan.release_tag.endswith(f"-{core}") or f"-{core}-" in plan.release_tag


def test_the_bf16_kernels_are_built_for_each_new_core(catalog):
    """OpenBLAS's bf16 GEMM (sbgemm_), which torch takes for bf16 matmuls: on each aarch64 core as
    PyTorch's builds do, on Intel's AMX cores from the SAPPHIRERAPIDS kernels."""
    cores = {"neoverse-v3": "aarch64", "neoverse-n3": "aarch64", "ampere1a": "aarch64", "ampere1b": "aarch64"}
    for name, arch in {**cores, "sapphirerapids": "x86_64", "graniterapids": "x86_64"}.items():
        assert catalog.find_target(name, arch).openblas.bf16, name


def _changed(sample: str, *swaps: tuple[str, str]) -> str:
    text = (SAMPLES / sample).read_text()
    for old, new in swaps:
        assert old in text, (sample, old)
        text = text.replace(old, new)
    return text


# Real samples with the fields that tell the cores apart changed to the newer cores' (their MIDR part
# numbers, Arm's and Ampere's; Intel's vendor and AMX flags): no sample of those machines is here.
INTEL = ("AuthenticAMD", "GenuineIntel")
AMX = ("avx512_vnni", "avx512_vnni avx512_fp16 avx_vnni amx_tile amx_bf16 amx_int8")


@pytest.mark.parametrize(
    ("cpuinfo", "arch", "expected"),
    [
        (_changed("neoverse-v2.txt", ("0xd4f", "0xd84")), "aarch64", "neoverse-v3"),
        (_changed("neoverse-v2.txt", ("0xd4f", "0xd8e")), "aarch64", "neoverse-n3"),
        (_changed("neoverse-n1.txt", ("0x41", "0xc0"), ("0xd0c", "0xac3")), "aarch64", "ampere1"),
        (_changed("neoverse-n1.txt", ("0x41", "0xc0"), ("0xd0c", "0xac4")), "aarch64", "ampere1a"),
        (_changed("neoverse-n1.txt", ("0x41", "0xc0"), ("0xd0c", "0xac5")), "aarch64", "ampere1b"),
        (_changed("x86-avx512-amd.txt", INTEL, AMX), "x86_64", "sapphirerapids"),
        (_changed("x86-avx512-amd.txt", INTEL, (AMX[0], AMX[1] + " amx_fp16")), "x86_64", "graniterapids"),
        (_changed("x86-avx512-amd.txt", INTEL), "x86_64", "x86-64-v4"),  # AVX-512 without AMX: no Intel core of ours
    ],
)
def test_native_knows_the_new_cores(catalog, cpuinfo, arch, expected):
    assert resolve_native(catalog, arch, cpuinfo).name == expected


def test_an_amd_avx512_cpu_cannot_run_an_intel_amx_image(catalog):
    """The CPU guard of a sapphirerapids or graniterapids image refuses Zen 4 (no AMX, no AVX-512 FP16)."""
    have = cpu_features((SAMPLES / "x86-avx512-amd.txt").read_text())
    for name in ("sapphirerapids", "graniterapids"):
        lacking = set(catalog.find_target(name, "x86_64").cpu_features) - have
        assert {"amx_tile", "amx_bf16", "amx_int8", "avx512_fp16"} <= lacking, (name, lacking)
