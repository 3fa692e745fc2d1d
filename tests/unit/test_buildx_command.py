"""The `docker buildx build` command a stage gets, on the default builder or a named one (a remote
or Kubernetes builder made with `docker buildx create`), and --buildx-builder's one-line refusal."""

from pathlib import Path

from click.testing import CliRunner

from torchstack.cli import make_cli
from torchstack.engines.buildjob import BuildJob
from torchstack.engines.buildkit import buildx_command, ccache_dockerfile


def job(context: str, tag: str, platform: str = "linux/amd64", labels: dict | None = None, **given) -> BuildJob:
    return BuildJob(Path(context), tag, platform, labels or {}, "stage", Path("/log"), **given)


def test_a_stage_is_built_and_loaded_back_with_its_secrets_and_labels():
    secrets = {"ca-bundle": Path("/run/ca.pem")}
    command = buildx_command(job("/ctx/libs", "torchstack-libs:t", "linux/arm64", labels={"a": "1"}, secrets=secrets))
    assert command == [
        "docker",
        "buildx",
        "build",
        "--progress=plain",
        "--load",
        "--tag",
        "torchstack-libs:t",
        "--platform",
        "linux/arm64",
        "--network",
        "host",
        "--secret",
        "id=ca-bundle,src=/run/ca.pem",
        "--label",
        "a=1",
        "/ctx/libs",
    ]


def test_only_a_stage_pushed_for_other_hosts_carries_its_cache_record():
    """BuildKit's inline cache record holds the times its layers were made: only the stages
    --push-stages sends for another host's --cache-from carry it."""
    plain = buildx_command(job("/ctx/libs", "t:1"))
    pushed = buildx_command(job("/ctx/libs", "t:1", inline_cache=True))
    assert "--cache-to" not in plain and pushed[pushed.index("--cache-to") + 1] == "type=inline"


def test_with_a_cache_registry_each_stage_imports_its_image_there_as_cache():
    command = buildx_command(job("/ctx/tools", "torchstack-tools:x", cache_from=("ghcr.io/acme/torchstack-tools:x",)))
    assert command[command.index("--cache-from") + 1] == "type=registry,ref=ghcr.io/acme/torchstack-tools:x"


def test_a_named_builder_builds_it_and_the_image_still_comes_back_here():
    command = buildx_command(job("/ctx/final", "t:1", nocache=True), builder="fleet")
    assert command[command.index("--builder") + 1] == "fleet" and "--load" in command and "--no-cache" in command


def test_a_builder_name_with_the_legacy_builder_is_refused(catalog):
    result = CliRunner().invoke(make_cli(catalog), ["--dry-run", "--builder", "docker", "--buildx-builder", "fleet"])
    assert result.exit_code == 2 and "use it with --builder buildx" in result.output, result.output


def test_a_builder_name_picks_buildkit(catalog, monkeypatch):
    monkeypatch.setattr("torchstack.engines.buildkit.builder_exists", lambda name: name == "fleet")
    result = CliRunner().invoke(make_cli(catalog), ["--dry-run", "--backend", "onednn", "--buildx-builder", "fleet"])
    assert result.exit_code == 0 and "builder       buildkit (" in result.output, result.output


def test_the_compiler_cache_moves_in_from_the_context_and_out_into_the_output():
    seed = ccache_dockerfile("in", "torchstack-os:bookworm-amd64", "torchstack-ccache-x86_64", "/ccache")
    assert "RUN --mount=type=cache,id=torchstack-ccache-x86_64,target=/ccache --mount=type=bind,target=/seed cp -a /seed/. /ccache/" in seed
    dump = ccache_dockerfile("out", "torchstack-os:bookworm-amd64", "torchstack-ccache-x86_64", "/ccache")
    assert "cp -a /ccache/. /moved/" in dump and dump.endswith("COPY --from=move /moved /\n")
    for text in (seed, dump):
        assert text.startswith("FROM torchstack-os:bookworm-amd64 AS move\nARG NONCE\n") and '"$NONCE"' in text


def test_the_compiler_cache_folder_needs_buildkit(catalog, monkeypatch):
    # The builder is the question here, not where the wheel comes from: --dry-run would download it.
    monkeypatch.setattr("torchstack.run.settle._resolve_wheel", lambda catalog, request, plan: (request, []))
    refused = CliRunner().invoke(make_cli(catalog), ["--dry-run", "--builder", "docker", "--ccache-dir", "ccache"])
    assert refused.exit_code == 2 and "--ccache-dir moves BuildKit's compiler cache: use it with --builder buildx" in refused.output
    picked = CliRunner().invoke(make_cli(catalog), ["--dry-run", "--torch-from", "wheel", "--ccache-dir", "ccache"])
    assert picked.exit_code == 0 and "builder       buildkit (" in picked.output, picked.output


def test_a_cache_registry_without_a_host_is_one_line(catalog):
    result = CliRunner().invoke(make_cli(catalog), ["--dry-run", "--cache-from", "acme"])
    assert result.exit_code == 2 and "--cache-from 'acme': expected HOST[:PORT]/NAMESPACE" in result.output, result.output
    shown = CliRunner().invoke(make_cli(catalog), ["--dry-run", "--cache-from", "ghcr.io/acme"])
    assert "cache from    ghcr.io/acme: each stage image above" in shown.output, shown.output
