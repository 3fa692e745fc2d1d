"""scripts/build-openblas.sh's make invocations. OpenBLAS's source cannot be fetched in CI, so the
script runs here with `make` replaced by one that writes down how it was called."""

import os
import stat
import subprocess
import tarfile

from torchstack.making.render import SCRIPTS


def test_each_goal_is_its_own_make_and_getarch_keeps_to_the_job_count(tmp_path):
    """GNU make 4.4 (trixie) builds command-line goals in parallel: `make libs netlib shared` races
    on one archive (OpenBLAS#3899). Without MAKE_NB_JOBS, getarch gives sub-makes -j<all cores>."""
    source = tmp_path / "OpenBLAS-0.3.33"
    source.mkdir()
    (source / "Makefile").write_text("all:\n")
    with tarfile.open(tmp_path / "OpenBLAS-0.3.33.tar.gz", "w:gz") as archive:
        archive.add(source, arcname=source.name)
    calls = tmp_path / "make-calls"
    fake = tmp_path / "bin" / "make"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\necho "$*" >> {calls}\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    env = {
        **os.environ,
        "PATH": f"{fake.parent}:{os.environ['PATH']}",
        "SOURCE": str(tmp_path / "OpenBLAS-0.3.33.tar.gz"),
        "VERSION": "0.3.33",
        "PATCHES": str(tmp_path / "no-patches"),
        "TREE": str(tmp_path / "tree"),
        "PREFIX": str(tmp_path / "prefix"),
        "JOBS": "3",
        "OPENBLAS_MAKE_FLAGS": "TARGET=ZEN USE_OPENMP=1",
    }
    result = subprocess.run([SCRIPTS / "build-openblas.sh"], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    tree = tmp_path / "tree"
    assert calls.read_text().splitlines() == [
        f"-C {tree} -j3 MAKE_NB_JOBS=0 TARGET=ZEN USE_OPENMP=1 libs",
        f"-C {tree} -j3 MAKE_NB_JOBS=0 TARGET=ZEN USE_OPENMP=1 netlib",
        f"-C {tree} -j3 MAKE_NB_JOBS=0 TARGET=ZEN USE_OPENMP=1 shared",
        f"-C {tree} MAKE_NB_JOBS=0 TARGET=ZEN USE_OPENMP=1 PREFIX={tmp_path / 'prefix'} install",
    ]
    assert (tmp_path / "prefix" / "share" / "torchstack" / "openblas-make-flags").read_text() == "TARGET=ZEN USE_OPENMP=1\n"
