"""Each component's script inputs, computed from that component's own data in the catalog."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torchstack.base.errors import DataError
from torchstack.base.layout import (
    BUILD_TREES_DIR,
    CCACHE_DIR,
    DOWNLOADS_DIR,
    IMAGE_PATH,
    PATCHES_DIR,
    SOURCE_TREES_DIR,
    SOURCES_DIR,
    VENV,
    WHEELS_DIR,
)
from torchstack.catalog.component import Component, Source
from torchstack.catalog.model import Architecture, Backend, Target


@dataclass(frozen=True)
class RecipeInputs:
    """What one component's recipe may know: its own data, the build's target, architecture and
    backend, and what the components it uses export (components.yaml `uses`, `exports`)."""

    component: Component
    method: str  # source | distro | wheel
    version: str
    prefix: str | None
    source: Source | None
    target: Target
    arch: Architecture
    backend: Backend
    jobs: int
    torch_jobs: int
    torch_version: str
    cache_mount: bool  # the builder keeps a compiler cache across builds (BuildKit's cache mount)
    wheel_name: str
    exported: dict[str, str]  # the exports of the components it `uses` that the build has
    runtime_requirements: tuple[str, ...] = ()  # what it pulls in at run time, pinned (torch: its release's, torch.yaml)

    @property
    def compiles(self) -> bool:
        return self.method == "source"

    @property
    def ccache(self) -> bool:
        return self.compiles and self.cache_mount


Recipe = Callable[[RecipeInputs], dict[str, str]]


def script_inputs(inputs: RecipeInputs) -> dict[str, str]:
    """The named inputs of the component's script (and of its template lines)."""
    recipe = RECIPES.get(inputs.component.name)
    if recipe is None:
        raise DataError(f"component {inputs.component.name} has no recipe in torchstack/catalog/recipes.py")
    return {**_source_inputs(inputs), **recipe(inputs)}


def pip_requirements(inputs: RecipeInputs) -> tuple[str, ...]:
    """What the component's step installs with pip: its build requirements when compiled (and
    what its own tests need, which the dev stage's checks install), else its alternative's requirements. The stage's fetch step
    downloads them; the step installs them offline (`_offline`)."""
    if inputs.compiles:
        installer = (inputs.component.installer,) if inputs.component.installer else ()
        # Its own tests install it, with what it pulls in, beside what they need (tests/image/dev).
        tests = (*inputs.component.test_requirements, *inputs.runtime_requirements) if inputs.component.own_tests else ()
        return (*installer, *inputs.component.build_requirements, *tests)
    alternative = inputs.component.alternatives.get(inputs.method)
    return tuple(r.format(version=inputs.version) for r in alternative.requirements) if alternative else ()


