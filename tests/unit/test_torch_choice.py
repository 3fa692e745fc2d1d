"""The torch release a plan takes from an index: the newest catalogued one whose CPU wheel is offered,
said with why, read from a PEP 503 listing served on loopback (names only: no wheel is needed to plan)."""

from __future__ import annotations

import base64
import importlib.util
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.unit.test_plugins import run_cli
from torchstack.base.errors import UsageProblem
from torchstack.catalog.component import TorchRelease
from torchstack.catalog.model import ROOT


def wheel(version: str, python: str, arch: str = "x86_64") -> str:
    return f"torch-{version}-cp{python}-cp{python}-manylinux_2_28_{arch}.whl"


@pytest.fixture
def index():
    """A simple index on loopback whose torch page lists the names given to `serve`; its URL."""
    listed: list[str] = []
    asked: list[str | None] = []  # each request's Authorization header

    class Listing(BaseHTTPRequestHandler):
        def do_GET(self):
            asked.append(self.headers.get("Authorization"))
            if self.path != "/simple/torch/":
                self.send_error(404)
                return
            links = "".join(f'<a href="/files/{name.replace("+", "%2B")}#sha256=00">{name}</a>\n' for name in listed)
            body = f"<!DOCTYPE html><html><body>\n{links}</body></html>".encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Listing)
    threading.Thread(target=server.serve_forever, daemon=True).start()

    def serve(*names: str) -> str:
        listed[:] = names
        return f"http://127.0.0.1:{server.server_address[1]}/simple"

    serve.asked = asked

    yield serve
    server.shutdown()
    server.server_close()


def from_index(plan_for, url: str, **fields):
    return plan_for(methods={"torch": "wheel", "openblas": "distro"}, torch_wheel=url, arch="x86_64", **fields)


def test_the_newest_catalogued_release_offered_is_taken_on_the_debian_release_of_its_python(plan_for, index):
    url = index(wheel("2.15.0+cpu", "313"), wheel("2.13.0+cpu", "311"), wheel("2.15.0+cpu", "313", "aarch64"))
    plan = from_index(plan_for, url)
    assert (plan.torch_version, plan.distribution.name) == ("2.15.0", "trixie")
    assert plan.torch_note.startswith(f"the newest catalogued release with a CPU wheel offered: {url} offers it for x86_64 cp313")
    assert "torch-2.15.0-onednn-openblas.distro-torch.wheel" in plan.release_tag
    assert "filelock==4.3.1" in plan.payload.torch_constraints  # 2.15.0's own pins, not 2.13.0's


def test_only_an_older_wheel_for_an_older_python_gives_that_release_on_bookworm_and_says_why(plan_for, index):
    url = index(wheel("2.13.0+cpu", "311"), wheel("2.15.0+cpu", "313", "aarch64"))
    plan = from_index(plan_for, url)
    assert (plan.torch_version, plan.distribution.name) == ("2.13.0", "bookworm")
    assert f"{url} offers it for x86_64 cp311; newer 2.15.0, 2.14.1, 2.14.0: no x86_64 wheel for Python 3.13 or 3.11" in plan.torch_note
    assert plan.distribution_note.startswith("bookworm (Python 3.11): the newest Debian release whose Python the torch wheel is for")
    assert "filelock==4.2.11" in plan.payload.torch_constraints


def test_a_newer_release_the_catalog_lacks_is_named_and_not_taken(plan_for, index):
    url = index(wheel("2.16.0+cpu", "313"), wheel("2.16.0.dev20261120+cpu", "313"), wheel("2.15.0+cpu", "313"))
    plan = from_index(plan_for, url)
    assert plan.torch_version == "2.15.0"
    assert plan.torch_note.endswith(f"; offered but not yet catalogued: 2.16.0 ({url})")
    older = from_index(plan_for, url, torch_version="2.15.0")  # asked for: still named
    assert older.torch_note.startswith(f"--torch-version: {url} offers it for x86_64 cp313") and "2.16.0 (" in older.torch_note


def test_a_login_in_the_index_url_is_sent_as_pip_sends_it_and_never_shown(plan_for, index):
    url = index(wheel("2.15.0+cpu", "313"))
    private = url.replace("http://", "http://ci-bot:s3cr%40t@")
    plan = from_index(plan_for, private)
    assert plan.torch_version == "2.15.0" and index.asked[-1] == "Basic " + base64.b64encode(b"ci-bot:s3cr@t").decode()
    # shown as pip shows it (base/redact.py): the user named, the password as ****
    assert f"{url.replace('http://', 'http://ci-bot:****@')} offers it" in plan.torch_note and "s3cr" not in plan.torch_note


def test_a_backends_plugin_holds_the_default_to_a_release_it_pairs_with(plan_for, index):
    url = index(*(wheel(f"{v}+cpu", "313") for v in ("2.15.0", "2.14.1", "2.14.0")))
    plan = from_index(plan_for, url, backend="zendnn")
    assert plan.torch_version == "2.14.0" and [p.requirement for p in plan.plugins] == ["zentorch==2.14.0.1"]
    assert "no pinned zentorch pairs with 2.15.0; no pinned zentorch pairs with 2.14.1" in plan.torch_note


