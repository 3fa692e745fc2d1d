"""scripts/prepare-source.sh: a fresh tree from the archive, then patches in series order; one
that does not apply stops with its name."""

import subprocess
import tarfile

from torchstack.making.render import SCRIPTS

GOOD = """Why: a test patch. Upstream: none.
--- a/hello.txt
+++ b/hello.txt
@@ -1 +1 @@
-hello
+hello, patched
"""
STALE = GOOD.replace("-hello\n", "-goodbye\n").replace("hello, patched", "goodbye, patched")


def apply(tmp_path, series, patches):
    unpacked, tree, patch_dir = tmp_path / "hello-1.0", tmp_path / "tree", tmp_path / "patches"
    unpacked.mkdir(exist_ok=True)
    (unpacked / "hello.txt").write_text("hello\n")
    with tarfile.open(tmp_path / "hello-1.0.tar.gz", "w:gz") as archive:
        archive.add(unpacked, arcname="hello-1.0")
    tree.mkdir(exist_ok=True)
    (tree / "left-over.txt").write_text("from an earlier build\n")
    patch_dir.mkdir(exist_ok=True)
    for name, text in patches.items():
        (patch_dir / name).write_text(text)
    if series is not None:
        (patch_dir / "series").write_text(series)
    command = [SCRIPTS / "prepare-source.sh", "openblas", "0.3.33", tmp_path / "hello-1.0.tar.gz", tree, patch_dir]
    return subprocess.run(command, capture_output=True, text=True)


def test_patches_apply_in_series_order(tmp_path):
    result = apply(tmp_path, "# comment\n0001-good.patch\n", {"0001-good.patch": GOOD})
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "tree" / "hello.txt").read_text() == "hello, patched\n"
    assert not (tmp_path / "tree" / "left-over.txt").exists()
    assert "applied 0001-good.patch to openblas 0.3.33" in result.stdout


def test_a_patch_that_no_longer_applies_names_itself_and_the_version(tmp_path):
    result = apply(tmp_path, "0001-good.patch\n0002-stale.patch\n", {"0001-good.patch": GOOD, "0002-stale.patch": STALE})
    assert result.returncode == 1
    assert result.stderr.strip() == "torchstack: patch 0002-stale.patch does not apply to openblas 0.3.33"


def test_no_series_means_no_patches(tmp_path):
    result = apply(tmp_path, None, {})
    assert result.returncode == 0 and "no patches for openblas 0.3.33" in result.stdout