def _offline() -> dict[str, str]:
    """pip takes packages only from what the stage's fetch step downloaded: the step that
    compiles reaches no index and holds no secret, so its layer can be shared through a registry."""
    return {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": DOWNLOADS_DIR}


def exports_of(component: Component, prefix: str | None) -> dict[str, str]:
    """What a component tells the other components' builds, with its prefix filled in."""
    return {name: value.format(prefix=prefix or "") for name, value in component.exports.items()}


def _source_inputs(inputs: RecipeInputs) -> dict[str, str]:
    """What every compiled component's script reads: its source, version, patches and prefix."""
    if not inputs.compiles or inputs.source is None:
        return {}
    env = {
        "SOURCE": f"{SOURCES_DIR}/{inputs.source.filename}",
        "VERSION": inputs.version,
        "PATCHES": f"{PATCHES_DIR}/{inputs.component.name}",
        "TREE": f"{BUILD_TREES_DIR}/{inputs.component.name}",
    }
    if inputs.prefix:
        env["PREFIX"] = inputs.prefix
    return env


def _ccache_on_path(inputs: RecipeInputs) -> dict[str, str]:
    """Debian's ccache wrappers first on PATH, for builds with no compiler-cache switch of their own."""
    return {"CCACHE_DIR": CCACHE_DIR, "PATH": f"/usr/lib/ccache:{IMAGE_PATH}"} if inputs.ccache else {}


def openblas(inputs: RecipeInputs) -> dict[str, str]:
    if not inputs.compiles:
        return {}
    tuning = inputs.target.openblas
    flags = [
        f"TARGET={tuning.target}",
        *(["DYNAMIC_ARCH=1"] if tuning.dynamic_arch else []),
        "USE_OPENMP=1",  # the threading torch uses: one OpenMP runtime, no oversubscription
        "NUM_THREADS=256",
        "NO_STATIC=1",
        "COMMON_OPT=-O2",
        *(["BUILD_BFLOAT16=1"] if tuning.bf16 else []),  # sbgemm_, where it is fast (targets.yaml)
        # Build for the target, never run it: no self-tests on a build host that may lack the
        # target's instructions (x86-64-v4 on an AVX2 host, neoverse-v2 on a Graviton2, qemu).
        "CROSS=1",
    ]
    return {"OPENBLAS_MAKE_FLAGS": " ".join(flags), "JOBS": str(inputs.jobs), **_ccache_on_path(inputs)}


def acl(inputs: RecipeInputs) -> dict[str, str]:
    tuning = inputs.target.acl
    assert tuning is not None  # selection.refusal: a target without acl: settings is refused
    flags = [
        "Werror=0",
        "debug=0",
        "neon=1",
        "opencl=0",
        "embed_kernels=0",
        "os=linux",
        f"arch={tuning.arch}",
        "build=native",
        f"multi_isa={int(tuning.multi_isa)}",
        "fixed_format_kernels=1",
        "openmp=1",
        "cppthreads=0",
        f"-j{inputs.jobs}",
    ]
    env = {}
    if inputs.ccache:
        flags.append("compiler_cache=ccache")  # scons does not pass PATH on to the compiler
        env["CCACHE_DIR"] = CCACHE_DIR
    return {"ACL_SCONS_FLAGS": " ".join(flags), **env}


def zdnn(inputs: RecipeInputs) -> dict[str, str]:
    tuning = inputs.target.zdnn
    assert tuning is not None  # selection.refusal: a target without zdnn: settings is refused
    return {"ZDNN_CFLAGS": f"-O3 -march={tuning.march} -mzvector", "JOBS": str(inputs.jobs), **_ccache_on_path(inputs)}


def numpy(inputs: RecipeInputs) -> dict[str, str]:
    if not inputs.compiles:
        return {"VENV": VENV, **_offline()}
    # The target's flag alone: meson puts environment CFLAGS after its release -O3, so an -O2
    # here would win.
    flags = inputs.target.flag
    return {
        "CFLAGS": flags,
        "CXXFLAGS": flags,
        "PKG_CONFIG_PATH": "",
        **inputs.exported,
        # test-simd=[]: numpy's `_simd` module, which only numpy's own test suite imports (meson
        # install tag "tests"), is built without its copy per CPU feature: 41 of numpy's 443
        # compile-seconds on x86_64 (meson's .ninja_log, numpy 2.3.5), no code a user runs.
        "NUMPY_SETUP_ARGS": "-Dblas=openblas -Dlapack=openblas -Dallow-noblas=false -Dtest-simd=[]",
        "PIP_INSTALLER": inputs.component.installer or "",
        "BUILD_REQUIREMENTS": " ".join(inputs.component.build_requirements),
        **_offline(),
        "VENV": VENV,
        "JOBS": str(inputs.jobs),
        **_ccache_on_path(inputs),
    }


def torch(inputs: RecipeInputs) -> dict[str, str]:
    if not inputs.compiles:
        return {"WHEEL": f"{WHEELS_DIR}/{inputs.wheel_name}"}
    flags = inputs.target.flag  # the Release build type brings the optimization level
    env = {
        **inputs.component.env,
        **inputs.arch.torch_env,
        **inputs.backend.torch_env,
        **inputs.exported,
        "MAX_JOBS": str(inputs.torch_jobs),
        "PYTORCH_BUILD_VERSION": inputs.torch_version,
        "PYTORCH_BUILD_NUMBER": "1",
        "CFLAGS": flags,
        "CXXFLAGS": flags,
        "BUILD_REQUIREMENTS": " ".join(inputs.component.build_requirements),
        **_offline(),
        "VENV": VENV,
        "WHEELS": WHEELS_DIR,
        "KEEP_SOURCE": f"{SOURCE_TREES_DIR}/pytorch",
        # PyTorch runs its compiles through ccache itself when USE_CCACHE=1 and ccache is on PATH;
        # Debian's wrappers on PATH as well would run every compile through ccache twice.
        "USE_CCACHE": "1" if inputs.ccache else "0",
    }
    if inputs.ccache:
        env["CCACHE_DIR"] = CCACHE_DIR
    return env


RECIPES: dict[str, Recipe] = {"openblas": openblas, "acl": acl, "zdnn": zdnn, "numpy": numpy, "torch": torch}