def test_the_wheelhouse_is_asked_before_the_index(plan_for, index, offered):
    offered(wheel("2.13.0+cpu", "311"))
    url = index(wheel("2.14.0+cpu", "313"))
    plan = from_index(plan_for, url)
    assert plan.torch_version == "2.14.0" and plan.distribution.name == "trixie"
    assert from_index(plan_for, url, distribution="bookworm").torch_version == "2.13.0"
    assert (
        "a local wheelhouse (pip's find-links) offers it for x86_64 cp311" in from_index(plan_for, url, distribution="bookworm").torch_note
    )


def test_no_index_answering_says_what_was_tried_and_what_it_fell_back_to(plan_for, index):
    url = index()[: -len("/simple")] + "/nothing-here"
    plan = from_index(plan_for, url)
    assert (plan.torch_version, plan.distribution.name) == ("2.15.0", "trixie")
    assert plan.torch_note.startswith("the newest catalogued release; no index offered one for this image (a local wheelhouse")
    assert f"pip's find-links) holds no torch wheel; {url} answered HTTP 404 Not Found)" in plan.torch_note
    zendnn = from_index(plan_for, url, backend="zendnn")  # the newest release a zentorch pairs with
    assert zendnn.torch_version == "2.14.0" and zendnn.torch_note.startswith("the newest catalogued release zentorch pairs with; ")
    assert zendnn.torch_note.endswith("; no pinned zentorch pairs with 2.15.0; no pinned zentorch pairs with 2.14.1")


def test_a_release_the_catalog_lacks_is_refused_in_one_line_before_any_work():
    result = run_cli("--dry-run", "--torch-from", "wheel", "--torch-version", "2.16.0")
    assert result.returncode == 2
    assert result.stderr == (
        "torchstack: error: torch 2.16.0 is not a release the catalog knows (newest: 2.15.0; known: 2.15.0, 2.14.1, 2.14.0, "
        "2.13.0, 2.8.0): its pins are not resolved; add it with scripts/catalog-torch.py (docs/maintaining/torch-releases.md)\n"
    )


def test_a_wheel_of_a_release_the_catalog_lacks_is_refused(plan_for, tmp_path):
    (tmp_path / "torch-2.12.0+cpu-cp313-cp313-manylinux_2_28_x86_64.whl").write_bytes(b"")
    with pytest.raises(UsageProblem, match=r"^torch 2.12.0\+cpu is not a release the catalog knows"):
        plan_for(methods={"torch": "wheel"}, torch_wheel=f"https://example.org/{wheel('2.12.0+cpu', '313')}")


@pytest.mark.parametrize("python", ["3.11", "3.13"])
def test_each_releases_pins_satisfy_its_own_requires_dist(catalog, python):
    """Every requirement of the release's Requires-Dist that applies on Linux with a Debian release's
    Python is met by exactly one pin; pins are one per package."""
    for release in catalog.torch_releases.values():
        pins = {canonicalize_name(p.split("==")[0]): p.split("==")[1] for p in release.runtime_requirements}
        assert len(pins) == len(release.runtime_requirements), release.name
        for text in release.requires_dist:
            requirement = Requirement(text)
            if requirement.marker and not requirement.marker.evaluate({"python_version": python, "platform_system": "Linux"}):
                continue
            name = canonicalize_name(requirement.name)
            assert name in pins, f"torch {release.name}: {text} has no pin"
            assert requirement.specifier.contains(pins[name]), f"torch {release.name}: {text} excludes the pin {pins[name]}"


def test_the_catalog_has_the_current_releases_newest_first(catalog):
    names = list(catalog.torch_releases)
    assert names[:3] == ["2.15.0", "2.14.1", "2.14.0"] and "2.13.0" in names
    assert all("3.13" in r.pythons for r in catalog.torch_releases.values())


def _script():
    spec = importlib.util.spec_from_file_location("catalog_torch", ROOT / "scripts" / "catalog-torch.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_maintainers_script_leaves_cuda_out_and_writes_an_entry_the_catalog_reads():
    script = _script()
    metadata = "\n".join(
        [
            "Requires-Dist: filelock",
            "Requires-Dist: sympy>=1.13.3",
            'Requires-Dist: nvidia-cudnn-cu13==9.26.0.51; platform_system == "Linux"',
            'Requires-Dist: triton~=3.9.0; platform_system == "Linux"',
            'Requires-Dist: cuda-toolkit[cublas]==13.2.2; platform_system == "Linux"',
            'Requires-Dist: pyyaml; extra == "pyyaml"',
        ]
    )
    kept, cuda = script.requires_dist(metadata)
    assert kept == ["filelock", "sympy>=1.13.3"] and cuda == ["cuda-toolkit", "nvidia-cudnn-cu13", "triton"]
    files = [{"filename": wheel("2.16.0", p, a)} for p in ("311", "313", "314") for a in ("x86_64", "aarch64")]
    files += [{"filename": wheel("2.16.0", "315", "x86_64")}, {"filename": "torch-2.16.0-cp314-cp314t-manylinux_2_28_x86_64.whl"}]
    assert script.pythons(files) == ["3.11", "3.13", "3.14"]
    found = {
        "released": "2026-12-22",
        "pythons": ["3.11", "3.13"],
        "requires_dist": kept,
        "requires_dist_from": "PyPI",
        "runtime_requirements": ["filelock==4.3.1", "mpmath==1.3.0", "sympy==1.14.0"],
        "resolved": "pip",
    }
    import yaml

    entry = yaml.safe_load("releases:\n" + script.as_yaml("2.16.0", found))["releases"]["2.16.0"]
    assert TorchRelease.model_validate({"name": "2.16.0", **entry}).runtime_requirements[0] == "filelock==4.3.1"
