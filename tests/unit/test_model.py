"""The data files load into a valid catalog, and a broken one is one clear error naming file and field."""

import shutil

import pytest

from torchstack.base.errors import DataError
from torchstack.catalog.model import DATA, ROOT, load_catalog


@pytest.fixture
def data_copy(tmp_path):
    shutil.copytree(DATA, tmp_path / "data")
    return tmp_path / "data"


def load(data_dir):
    return load_catalog(data_dir, ROOT / "stages" / "stages.yaml")


def test_shipped_data_is_valid(catalog):
    assert set(catalog.backends) >= {"openblas", "onednn-acl", "onednn", "zdnn"}
    assert [s.name for s in catalog.stages] == ["base", "libs", "tools", "dev", "final"]
    for arch in catalog.architectures:
        assert catalog.find_target("generic", arch) is not None


def test_every_source_is_pinned_with_its_provenance(catalog):
    for component in catalog.components.values():
        for pin in component.versions:
            source = component.source(pin.version)
            assert len(source.sha256) == 64 and source.sha256_from, f"{component.name} {pin.version}"
            assert source.url.startswith("https://"), source.url


def test_broken_yaml_names_the_file_and_line(data_copy):
    (data_copy / "backends.yaml").write_text("openblas:\n  arches: [x86_64\n")
    with pytest.raises(DataError, match=r"backends.yaml: line \d+ not valid YAML"):
        load(data_copy)


def test_a_missing_field_names_the_file_and_the_field(data_copy):
    text = (data_copy / "components.yaml").read_text().replace("  script: build-zdnn.sh\n", "", 1)
    (data_copy / "components.yaml").write_text(text)
    with pytest.raises(DataError, match=r"components.yaml: zdnn\.script: Field required"):
        load(data_copy)


def test_a_bad_checksum_is_refused(data_copy):
    text = (
        (data_copy / "components.yaml").read_text().replace("6761af1d9f5d353ab4f0b7497be2643313b36c8f31caec0144bfef198e71e6ab", "not-a-sha")
    )
    (data_copy / "components.yaml").write_text(text)
    with pytest.raises(DataError, match=r"openblas\.versions\.0\.sha256"):
        load(data_copy)


def test_a_target_with_two_tuning_flags_is_refused(data_copy):
    text = (data_copy / "targets.yaml").read_text().replace("flag: -mcpu=neoverse-v1", "flag: -mcpu=neoverse-v1 -march=armv8.4-a")
    (data_copy / "targets.yaml").write_text(text)
    with pytest.raises(DataError, match=r"targets.yaml: entry \d+: flag: .*exactly one -mcpu=X or -march=X"):
        load(data_copy)


def test_a_backend_naming_an_unknown_component_is_refused(data_copy):
    text = (data_copy / "backends.yaml").read_text().replace("components: [openblas, zdnn,", "components: [openblas, zdnnn,")
    (data_copy / "backends.yaml").write_text(text)
    with pytest.raises(DataError, match="backend zdnn: unknown component 'zdnnn'"):
        load(data_copy)


def test_a_missing_data_file_is_named(data_copy):
    (data_copy / "targets.yaml").unlink()
    with pytest.raises(DataError, match="targets.yaml: file not found"):
        load(data_copy)


def test_an_unpinned_python_package_is_refused(data_copy):
    text = (data_copy / "torch.yaml").read_text().replace('"sympy==1.14.0"', '"sympy>=1.13"', 1)
    (data_copy / "torch.yaml").write_text(text)
    with pytest.raises(DataError, match=r"torch.yaml: 2\.15\.0\.runtime_requirements\.7: String should match"):
        load(data_copy)


def test_build_pins_that_miss_the_sources_own_build_requirements_are_refused(data_copy):
    text = (data_copy / "components.yaml").read_text().replace('"setuptools==80.9.0"', '"setuptools==82.1.0"')
    (data_copy / "components.yaml").write_text(text)
    with pytest.raises(
        DataError, match=r"torch\.\(top level\): Value error, build_requirements do not satisfy .*setuptools>=77.0.0,<82 \(pinned 82.1.0\)"
    ):
        load(data_copy)


def test_every_backend_on_onednn_names_the_kernels_that_prove_it_ran(catalog):
    for backend in catalog.backends.values():
        assert (backend.onednn_kernels is not None) == backend.mkldnn, backend.name
    acl = catalog.backends["onednn-acl"].onednn_kernels
    # oneDNN's "isa:" line names the CPU: ACL's kernels on a Neoverse-N1, its own too on SVE cores.
    assert acl.expected("AArch64 (with Advanced SIMD & floating-point)") == r"\bacl\b"
    assert acl.expected("AArch64 SVE (512 bits)") == r"\bacl\b|sve"
    assert catalog.architectures["aarch64"].qemu_cpu == "neoverse-n1"
