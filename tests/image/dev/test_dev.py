"""Checks for the dev image: where torch was compiled here, a chosen part of PyTorch's own test suite
(components.yaml: torch's own_tests) passes against it, run from the patched source tree the image keeps."""

import shlex

import pytest

from torchstack.base import layout
from torchstack.catalog import torch_choice

TEST_DEPS = "/tmp/torchstack-own-tests"  # the checks' own folder: the packages PyTorch's tests need


def own_tests_commands(component, pins: tuple[str, ...], mkldnn: bool, tree: str) -> list[str]:
    """Install the wheel the dev stage built, what it pulls in (`pins`: its release's, torch.yaml) and what the tests need (offline,
    from what the dev stage downloaded) into a folder of their own, then one pytest run per chosen
    test file, from the source tree's test folder."""
    wanted = [
        f"{layout.WHEELS_DIR}/torch-*.whl",
        *(shlex.quote(r) for r in (*pins, *component.test_requirements)),
    ]
    install = (
        f"{layout.VENV}/bin/pip install --quiet --no-index --find-links {layout.DOWNLOADS_DIR} --target {TEST_DEPS} {' '.join(wanted)}"
    )
    runs = [
        f"cd {tree}/{test.file.rpartition('/')[0]} && PYTHONPATH={TEST_DEPS} {layout.VENV}/bin/python -m pytest -q "
        f"-p no:cacheprovider {test.file.rpartition('/')[2]}" + (f" -k {shlex.quote(test.select)}" if test.select else "")
        for test in component.own_tests_for(mkldnn)
    ]
    return [install, *runs]


def test_pytorchs_own_tests_pass_against_the_torch_compiled_here(user_host, python, ours, catalog):
    if ours.get("components", {}).get("torch", {}).get("method") != "source":
        pytest.skip("torch comes from a prebuilt wheel: upstream ran its tests")
    mkldnn = python("import torch; print(torch.backends.mkldnn.is_available())").strip() == "True"
    pins = torch_choice.catalogued(catalog, ours["torch_version"]).runtime_requirements
    commands = own_tests_commands(catalog.components["torch"], pins, mkldnn, f"{layout.SOURCE_TREES_DIR}/pytorch")
    for command in commands:
        result = user_host.run(command)
        assert result.rc == 0, f"{command}\n{result.stdout[-3000:]}{result.stderr[-2000:]}"
        print(f"{command.rsplit(' -m pytest ', 1)[-1]}: {result.stdout.strip().splitlines()[-1] if result.stdout.strip() else 'ok'}")
