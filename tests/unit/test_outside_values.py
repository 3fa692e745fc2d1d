"""Values from outside (a wheel's metadata, --base-image, an image's label, a custom target's name, a
label Podman's Dockerfile carries) are checked where they enter: refused in one line, exit 2, before a
Dockerfile is written, never pasted into one."""

import re
import subprocess
import sys
import zipfile

import pytest
import yaml
from click.testing import CliRunner

from tests.memory_engine import memory_engine
from tests.unit.test_plugins import run_cli
from torchstack.base.errors import UsageProblem
from torchstack.base.references import check_reference
from torchstack.catalog.model import ROOT
from torchstack.catalog.plugins import PluginSpec, read_wheel
from torchstack.cli import make_cli
from torchstack.engines.oci_build import _quoted, oci_dockerfile
from torchstack.making.sbom import BUILD_INFO_LABEL
from torchstack.verify import rebuild

INJECTED = "RUN id > /tmp/pwned"


def _wheel(folder, filename: str, metadata: str):
    """A real wheel file (a zip with its .dist-info/METADATA and a module) holding `metadata` as it is."""
    path = folder / filename
    dist_info = "-".join(filename.split("-")[:2]) + ".dist-info"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{dist_info}/METADATA", metadata)
        archive.writestr("torchstack_evil/__init__.py", "")
    return path


FOLDED_NAME = f"Metadata-Version: 2.1\nName: torchstack-evil\n {INJECTED} #\nVersion: 0.1.0\n"


def _one_line_exit_2(result) -> str:
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr and result.stderr.count("\n") == 1, result.stderr
    return result.stderr


def test_a_wheel_whose_metadata_folds_a_step_into_its_name_is_refused_before_any_dockerfile(tmp_path):
    wheel = _wheel(tmp_path, "torchstack_evil-0.1.0-py3-none-any.whl", FOLDED_NAME)
    out = tmp_path / "rendered"
    said = _one_line_exit_2(run_cli("render", "--output", str(out), "--plugin-wheel", str(wheel)))
    assert f"--plugin-wheel {wheel.name}: its METADATA Name" in said and "is not a project name (PEP 508)" in said
    assert not list(out.rglob("Dockerfile")), "a Dockerfile was written"


def test_a_folder_with_such_a_wheel_is_refused_not_read_past(plan_for, tmp_path):
    _wheel(tmp_path, "torchstack_evil-0.1.0-py3-none-any.whl", FOLDED_NAME)
    with pytest.raises(UsageProblem, match=r"torchstack_evil-0\.1\.0-py3-none-any\.whl: its METADATA Name 'torchstack-evil\\n"):
        plan_for(plugin_wheels=(str(tmp_path),))


@pytest.mark.parametrize(
    ("filename", "metadata", "said"),
    [
        ("evil-0.1.0-py3-none-any.whl", "Name: evil\nVersion: 0.1.0\n RUN id\n", "its METADATA Version '0.1.0\\n RUN id' is not a version"),
        ("evil-0.1.0-py3-none-any.whl", "Name: evil\nVersion: latest\n", "its METADATA Version 'latest' is not a version (PEP 440)"),
        ("evil-0.1.0-py3-none-any.whl", "Name: other\nVersion: 0.1.0\n", "its METADATA says other 0.1.0, its file name evil 0.1.0"),
        ("evil-0.1.0-py3-none-any.whl", "Name: evil\nVersion: 0.2.0\n", "its METADATA says evil 0.2.0, its file name evil 0.1.0"),
        ("evil-0.1.0-py3-none-any$(id).whl", "Name: evil\nVersion: 0.1.0\n", "only letters, digits and _ . + ! - make up"),
    ],
)
def test_a_wheels_name_and_version_are_what_pep_508_and_440_read(catalog, tmp_path, filename, metadata, said):
    wheel = _wheel(tmp_path, filename, metadata)
    with pytest.raises(UsageProblem, match="^--plugin-wheel .*" + re.escape(said)):
        read_wheel(wheel, catalog, "x86_64", "3.11")


def test_a_wheels_version_reaches_the_plan_normalized(catalog, tmp_path):
    wheel = _wheel(tmp_path, "Torchstack_Evil-1.0.post1-py3-none-any.whl", "Name: Torchstack_Evil\nVersion: 1.0-post1\n")
    read = read_wheel(wheel, catalog, "x86_64", "3.11")
    assert (read.name, read.version, read.key) == ("Torchstack_Evil", "1.0.post1", "torchstack-evil")


def test_a_pin_whose_version_is_not_pep_440_is_refused():
    with pytest.raises(UsageProblem, match=r"--plugin-wheel 'foo==abc': 'abc' is not a version \(PEP 440\)"):
        PluginSpec.parse("foo==abc")
    assert PluginSpec.parse("foo==1.2.3").kind == "pin"


