"""PyTorch's own tests in the dev image of a source build: which run, and how (they cannot run here:
no PyTorch source is compiled on these machines)."""

from tests.image.dev.test_dev import TEST_DEPS, own_tests_commands
from torchstack.base import layout


def test_an_onednn_image_runs_the_linalg_mkldnn_and_transformer_tests_offline(catalog):
    commands = own_tests_commands(
        catalog.components["torch"], catalog.torch_releases["2.13.0"].runtime_requirements, mkldnn=True, tree="/opt/torchstack/src/pytorch"
    )
    install, *runs = commands
    assert install.startswith(
        f"{layout.VENV}/bin/pip install --quiet --no-index --find-links {layout.DOWNLOADS_DIR} "
        f"--target {TEST_DEPS} {layout.WHEELS_DIR}/torch-*.whl "
    )
    assert install.endswith(" pytest==7.3.2 expecttest==0.3.0 hypothesis==6.56.4") and " sympy==" in install
    assert [r.split(" -m pytest -q -p no:cacheprovider ")[1] for r in runs] == [
        "test_linalg.py -k 'dot or vdot or matmul or addmm or addmv or addbmm or baddbmm'",
        "test_mkldnn.py",
        "test_transformers.py -k cpu",
    ]
    assert all(r.startswith("cd /opt/torchstack/src/pytorch/test && PYTHONPATH=") for r in runs)


def test_an_openblas_image_has_no_mkldnn_to_test(catalog):
    runs = own_tests_commands(catalog.components["torch"], (), mkldnn=False, tree="/t")[1:]
    assert not any("test_mkldnn.py" in r for r in runs) and len(runs) == 2


def test_the_dev_stage_downloads_what_the_tests_need_only_when_it_compiles_torch(plan_for):
    compiled = plan_for(backend="onednn").component("torch")
    assert {"pytest==7.3.2", "expecttest==0.3.0", "hypothesis==6.56.4", "sympy==1.14.0"} <= set(compiled.downloads)
    wheel = plan_for(backend="onednn", methods={"torch": "wheel"}, torch_wheel="index").component("torch")
    assert not any(d.startswith(("pytest", "expecttest", "hypothesis")) for d in wheel.downloads)
