"""--push before any build: what goes where, and the options that cannot work refused in one line.
The pushes themselves run against a real registry in tests/engine/test_registry.py."""

import http.server
import json
import threading

import pytest
from click.testing import CliRunner

from torchstack.base.errors import UsageProblem
from torchstack.cli import make_cli
from torchstack.publishing import joining
from torchstack.registries import registry
from torchstack.request.tags import check_registry, wanted

ARGS = ["--dry-run", "--backend", "onednn-acl", "--release", "r26.11"]
TAG = "r26.11-torch-2.13.0-onednn-acl"


@pytest.mark.parametrize("good", ["ghcr.io/acme", "localhost:5000", "127.0.0.1:5000/ml/team", "registry.example.com/a_b"])
def test_a_registry_is_a_host_and_a_namespace(good):
    assert check_registry(good + "/") == good


@pytest.mark.parametrize("bad", ["acme", "acme/team", "ghcr.io/Acme", "ghcr.io/a//b"])
def test_a_registry_without_a_host_is_refused(bad):
    with pytest.raises(UsageProblem, match="expected HOST"):
        check_registry(bad)


def test_the_release_image_goes_under_the_registry(plan_for):
    plan = plan_for(backend="onednn-acl", release="r26.11")
    assert wanted(plan, "ghcr.io/acme", push_stages=False, checked=True) == [(f"torchstack:{TAG}", f"ghcr.io/acme/torchstack:{TAG}")]


def test_push_stages_sends_each_stage_then_the_release_once(plan_for):
    plan = plan_for(backend="onednn-acl", release="r26.11")
    sent = [remote for _, remote in wanted(plan, "localhost:5000/ml", push_stages=True, checked=True)]
    # The OS image the stages are built on goes first: another host's --cache-from needs that very image.
    stages = [f"localhost:5000/ml/{plan.stage(s).image}" for s in ("base", "libs", "tools", "dev")]
    assert sent == ["localhost:5000/ml/torchstack-os:trixie-arm64", *stages, f"localhost:5000/ml/torchstack:{TAG}"]


def test_a_build_that_stops_early_pushes_its_top_stage(plan_for):
    plan = plan_for(backend="onednn-acl", release="r26.11", build_type="libs")
    assert wanted(plan, "ghcr.io/acme", push_stages=False, checked=True) == [
        (f"torchstack-libs:{TAG}", f"ghcr.io/acme/torchstack-libs:{TAG}")
    ]


def test_dry_run_says_what_would_be_pushed(catalog, monkeypatch):
    asked = []
    monkeypatch.setattr("torchstack.registries.registry.check_push_access", asked.append)
    result = CliRunner().invoke(make_cli(catalog), [*ARGS, "--push", "--registry", "ghcr.io/acme"])
    assert result.exit_code == 0, result.output
    assert f"push          torchstack:{TAG} -> ghcr.io/acme/torchstack:{TAG}" in result.output
    assert asked == [f"ghcr.io/acme/torchstack:{TAG}"], "the registry is asked for a push before any work"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--push"], "--push needs --registry HOST[:PORT]/NAMESPACE"),
        (["--push-stages"], "--push needs --registry"),
        (["--push", "--registry", "acme"], "--registry 'acme': expected HOST[:PORT]/NAMESPACE"),
        (["--push", "--registry", "ghcr.io/acme", "--no-test"], "--push sends only checked images: drop --no-test"),
    ],
)
def test_a_push_that_cannot_work_is_one_line_and_exit_2(catalog, extra, message):
    result = CliRunner().invoke(make_cli(catalog), [*ARGS, *extra])
    assert result.exit_code == 2 and message in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1, result.output


def test_a_list_with_buildkits_attestation_joins_by_its_images_leaving_the_attestation_out(monkeypatch, tmp_path):
    """BuildKit on Docker's containerd image store pushes an index: the image and an attestation
    manifest (platform unknown/unknown), which is no architecture: the join takes the image alone."""
    image, attestation = "sha256:" + "1" * 64, "sha256:" + "2" * 64
    listed = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": image,
                "size": 9,
                "platform": {"architecture": "amd64", "os": "linux"},
            },
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": attestation,
                "size": 9,
                "platform": {"architecture": "unknown", "os": "unknown"},
            },
        ],
    }
    body = json.dumps(listed).encode()

    class Index(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            found = self.path == "/v2/ml/t/manifests/a"
            self.send_response(200 if found else 404)
            self.send_header("Content-Type", listed["mediaType"])
            self.send_header("Content-Length", str(len(body) if found else 0))
            self.end_headers()
            self.wfile.write(body if found else b"")

    monkeypatch.setenv("REGISTRY_AUTH_FILE", str(tmp_path / "none.json"))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Index)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    host = f"127.0.0.1:{server.server_address[1]}"
    try:
        found = joining._images_of(registry.Registry(host), registry.parse(f"{host}/ml/t:a"))
        assert [entry["digest"] for entry in found] == [image]
        with pytest.raises(UsageProblem, match=f"{host}/ml/t:b: not in the registry"):
            joining._images_of(registry.Registry(host), registry.parse(f"{host}/ml/t:b"))
    finally:
        server.shutdown()
