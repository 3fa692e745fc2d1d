"""A new build host, as scripts/setup-host.sh finds one: Debian 12 (bookworm), 13 (trixie) or forky
(testing, whose python3 is 3.14, as Ubuntu 26.04's is) with only the distribution's Python and a copy
of the checkout. `setup-host.sh --toolkit-only` makes the
toolkit's venv (.venv) from that python3, installing python3-venv where ensurepip is missing;
./build.py runs in it by itself (plan, render), the unit tests pass in it, and nothing was written
into the distribution's own Python (PEP 668: it is externally managed).

The whole unit suite runs on forky, whose Python (3.14) is the newest a host has and the one a removed
or changed library call breaks first; the host's own run (.ci/run) has it on bookworm's (3.11).
Bookworm and trixie run the unit tests that drive what their distribution itself provides (gpg, patch,
gcc, cosign, venv): the whole suite three times over would cost a cold run most of its budget and check
little that these two do not."""

from __future__ import annotations

import io
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

from tests import session
from tests.engine.images import CA_BUNDLE, README_ARGS, copy_of_checkout, run_build_py
from torchstack.catalog.model import load_catalog

pytestmark = [pytest.mark.engine]

# Where the host's CA bundle is mounted: not /etc/ssl/certs/ca-certificates.crt, which the
# container's own ca-certificates package writes.
CONTAINER_CA = "/etc/torchstack-test/ca-certificates.crt"

# One run per host: what the host has (python3, ca-certificates), a listing of every folder the
# system python3 installs into, the set-up, the toolkit's commands, its unit tests, the listing
# again. Each step that passed prints a marker line.
SCRIPT = r"""
set -euo pipefail
mark() { echo "torchstack-test: $*"; }
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends python3 ca-certificates > /dev/null
mark "host has $(/usr/bin/python3 -V)"
# What the unit tests run besides Python, which the full set-up (not --toolkit-only) or a CI runner
# has: gpg and gpgv (a signed test archive; trixie's apt no longer pulls gpgv in), patch (the patch
# series), gcc (stub libraries in test wheels), cosign (--sign's keys): bookworm has no cosign
# package, so trixie's, as setup-host.sh takes it (it needs only libc6 2.34).
apt-get install -y -qq --no-install-recommends gpg gpg-agent gpgv patch gcc libc6-dev > /dev/null
if ! apt-cache show cosign > /dev/null 2>&1; then
    echo "deb http://deb.debian.org/debian trixie main" > /etc/apt/sources.list.d/trixie.list
    printf 'Package: *\nPin: release n=trixie\nPin-Priority: 100\n' > /etc/apt/preferences.d/trixie
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends -t trixie cosign > /dev/null
    rm /etc/apt/sources.list.d/trixie.list /etc/apt/preferences.d/trixie
else
    apt-get install -y -qq --no-install-recommends cosign > /dev/null
fi
mark "unit tests' tools: $(cosign version 2> /dev/null | grep -m1 GitVersion | tr -s ' ')"

# Every site-packages folder of the system python3 (its own word, and the usual globs), listed.
site_dirs() {
    (cd / && /usr/bin/python3 -c 'import site; print(*site.getsitepackages(), site.getusersitepackages(), sep="\n")')
    ls -d /usr/lib/python3/dist-packages /usr/local/lib/python3*/dist-packages 2> /dev/null || true
}
snapshot() {
    local dir
    site_dirs | sort -u | while read -r dir; do
        if [[ -e $dir ]]; then find "$dir" -printf '%y %p %s\n'; else echo "absent $dir"; fi
    done | sort
}
snapshot > /tmp/site-before
mark "site folders: $(site_dirs | sort -u | tr '\n' ' ')"

cd /checkout
bash scripts/setup-host.sh --toolkit-only
mark "setup passed"
./build.py plan __ARGS__
mark "plan passed"
./build.py render --output /tmp/rendered __ARGS__
ls /tmp/rendered > /dev/null
mark "render passed"
.venv/bin/python -m pytest -q -m "not engine" -p no:cacheprovider __UNIT_TESTS__
mark "unit tests passed"

snapshot > /tmp/site-after
diff -u /tmp/site-before /tmp/site-after
mark "system site-packages unchanged"
if (cd / && /usr/bin/python3 -c "import torchstack" 2> /dev/null); then
    echo "torchstack is importable by /usr/bin/python3" >&2
    exit 1
fi
mark "system python3 has no torchstack"
"""

