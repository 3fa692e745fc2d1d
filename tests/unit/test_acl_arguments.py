"""Our scons arguments for the Arm Compute Library, held to the options ComputeLibrary's own
SConstruct declares. ACL cannot be fetched or compiled on this machine, so this is how every
argument we pass is checked: a misspelt option is silently ignored by scons, and a wrong enum
value fails only on an Arm build host, an hour in."""

import pytest

from torchstack.base.errors import UsageProblem

# The option declarations of ComputeLibrary's SConstruct (vars.AddVariables, and the
# export_compile_commands added after it): name -> allowed values for EnumVariable, BOOL for
# BoolVariable, None for path and free-text options, a tuple of items for ListVariable. Read from
# the newest SConstruct our code search holds (Copyright 2016-2023 Arm Limited: arch values up to
# armv8.6-a-sve2-sme2, os up to windows). The pinned 52.6.0's own SConstruct could not be read
# here; an option it renamed or dropped since is not caught (written down as not verified).
BOOL = "bool"
ACL_OPTIONS = {
    "debug": BOOL,
    "asserts": BOOL,
    "logging": BOOL,
    "arch": (
        "armv7a",
        "armv7a-hf",
        "arm64-v8a",
        "arm64-v8.2-a",
        "arm64-v8.2-a-sve",
        "arm64-v8.2-a-sve2",
        "x86_32",
        "x86_64",
        "armv8a",
        "armv8.2-a",
        "armv8.2-a-sve",
        "armv8.6-a",
        "armv8.6-a-sve",
        "armv8.6-a-sve2",
        "armv8.6-a-sve2-sme2",
        "armv8r64",
        "x86",
    ),
    "estate": ("auto", "32", "64"),
    "os": ("linux", "android", "tizen", "macos", "bare_metal", "openbsd", "windows"),
    "build": ("native", "cross_compile", "embed_only"),
    "examples": BOOL,
    "gemm_tuner": BOOL,
    "Werror": BOOL,
    "multi_isa": BOOL,
    "standalone": BOOL,
    "opencl": BOOL,
    "neon": BOOL,
    "embed_kernels": BOOL,
    "compress_kernels": BOOL,
    "set_soname": BOOL,
    "openmp": BOOL,
    "cppthreads": BOOL,
    "build_dir": None,
    "install_dir": None,
    "exceptions": BOOL,
    "high_priority": BOOL,
    "linker_script": None,
    "external_tests_dir": None,
    "experimental_dynamic_fusion": BOOL,
    "fixed_format_kernels": BOOL,
    "mapfile": BOOL,
    "custom_options": ("disable_mmla_fp",),
    "data_type_support": ("qasymm8", "qasymm8_signed", "qsymm16", "fp16", "fp32", "integer"),
    "data_layout_support": ("nhwc", "nchw"),
    "toolchain_prefix": None,
    "compiler_prefix": None,
    "extra_cxx_flags": None,
    "extra_link_flags": None,
    "compiler_cache": None,
    "specs_file": None,
    "build_config": None,
    "export_compile_commands": BOOL,
}
# What SCons' BoolVariable accepts.
BOOL_VALUES = {"y", "yes", "true", "t", "1", "on", "all", "n", "no", "false", "f", "0", "off", "none"}


def problems_with(arguments: list[str]) -> list[str]:
    """What SConstruct would ignore or refuse in these arguments (SCons' own -jN aside)."""
    found, given = [], {}
    for argument in arguments:
        if argument.startswith("-j") and argument[2:].isdigit():
            continue
        name, sep, value = argument.partition("=")
        if not sep or name not in ACL_OPTIONS:
            found.append(f"{argument}: not an option SConstruct declares")
            continue
        given[name] = value
        kind = ACL_OPTIONS[name]
        if kind == BOOL and value.lower() not in BOOL_VALUES:
            found.append(f"{argument}: not a boolean")
        elif isinstance(kind, tuple) and name not in ("custom_options", "data_type_support", "data_layout_support"):
            if value not in kind:
                found.append(f"{argument}: {name} must be one of {', '.join(kind)}")
    # SConstruct: "Currently Multi ISA binary is only supported for arm v8 family"
    if given.get("multi_isa", "0").lower() in {"1", "y", "yes", "true", "t", "on", "all"} and "v8" not in given.get("arch", ""):
        found.append(f"multi_isa=1 needs an arm v8 arch, not {given.get('arch')}")
    if given.get("openmp") == "1" and given.get("cppthreads") == "1":
        found.append("openmp=1 with cppthreads=1: two schedulers")
    return found


def acl_arguments(plan) -> list[str]:
    return plan.component("acl").env["ACL_SCONS_FLAGS"].split()


def test_every_acl_target_passes_only_declared_options_with_allowed_values(catalog, plan_for):
    checked = 0
    for target in catalog.targets_for("aarch64"):
        for builder in ("docker", "buildx"):
            try:
                plan = plan_for(backend="onednn-acl", build_target=target.name, builder=builder, distribution="trixie")
            except UsageProblem:
                continue
            arguments = acl_arguments(plan)
            assert problems_with(arguments) == [], f"{target.name} ({builder}): {arguments}"
            checked += 1
    assert checked >= 10


def test_the_generic_target_builds_acl_as_pytorch_ci_does(plan_for):
    """PyTorch's CI: arch=armv8a multi_isa=1 (one library, SVE/BF16/I8MM kernels picked at run time)."""
    arguments = acl_arguments(plan_for(backend="onednn-acl"))
    assert {"arch=armv8a", "multi_isa=1", "fixed_format_kernels=1", "openmp=1", "cppthreads=0"} <= set(arguments)


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        (["arch=armv9-a"], "arch=armv9-a: arch must be one of"),
        (["multiisa=1"], "multiisa=1: not an option SConstruct declares"),
        (["neon=maybe"], "neon=maybe: not a boolean"),
        (["arch=x86_64", "multi_isa=1"], "multi_isa=1 needs an arm v8 arch, not x86_64"),
    ],
)
def test_the_check_catches_what_scons_would_ignore_or_refuse(arguments, problem):
    assert any(p.startswith(problem) for p in problems_with(arguments)), problems_with(arguments)
