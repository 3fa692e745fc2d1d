"""Real builds on the local engine: the x86_64 chain end to end, rebuilds, and the faults users hit."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests import session
from tests.engine.conftest import files_holding, leftovers_of
from tests.engine.images import CA_BUNDLE, README_ARGS, X86_ARGS, X86_DISTRIBUTION, run_build_py, x86_wheelhouse
from torchstack.base import sharing
from torchstack.catalog.model import ROOT
from torchstack.request.tags import tag_version

pytestmark = pytest.mark.engine


def test_x86_chain_builds_a_tagged_final_image_that_runs_torch(client, x86_build):
    stages = [s["stage"] for s in x86_build["stages"]]
    assert stages == ["base", "libs", "tools", "dev", "final"]
    final = x86_build["final_image"]
    assert final.startswith("torchstack:r") and final in x86_build["stages"][-1]["tags"]
    assert "failed" not in x86_build["checks"] and "passed" in x86_build["checks"], x86_build["checks"]
    out = client.containers.run(final, ["python", "-c", "import torch, numpy; print(torch.__version__)"], remove=True)
    version = out.decode().strip()
    assert f"-torch-{tag_version(version)}-onednn" in final and "-cpu-" not in final, f"torch {version} in {final}"


def test_the_first_command_finds_torch_in_a_wheelhouse_and_says_where_else_to_look(x86_build, tmp_path):
    """The README's first command on a host with pip unconfigured and PyTorch's CPU index out of reach
    (a proxy that refuses): without a wheelhouse, one line naming the index and the ways out; with
    PIP_FIND_LINKS naming one, the same build as the session's, offline."""
    offline = {"PIP_CONFIG_FILE": "/dev/null", "HTTPS_PROXY": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9"}
    no_wheelhouse = {**{k: v for k, v in os.environ.items() if k != "PIP_FIND_LINKS"}, **offline}
    refused = session.run([sys.executable, "build.py", *README_ARGS, "--no-test"], cwd=ROOT, timeout=600, env=no_wheelhouse)
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1, refused.stderr[-2000:]
    assert "https://download.pytorch.org/whl/cpu" in refused.stderr and "PIP_FIND_LINKS=DIR" in refused.stderr, refused.stderr
    summary = tmp_path / "wheelhouse.json"
    built = run_build_py(*README_ARGS, "--no-test", "--json", str(summary), env={**offline, "PIP_FIND_LINKS": x86_wheelhouse()})
    assert built.returncode == 0, built.stderr[-3000:]
    assert "from a local wheelhouse" in built.stderr, built.stderr[-2000:]
    again = json.loads(summary.read_text())
    assert again["final_image"] == x86_build["final_image"]
    assert [s["status"] for s in again["stages"]] == ["cached"] * 5, again["stages"]


def test_a_no_op_rebuild_is_served_from_the_cache(x86_build, tmp_path):
    """Nothing changed: every stage comes from the cache, and the checks that passed on this very
    image ID with the same checks stand instead of running again."""
    summary = tmp_path / "again.json"
    started = time.monotonic()
    result = run_build_py(*X86_ARGS, "--torch-wheel", x86_wheelhouse(), "--json", str(summary))
    seconds = time.monotonic() - started
    assert result.returncode == 0, result.stderr[-3000:]
    again = json.loads(summary.read_text())
    assert [s["status"] for s in again["stages"]] == ["cached"] * 5, again["stages"]
    assert again["final_image"] == x86_build["final_image"]
    assert again["checks"].startswith(x86_build["checks"] + " (earlier, on this same image ID"), again["checks"]
    print(f"no-op rebuild of the full chain: {seconds:.1f} s (first build {x86_build['seconds']:.0f} s)")


def test_the_ca_bundle_is_in_no_layer_of_the_final_image(client, x86_build):
    pem = CA_BUNDLE.read_text().split("-----BEGIN CERTIFICATE-----")[-1]
    needle = pem.strip().splitlines()[1].encode()  # a line of the last certificate's body
    image = client.images.get(x86_build["final_image"])
    history = " ".join(step.get("CreatedBy", "") for step in image.history())
    assert "ca-bundle" not in history and "PIP_CERT" not in history
    assert files_holding(image, needle) == []


def test_no_docker_daemon_is_one_clear_line():
    result = run_build_py("--build-type", "base", env={"DOCKER_HOST": "unix:///nonexistent/docker.sock"})
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and "no Docker engine answers" in result.stderr, result.stderr


def test_buildx_asked_for_on_a_host_without_it_is_one_line_and_exit_2(client):
    """No docker CLI on PATH, so no buildx: refused before any work, with what installs it."""
    result = run_build_py("--build-type", "base", "--builder", "buildx", env={"PATH": "/nonexistent"})
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert "missing docker buildx, for --builder buildx: apt-get install docker-buildx" in result.stderr


def test_a_failing_step_names_stage_step_output_and_log(client, x86_build, repo_copy, unique_tag):
    patches = repo_copy / "patches" / "numpy"
    patches.mkdir(parents=True, exist_ok=True)
    (patches / "0001-stale.patch").write_text(
        "Why: stands for a patch upstream has overtaken.\n--- a/no-such-file.py\n+++ b/no-such-file.py\n@@ -1 +1 @@\n-a\n+b\n"
    )
    (patches / "series").write_text("0001-stale.patch\n")
    result = run_build_py(*X86_ARGS, "--torch-wheel", x86_wheelhouse(), "--tag", unique_tag, cwd=repo_copy)
    assert result.returncode == 1
    assert "stage tools failed at step" in result.stderr and "build-numpy.sh" in result.stderr
    assert "patch 0001-stale.patch does not apply to numpy 2.3.5" in result.stderr
    assert "full log: " in result.stderr
    tags = {t for image in client.images.list() for t in image.tags}
    assert f"torchstack-tools:{unique_tag}" not in tags and f"torchstack:{unique_tag}" not in tags


# A CI runner cancels a job with SIGTERM (then SIGKILL); a person presses Ctrl-C (SIGINT).
@pytest.mark.parametrize(
    ("builder", "cache_hit", "sent", "code"),
    [("docker", "---> Using cache", signal.SIGTERM, 143), pytest.param("buildx", "CACHED", signal.SIGINT, 130, marks=pytest.mark.buildkit)],
)
def test_a_cancelled_build_leaves_no_tag_no_container_no_context_and_the_next_run_resumes_from_cache(
    client, repo_copy, unique_tag, builder, cache_hit, sent, code
):
    template = repo_copy / "templates" / "libs.Dockerfile.j2"
    original = template.read_text()
    marker = f"echo finished-before-the-interrupt {unique_tag}"
    template.write_text(original.replace("{{ common.finish() }}", f"RUN {marker}\nRUN sleep 600\n{{{{ common.finish() }}}}"))
    args = [
        sys.executable,
        str(repo_copy / "build.py"),
        "--build-type",
        "libs",
        *X86_DISTRIBUTION,
        "--openblas-from",
        "distro",
        "--tag",
        unique_tag,
        "--builder",
        builder,
    ]
    build = session.popen(args, cwd=repo_copy, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    for line in build.stderr:
        if "RUN sleep 600" in line:
            break
    time.sleep(3)
    owner = sharing.identity(build.pid)
    build.send_signal(sent)
    _, rest = build.communicate(timeout=60)
    assert build.returncode == code, rest
    assert "interrupted in stage libs: no tag points at a half-built image" in rest
    tags = {t for image in client.images.list() for t in image.tags}
    assert f"torchstack-libs:{unique_tag}" not in tags
    assert not leftovers_of(client, owner)
    time.sleep(2)
    assert not [c for c in client.containers.list() if "sleep 600" in " ".join(c.attrs["Config"]["Cmd"] or [])]

    template.write_text(original.replace("{{ common.finish() }}", f"RUN {marker}\n{{{{ common.finish() }}}}"))
    again = subprocess.run(args, cwd=repo_copy, capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    log_path = again.stderr.split("full build output goes to")[1].split()[0]
    log = open(log_path).read()
    after_marker = log.split(marker, 1)[1]
    assert cache_hit in "\n".join(after_marker.lstrip().splitlines()[:2]), after_marker[:300]
    assert f"torchstack-libs:{unique_tag}" in {t for image in client.images.list() for t in image.tags}