# What bookworm and trixie run of the unit suite: the tests of what the distribution provides, the installed
# package and its venv.
HOST_TOOL_TESTS = (
    "tests/unit/test_archive.py",  # gpg, gpgv
    "tests/unit/test_patches.py",  # patch
    "tests/unit/test_plugins.py",  # gcc: stub libraries in test wheels
    "tests/unit/test_cosign.py",  # cosign: reading its release, what it takes
    "tests/unit/test_signing.py",  # cosign: keys
    "tests/unit/test_installed.py",  # the package installed into a venv of this Python
)

MARKERS = (
    "setup passed",
    "plan passed",
    "render passed",
    "unit tests passed",
    "system site-packages unchanged",
    "system python3 has no torchstack",
)


def _archive(folder) -> bytes:
    """The copy of the checkout as a tar stream, as /checkout."""
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        tar.add(folder, arcname="checkout")
    return data.getvalue()


def _testing_image(client, folder: Path) -> str:
    """Debian forky (testing) as an image, bootstrapped as the toolkit bootstraps its OS images
    (mmdebstrap, minbase): not a release the toolkit builds images of, so not in its catalog. A
    mirror's testing Release may be past its Valid-Until between updates: apt is told not to check
    it (its signature is still checked)."""
    folder.mkdir()
    mirror = load_catalog().distributions["trixie"].mirror
    command = ["mmdebstrap", "--variant=minbase", "--quiet", '--aptopt=Acquire::Check-Valid-Until "false"', "forky", "forky.tar", mirror]
    made = subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=600)
    assert made.returncode == 0, made.stderr[-2000:]
    (folder / "Dockerfile").write_text('FROM scratch\nADD forky.tar /\nCMD ["bash"]\n')
    tag = f"torchstack-test-forky:{session.ID}"
    client.images.build(path=str(folder), tag=tag, rm=True, network_mode="host")
    (folder / "forky.tar").unlink()
    return tag


@pytest.mark.parametrize("distribution", ["bookworm", "trixie", "forky"])
def test_a_new_host_sets_up_the_toolkit_in_a_venv_and_its_unit_tests_pass(client, tmp_path, distribution):
    if distribution == "forky":
        os_image = _testing_image(client, tmp_path / "forky")
    else:
        made = run_build_py("bootstrap", "--distribution", distribution)
        assert made.returncode == 0, made.stderr[-2000:]
        os_image = made.stdout.strip().splitlines()[-1]
    unit_tests = "tests/unit" if distribution == "forky" else " ".join(HOST_TOOL_TESTS)
    script = SCRIPT.replace("__ARGS__", " ".join(README_ARGS)).replace("__UNIT_TESTS__", unit_tests)
    started = time.monotonic()
    container = client.containers.create(
        os_image,
        ["bash", "-c", script],
        name=f"torchstack-test-host-{distribution}-{session.ID}",
        network_mode="host",
        environment={"PIP_CERT": CONTAINER_CA},
        volumes={str(CA_BUNDLE): {"bind": CONTAINER_CA, "mode": "ro"}},
    )
    try:
        assert container.put_archive("/", _archive(copy_of_checkout(tmp_path)))
        container.start()
        code = container.wait(timeout=900)["StatusCode"]
        log = container.logs().decode(errors="replace")
    finally:
        container.remove(force=True)
        if distribution == "forky":
            client.images.remove(os_image)
    print(f"{distribution}: set-up, commands and unit tests in {time.monotonic() - started:.0f} s")
    assert code == 0, log[-6000:]
    if distribution == "forky":
        assert "torchstack-test: host has Python 3.14" in log, log[:2000]
    missing = [m for m in MARKERS if f"torchstack-test: {m}" not in log]
    assert not missing, f"missing: {missing}\n{log[-6000:]}"
