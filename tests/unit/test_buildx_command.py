"""The `docker buildx build` command a stage gets, on the default builder or a named one (a remote
or Kubernetes builder made with `docker buildx create`), and --buildx-builder's one-line refusal."""

from pathlib import Path

from click.testing import CliRunner

from torchstack.cli import make_cli
from torchstack.engine import buildx_command


def test_a_stage_is_built_and_loaded_back_with_its_secrets_and_labels():
    command = buildx_command(Path("/ctx/libs"), "torchstack-libs:t", "linux/arm64", {"a": "1"}, False,
                             {"ca-bundle": Path("/run/ca.pem")})  # fmt: skip
    assert command == ["docker", "buildx", "build", "--progress=plain", "--load", "--tag", "torchstack-libs:t",
                       "--platform", "linux/arm64", "--network", "host", "--secret", "id=ca-bundle,src=/run/ca.pem",
                       "--label", "a=1", "/ctx/libs"]  # fmt: skip


def test_a_named_builder_builds_it_and_the_image_still_comes_back_here():
    command = buildx_command(Path("/ctx/final"), "t:1", "linux/amd64", {}, True, {}, builder="fleet")
    assert command[command.index("--builder") + 1] == "fleet" and "--load" in command and "--no-cache" in command


def test_a_builder_name_with_the_legacy_builder_is_refused(catalog):
    result = CliRunner().invoke(make_cli(catalog), ["--dry-run", "--builder", "docker", "--buildx-builder", "fleet"])
    assert result.exit_code == 2 and "use it with --builder buildx" in result.output, result.output


def test_a_builder_name_picks_buildkit(catalog):
    result = CliRunner().invoke(make_cli(catalog), ["--dry-run", "--backend", "onednn", "--buildx-builder", "fleet"])
    assert result.exit_code == 0 and "builder       buildx" in result.output, result.output
