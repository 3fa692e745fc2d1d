"""--requirements: a team's packages in the final image, held to what the stack installs. The
resolution itself needs a package index (pip's own): the engine test resolves and builds one."""

import pytest

from torchstack.base.errors import UsageProblem
from torchstack.making.render import assemble_context
from torchstack.request.metadata import build_info
from torchstack.request.requirements import conflict, held, platforms

# pip 23's account of a conflict, as `pip install --dry-run` prints it (trimmed of progress lines).
DEPENDS_ON_OLD_TORCH = """
ERROR: Cannot install -r r.txt (line 1) because these package versions have conflicting dependencies.

The conflict is caused by:
    torchvision 0.23.0 depends on torch==2.8.0
    The user requested (constraint) torch<=2.14.1,==2.13.0+cpu

To fix this you could try to:
1. loosen the range of package versions you've specified
"""
ASKS_FOR_OLD_TORCH = """
The conflict is caused by:
    The user requested torch<2.13
    The user requested (constraint) torch==2.13.0+cpu

To fix this you could try to:
"""


def test_a_conflict_is_one_line_naming_the_package_and_the_pin_it_wants():
    pins = {"torch": "2.13.0+cpu", "numpy": "2.3.5"}
    said = conflict(DEPENDS_ON_OLD_TORCH, pins)
    assert said == "torchvision 0.23.0 depends on torch==2.8.0; the image holds torch 2.13.0+cpu, which nothing may move"
    assert conflict(ASKS_FOR_OLD_TORCH, pins).startswith("The user requested torch<2.13; the image holds torch 2.13.0+cpu")
    assert "\n" not in said


def test_any_other_failure_is_pips_own_last_error():
    output = (
        "ERROR: Could not find a version that satisfies the requirement nosuchpkg\nERROR: No matching distribution found for nosuchpkg\n"
    )
    assert conflict(output, {"torch": "2.13.0"}) == "pip cannot resolve it for the image: No matching distribution found for nosuchpkg"


def test_the_image_holds_torch_numpy_and_torchs_pins(plan_for, tmp_path):
    wanted = tmp_path / "requirements.txt"
    wanted.write_text("transformers\n")
    plan = plan_for(torch_version="2.13.0", methods={"torch": "wheel", "openblas": "distro"}, distribution="bookworm", requirements=wanted)
    pins = held(plan)
    assert pins["torch"] == "2.13.0" and pins["numpy"] == plan.component("numpy").version
    assert all(pins[name.split("==")[0].lower()] == name.split("==")[1] for name in plan.payload.python_constraints)
    assert platforms(plan)[0] == "manylinux_2_36_x86_64" and platforms(plan)[-2:] == ["manylinux_2_17_x86_64", "manylinux2014_x86_64"]


def test_requirements_join_the_tag_the_build_info_and_the_final_stage(plan_for, tmp_path):
    wanted = tmp_path / "requirements.txt"
    wanted.write_text("transformers==5.24.0 --hash=sha256:" + "0" * 64 + "\n")
    plan = plan_for(torch_version="2.13.0", methods={"torch": "wheel", "openblas": "distro"}, requirements=wanted)
    assert plan.release_tag.endswith(f"-requirements.{plan.requirements.sha256[:8]}")
    assert build_info(plan)["requirements"]["file"] == "requirements.txt"
    assemble_context(plan, plan.stage("final"), tmp_path / "final", {})
    dockerfile = (tmp_path / "final" / "Dockerfile").read_text()
    assert (
        "--constraint /tmp/torchstack-held.txt --constraint /tmp/requirements/resolved.txt --requirement /tmp/requirements/requirements.txt"
        in dockerfile
    )
    assert '"/opt/venv/bin/pip" check' in dockerfile
    assert (tmp_path / "final" / "requirements" / "requirements.txt").read_text() == wanted.read_text()


def test_requirements_without_a_final_stage_or_a_file_are_one_line(plan_for, tmp_path):
    wanted = tmp_path / "requirements.txt"
    wanted.write_text("transformers\n")
    with pytest.raises(UsageProblem, match="--requirements installs into the final image: it needs --build-type full, not tools"):
        plan_for(build_type="tools", requirements=wanted)
    with pytest.raises(UsageProblem, match=r"--requirements .*missing.txt: No such file or directory"):
        plan_for(requirements=tmp_path / "missing.txt")
