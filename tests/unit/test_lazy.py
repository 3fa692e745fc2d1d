"""--lazy soci, without an engine: its refusals (one line, exit 2, before any work), where a SOCI index
is looked for in a registry (the referrers API, else the referrers tag), and a containerd of the
toolkit's own that touches none of the host's paths. The index made, pushed, signed and started
lazily: tests/engine/test_lazy.py."""

from __future__ import annotations

import http.server
import json
import threading

import pytest
from click.testing import CliRunner

from torchstack.base.errors import HostNotReady
from torchstack.cli import make_cli
from torchstack.publishing import lazy
from torchstack.registries import registry

IMAGE = "sha256:" + "a" * 64
INDEX = "sha256:" + "b" * 64
SOCI = {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": INDEX, "size": 100, "artifactType": lazy.SOCI_INDEX}
OTHER = {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": "sha256:" + "c" * 64, "size": 9, "artifactType": "x/y"}


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--lazy", "soci"], "--lazy soci indexes what --push sends: add --push and --registry"),
        (
            ["--lazy", "soci", "--push", "--registry", "registry.example/ml", "--compression", "zstd"],
            "--lazy soci is made and tried with gzip layers only, not zstd: drop --compression zstd",
        ),
        (["--lazy", "estargz", "--push", "--registry", "registry.example/ml"], "Invalid value for '--lazy'"),
    ],
)
def test_lazy_is_refused_in_one_line_before_any_work(catalog, args, said):
    result = CliRunner().invoke(make_cli(catalog), ["--torch-from", "wheel", "--openblas-from", "distro", *args])
    assert result.exit_code == 2, result.output
    assert said in result.output, result.output


def test_a_host_without_socis_tools_or_root_is_told_what_to_do(monkeypatch, tmp_path):
    monkeypatch.setattr(lazy, "TOOLS_DIR", tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(HostNotReady, match=r"missing soci, containerd, ctr, .* bash scripts/setup-host.sh --lazy installs them") as refused:
        lazy.check("soci", push=True, compression="gzip")
    assert refused.value.exit_code == 2
    monkeypatch.setattr(lazy, "tool", lambda name: f"/somewhere/{name}")
    monkeypatch.setattr(lazy.os, "geteuid", lambda: 1000)
    with pytest.raises(HostNotReady, match="runs a containerd of its own to index the pushed image, which needs root"):
        lazy.check("soci", push=True, compression="gzip")
    monkeypatch.setattr(lazy.os, "geteuid", lambda: 0)
    lazy.check("soci", push=True, compression="gzip")


class Referrers(http.server.BaseHTTPRequestHandler):
    """A registry with the referrers API (`api`), or without it and with the referrers tag (`tag`), or neither."""

    mode = "api"

    def log_message(self, *args):
        pass

    def do_GET(self):
        listed = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": [OTHER, SOCI]}
        api = self.path == f"/v2/ml/torchstack/referrers/{IMAGE}" and self.mode == "api"
        tag = self.path == f"/v2/ml/torchstack/manifests/{IMAGE.replace(':', '-')}" and self.mode == "tag"
        body = json.dumps(listed).encode() if api or tag else b"404 page not found"
        self.send_response(200 if api or tag else 404)
        self.send_header("Content-Type", "application/vnd.oci.image.index.v1+json" if api or tag else "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.mark.parametrize(("mode", "found"), [("api", [INDEX]), ("tag", [INDEX]), ("neither", [])])
def test_a_soci_index_is_found_through_the_referrers_api_else_the_referrers_tag(monkeypatch, tmp_path, mode, found):
    monkeypatch.setenv("REGISTRY_AUTH_FILE", str(tmp_path / "none.json"))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), type("Handler", (Referrers,), {"mode": mode}))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        where = registry.Registry(f"127.0.0.1:{server.server_address[1]}")
        assert lazy.indexes(where, "ml/torchstack", IMAGE) == found
    finally:
        server.shutdown()


def test_the_toolkits_containerd_keeps_everything_under_its_own_folder(tmp_path):
    config = lazy.containerd_config(tmp_path, snapshotter=tmp_path / "soci.sock")
    paths = [word.strip('"') for line in config.splitlines() for word in line.split() if word.startswith('"/')]
    assert paths and all(path.startswith(f"{tmp_path}/") for path in paths), paths
    assert "io.containerd.grpc.v1.cri" in config, "no Kubernetes service of its own"
    assert '[proxy_plugins.soci]\n  type = "snapshot"' in config


def test_soci_keeps_its_artifacts_in_a_folder_of_the_build_not_the_hosts(tmp_path):
    command = lazy.private_soci(tmp_path, "--address", "x.sock", "create", "IMAGE")
    assert command[:4] == ["unshare", "--mount", "--propagation", "private"]
    assert str(tmp_path / "soci") in command and (tmp_path / "soci").is_dir()
    assert command[-4:] == ["--address", "x.sock", "create", "IMAGE"]


def test_an_index_that_fails_after_the_release_is_pushed_says_the_release_is_out_without_it(monkeypatch, tmp_path):
    """soci runs once the release is in the registry (it reads the image from there): when it
    fails, the one line says what is published and what the same command again does."""
    from torchstack.publishing import releases
    from torchstack.reports.build_report import Published
    from torchstack.request.run_settings import RunOptions

    monkeypatch.setenv("REGISTRY_AUTH_FILE", str(tmp_path / "none.json"))

    def failing(pinned, note):
        raise lazy.IndexFailed(f"pushing the SOCI index of {pinned}: refused")

    monkeypatch.setattr(lazy, "publish", failing)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), type("Handler", (Referrers,), {"mode": "neither"}))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    host = f"127.0.0.1:{server.server_address[1]}"
    try:
        with pytest.raises(lazy.IndexFailed) as failed:
            releases.lazy_index(RunOptions(lazy="soci"), f"{host}/ml/torchstack:r26.11", IMAGE, print, Published())
    finally:
        server.shutdown()
    assert str(failed.value) == (
        f"pushing the SOCI index of {host}/ml/torchstack@{IMAGE}: refused; {host}/ml/torchstack@{IMAGE} is published without "
        "a SOCI index (nodes pull it whole): the same command again makes the index, and does not push or sign the release again"
    )
