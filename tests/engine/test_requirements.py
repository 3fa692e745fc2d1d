"""--requirements on the x86_64 chain: a team's packages in another release of the README image,
resolved before the build with the stack held, and what the image then runs."""

from __future__ import annotations

import hashlib
import json

import pytest

from tests.engine.conftest import untag
from tests.engine.images import APP_RELEASE, APP_REQUIREMENTS, IMAGES, X86_ARGS, run_build_py, x86_wheelhouse

pytestmark = pytest.mark.engine

TRANSFORMERS = APP_REQUIREMENTS.strip()
# numpy's RECORD (every file with its hash): the same text in two images is the same numpy install.
NUMPY_RECORD = "import importlib.metadata as m; print(m.distribution('numpy').read_text('RECORD'))"
# A BERT made from its configuration (random weights, nothing downloaded), run as a team's code runs it.
BERT = """
import torch
from transformers import BertConfig, BertModel
config = BertConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128)
model = BertModel(config).eval()
with torch.inference_mode():
    out = model(torch.randint(0, 1000, (2, 16))).last_hidden_state
print(tuple(out.shape), torch.get_num_threads())
"""
# A restricted pod: an arbitrary user in group 0, read-only root, no capabilities, no network, an
# emptyDir at /tmp (as the image checks run their restricted pods).
RESTRICTED = {
    "user": "123456:0",
    "read_only": True,
    "cap_drop": ["ALL"],
    "security_opt": ["no-new-privileges"],
    "network_mode": "none",
    "tmpfs": {"/tmp": "rw,exec"},
}


def test_a_requirement_on_another_torch_is_refused_in_one_line_before_any_build(tmp_path):
    wanted = tmp_path / "requirements.txt"
    wanted.write_text("torch<2.13\n")
    result = run_build_py(*X86_ARGS, "--torch-wheel", x86_wheelhouse(), "--requirements", str(wanted), "--release", "r99.11")
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr[-2000:]
    assert f"--requirements {wanted}: The user requested torch<2.13; the image holds torch 2.13.0+cpu" in result.stderr
    assert "full build output goes to" not in result.stderr


@pytest.fixture(scope="session")
def requirements_build(client, x86_build):
    """The README's request in another release (APP_RELEASE) with a team's requirements
    (APP_REQUIREMENTS), built without checks (images.py: in the background once
    the x86_64 chain ended); its JSON summary, with its output as `output`. Untagged afterwards."""
    yield IMAGES.result("requirements_build")
    untag(client, f":{APP_RELEASE}-")


def test_another_release_with_a_teams_requirements_rebuilds_only_its_final_stage_and_keeps_our_numpy(client, x86_build, requirements_build):
    built = requirements_build
    statuses = {s["stage"]: s["status"] for s in built["stages"]}
    assert statuses == {"base": "cached", "libs": "cached", "tools": "cached", "dev": "cached", "final": "built"}
    image = built["final_image"]
    assert image.endswith(f"-requirements.{hashlib.sha256(APP_REQUIREMENTS.encode()).hexdigest()[:8]}"), image
    recorded = json.loads(client.images.get(image).labels["io.torchstack.build-info"])["requirements"]
    assert recorded["requested"] == [TRANSFORMERS], recorded
    assert not {p.split("==")[0].lower() for p in recorded["resolved"]} & {"torch", "numpy"}, recorded["resolved"]
    assert f"torchstack: --requirements requirements.txt: {TRANSFORMERS}, with " in built["output"]

    # The checks of numpy's BLAS, the pins and the installer, and of the requirements themselves.
    checks = run_build_py("test", image, "-k", "numpy or pins or installer or app_requirement")
    assert checks.returncode == 0 and " passed" in checks.stdout, checks.stdout[-3000:] + checks.stderr[-2000:]
    ours, theirs = (client.containers.run(name, ["python3", "-c", NUMPY_RECORD], remove=True) for name in (x86_build["final_image"], image))
    assert theirs == ours, "numpy's files differ from the README image's: the requirements moved numpy"
    out = client.containers.run(image, ["python3", "-c", BERT], remove=True, stderr=True, **RESTRICTED).decode()
    assert out.strip().splitlines()[-1].startswith("(2, 16, 64) "), out[-2000:]