def test_a_base_image_with_a_step_in_it_is_one_line_exit_2_before_any_dockerfile(tmp_path):
    out = tmp_path / "rendered"
    command = [sys.executable, str(ROOT / "build.py"), "render", "--output", str(out), "--build-type", "base"]
    result = subprocess.run([*command, "--base-image", f"debian:12\n{INJECTED}"], capture_output=True, text=True, cwd=ROOT)
    said = _one_line_exit_2(result)
    assert said.startswith("torchstack: error: --base-image 'debian:12\\nRUN id > /tmp/pwned' is not a valid image reference"), said
    assert not list(out.rglob("Dockerfile")), "a Dockerfile was written"


@pytest.mark.parametrize(
    "reference",
    ["debian:12", "debian", "docker.io/library/debian:bookworm-slim", "localhost:5000/my/os:1.0", "[::1]:5000/os", "a__b-c.d/e:T_1"]
    + ["ghcr.io/acme/os@sha256:" + "0" * 64, "registry.example:443/os:1@sha256:" + "ab" * 32],
)
def test_references_docker_reads_are_taken(reference):
    assert check_reference(reference, "--base-image") == reference


@pytest.mark.parametrize(
    "reference",
    ["", "Debian:12", "debian:12 AS x", "debian:12\nRUN id", "debian:12\n", "-debian", "a/-b", "debian:", "debian:.1"]
    + ["os@sha256:" + "0" * 63, "os@sha256:" + "A" * 64, "os@md5:" + "0" * 32, "x" * 256, "debian:" + "1" * 129],
)
def test_references_docker_would_not_read_are_refused_in_one_line(reference):
    with pytest.raises(UsageProblem) as refused:
        check_reference(reference, "--base-image")
    assert "\n" not in str(refused.value) and "is not a valid image reference" in str(refused.value)


def _on_a_base_image() -> dict:
    info = {"target": "generic", "arch": "x86_64", "backend": "onednn", "distribution": "bookworm", "release": "r26.11"}
    return info | {"runtime": "full", "components": {}, "apt_sources": []}


def test_a_rebuild_refuses_a_base_image_label_that_is_not_a_reference(catalog):
    labels = {rebuild.BASE_NAME_LABEL: f"debian:12\n{INJECTED}"}
    with pytest.raises(UsageProblem, match=r"^the image's label org\.opencontainers\.image\.base\.name 'debian:12\\nRUN") as refused:
        rebuild.arguments(catalog, _on_a_base_image(), labels)
    assert "\n" not in str(refused.value)
    taken = rebuild.arguments(catalog, _on_a_base_image(), {rebuild.BASE_NAME_LABEL: "debian:12"})
    assert taken[-2:] == ["--base-image", "debian:12"]


def test_a_rebuild_refuses_a_build_info_label_torchstack_did_not_write(catalog):
    with pytest.raises(UsageProblem, match="records a component 'x --push' this toolkit does not know"):
        rebuild.arguments(catalog, {**_on_a_base_image(), "components": {"x --push": {"method": "source"}}}, {})
    for label in ("not json", "[1, 2]"):
        engine = memory_engine()
        engine.held.add("img", {BUILD_INFO_LABEL: label})
        with pytest.raises(UsageProblem, match="its build-info label .* is not a JSON object"):
            rebuild.recorded(engine, "img")


@pytest.mark.parametrize("name", ["mine\nRUN id", "Mine", "-mine", "my cpu", "mine$(id)"])
def test_a_custom_target_whose_name_is_not_a_tags_is_one_line_exit_2(catalog, tmp_path, name):
    path = tmp_path / "my-cpu.yaml"
    path.write_text(
        yaml.safe_dump({"name": name, "arch": "x86_64", "flag": "-march=haswell", "gcc": "4.9", "openblas": {"target": "HASWELL"}})
    )
    args = ["plan", "--arch", "x86_64", "--build-target", "custom", "--custom-target", str(path)]
    result = CliRunner().invoke(make_cli(catalog), args)
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert lines[0].startswith(f"torchstack: error: {path}: name: ") and "is not a target name" in lines[0], lines[0]


def test_a_custom_target_named_as_tags_spell_it_is_planned(catalog, tmp_path):
    path = tmp_path / "my-cpu.yaml"
    path.write_text("name: my-cpu.v2_1\narch: x86_64\nflag: -march=haswell\ngcc: '4.9'\nopenblas: {target: HASWELL}\n")
    args = ["plan", "--arch", "x86_64", "--build-target", "custom", "--custom-target", str(path)]
    result = CliRunner().invoke(make_cli(catalog), args)
    assert result.exit_code == 0 and "my-cpu.v2_1" in result.output, result.output


def test_podmans_label_quoting_refuses_a_line_break():
    assert _quoted('a "b" $c \\ d\te') == '"a \\"b\\" \\$c \\\\ d\te"'
    for text in ("debian:12\nRUN id", "a\rb", "a\x00b"):
        with pytest.raises(UsageProblem, match="holds a control character") as refused:
            _quoted(text)
        assert "\n" not in str(refused.value)
    with pytest.raises(UsageProblem):
        oci_dockerfile("FROM base\n", {}, {"org.opencontainers.image.base.name": f"debian:12\n{INJECTED}"})
