"""A custom target's component settings are held to what each component accepts (components.yaml
tuning_values), as the catalog's own targets are: one line naming the file, the key and the
values allowed, exit 2, before anything is fetched."""

import pytest
from click.testing import CliRunner

from torchstack.cli import make_cli
from torchstack.request.selection import tuning_problem

CUSTOM = {
    "openblas": (
        "x86_64",
        "openblas",
        "name: mine\narch: x86_64\nflag: -march=haswell\ngcc: '4.9'\nopenblas: {target: 'HASWELL; touch x'}\n",
        "openblas.target: 'HASWELL; touch x' is not a target openblas accepts for x86_64",
    ),
    "acl": (
        "aarch64",
        "onednn-acl",
        "name: mine\narch: aarch64\nflag: -mcpu=neoverse-v1\ngcc: '10.3'\nopenblas: {target: NEOVERSEV1}\n"
        "acl: {arch: armv9-a, multi_isa: true}\n",
        "acl.arch: 'armv9-a' is not a arch acl accepts for aarch64",
    ),
    "zdnn": (
        "s390x",
        "zdnn",
        "name: mine\narch: s390x\nflag: -march=z16\ngcc: '11.1'\nopenblas: {target: Z14}\nzdnn: {march: z13}\n",
        "zdnn.march: 'z13' is not a march zdnn accepts for s390x",
    ),
}


@pytest.mark.parametrize("component", CUSTOM)
def test_a_custom_target_with_a_value_its_component_does_not_accept_is_one_line_exit_2(catalog, component, tmp_path):
    arch, backend, text, said = CUSTOM[component]
    path = tmp_path / "my-cpu.yaml"
    path.write_text(text)
    args = ["plan", "--backend", backend, "--arch", arch, "--build-target", "custom", "--custom-target", str(path)]
    result = CliRunner().invoke(make_cli(catalog), args)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert lines[0].startswith(f"torchstack: error: {path}: {said}"), lines[0]
    assert "; one of " in lines[0]


def test_every_catalog_target_passes_the_same_check(catalog):
    for target in catalog.targets:
        assert tuning_problem(catalog, target) is None, target.name
