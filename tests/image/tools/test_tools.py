"""Checks for the tools stage: the Python environment and numpy on the expected BLAS."""

import json

import pytest


def test_venv_python_is_the_planned_one(python, ours):
    version = python("import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}', sys.prefix)").split()
    assert version == [ours["python"], ours["venv"]], f"expected Python {ours['python']} in {ours['venv']}, found {version}"


def test_numpy_is_linked_against_the_expected_blas(python, ours):
    """numpy's own build configuration names the BLAS and LAPACK the plan promised, with their
    folder (a build that lost its -Dblas/-Dlapack setup-args may still find some OpenBLAS), and
    the compiler flags it was given."""
    numpy = ours["components"]["numpy"]
    config = json.loads(python("import json, numpy; print(json.dumps(numpy.show_config(mode='dicts')))"))
    version = python("import numpy; print(numpy.__version__)").strip()
    assert version == numpy["version"], f"expected numpy {numpy['version']}, found {version}"
    found = config["Build Dependencies"]
    if numpy["method"] == "wheel":
        assert found["blas"]["name"].startswith("scipy-openblas"), f"a numpy wheel carries scipy-openblas, found {found}"
        return
    openblas = ours["components"].get("openblas")
    # Our OpenBLAS under its prefix, or Debian's OpenMP build (the threading torch uses).
    folder = (
        f"{openblas['prefix']}/lib" if openblas and openblas["method"] == "source" else f"/usr/lib/{ours['arch']}-linux-gnu/openblas-openmp"
    )
    for kind in ("blas", "lapack"):
        assert found[kind]["name"] == "openblas", f"expected numpy's {kind} to be openblas, found {found[kind]}"
        assert found[kind].get("lib directory", "").rstrip("/") == folder, f"expected numpy's {kind} from {folder}, found {found[kind]}"
    if ours.get("cflags"):
        assert config["Compilers"]["c"]["args"] == ours["cflags"], f"numpy was compiled with {config['Compilers']['c']}"


def test_numpy_computes_with_that_blas(python):
    result = python(
        "import numpy as np; a = np.arange(64.0).reshape(8, 8); "
        "print(float((a @ a.T).trace()), round(float(np.linalg.det(np.eye(5) * 2)), 6))"
    ).split()
    assert result == ["85344.0", "32.0"], f"numpy gave {result}"


def test_numpy_source_build_leaves_no_build_tools(host, ours):
    if ours["components"]["numpy"]["method"] != "source":
        pytest.skip("numpy was not built from source")
    found = host.run(f"ls {ours['venv']}/bin").stdout.split()
    assert not {"cython", "meson", "ninja"} & set(found), f"build tools left in the venv: {found}"
