"""`pip install <checkout>` gives a `torchstack` command that works from any folder: the catalog,
templates, scripts, patches, examples and image checks travel in the wheel as package data."""

import subprocess
import sys

import pytest

from torchstack.catalog.model import ROOT

README_REQUEST = ["--torch-from", "wheel", "--openblas-from", "distro"]


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A new venv with the checkout installed into it (not editable), and an empty folder outside the checkout."""
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    done = subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet", str(ROOT)], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return venv, tmp_path_factory.mktemp("elsewhere")


def run(installed, *args):
    venv, folder = installed
    return subprocess.run([str(venv / "bin" / "torchstack"), *args], cwd=folder, capture_output=True, text=True, timeout=120)


def test_the_installed_package_reads_its_own_copy_of_the_files(installed):
    venv, folder = installed
    said = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "from torchstack.catalog.model import ROOT, CHECKOUT; print(ROOT); print(CHECKOUT)"],
        cwd=folder,
        capture_output=True,
        text=True,
        check=True,
    )
    root, checkout = said.stdout.split()
    assert root.startswith(str(venv)) and root.endswith("torchstack/files"), root
    assert checkout == "None"


def test_list_plan_and_render_work_from_another_folder(installed):
    listed = run(installed, "list", "backends")
    assert listed.returncode == 0 and "onednn-acl" in listed.stdout, listed.stderr
    planned = run(installed, "plan", *README_REQUEST)
    assert planned.returncode == 0, planned.stderr
    ours = subprocess.run([sys.executable, str(ROOT / "build.py"), "plan", *README_REQUEST], capture_output=True, text=True, check=True)
    # The same request names the same stage images: the installed copy's files are the checkout's.
    assert [line for line in planned.stdout.splitlines() if "torchstack-" in line] == [
        line for line in ours.stdout.splitlines() if "torchstack-" in line
    ]
    rendered = run(installed, "render", "--output", "out", *README_REQUEST)
    assert rendered.returncode == 0, rendered.stderr
    final = installed[1] / "out" / "final"
    assert (final / "Dockerfile").read_text().startswith("# torchstack stage")
    assert (final / "examples" / "compile.py").is_file() and (final / "toolkit" / "probe.py").is_file()
    assert "`torchstack fetch`" in rendered.stdout  # how an installed toolkit is run
