"""What makes one request, from the same inputs, give the same images: the images' date from the
inputs (never the clock), every step's files at one time where BuildKit builds, build contexts with
fixed times that leave the user's own files as they are, and the record of what was read."""

import dataclasses
import hashlib
import json
import zipfile
from datetime import datetime, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.local_archive import LocalArchive
from torchstack.base import reproducible
from torchstack.base.errors import UsageProblem
from torchstack.cli import make_cli
from torchstack.engines.buildjob import BuildJob
from torchstack.engines.buildkit import buildx_command, image_id_from
from torchstack.engines.connection import engine_of
from torchstack.making import archive
from torchstack.making.render import assemble_context, render_dockerfile
from torchstack.publishing import provenance
from torchstack.request.metadata import build_info
from torchstack.request.plan import Suite

TOOLKIT = {"version": "0.1.0", "revision": "0123456789ab", "committed": 1795800000}


@pytest.mark.parametrize(
    "environ, toolkit, expected",
    [
        ({"SOURCE_DATE_EPOCH": "1700000000"}, TOOLKIT, (1700000000, "SOURCE_DATE_EPOCH in the environment")),
        ({}, TOOLKIT, (1795800000, "the commit time of torchstack 0123456789ab")),
        ({"SOURCE_DATE_EPOCH": ""}, TOOLKIT, (1795800000, "the commit time of torchstack 0123456789ab")),
        ({}, {"version": "0.1.0", "revision": None, "committed": None}, (reproducible.RELEASED, "the release date of torchstack 0.1.0")),
    ],
)
def test_the_images_date_comes_from_the_inputs_never_the_clock(environ, toolkit, expected):
    assert reproducible.source_date_epoch(toolkit, environ) == expected


def test_a_source_date_epoch_that_is_not_a_number_is_one_line_exit_2(catalog, monkeypatch):
    with pytest.raises(UsageProblem, match="SOURCE_DATE_EPOCH=yesterday: not a whole number"):
        reproducible.source_date_epoch(TOOLKIT, {"SOURCE_DATE_EPOCH": "yesterday"})
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "yesterday")
    result = CliRunner().invoke(make_cli(catalog), ["--dry-run", "--torch-from", "wheel", "--openblas-from", "distro"])
    assert result.exit_code == 2 and "SOURCE_DATE_EPOCH=yesterday" in result.output and "Traceback" not in result.output, result.output


def test_the_dry_run_names_the_images_date_and_whether_this_engine_rebuilds_them_alike(catalog, monkeypatch):
    """A source build's plan: no torch wheel to find (a new host's unit tests have none)."""
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    result = CliRunner().invoke(make_cli(catalog), ["--dry-run"])
    assert result.exit_code == 0, result.output
    assert "dates         SOURCE_DATE_EPOCH 1700000000 (2023-11-14 22:13:20 UTC): SOURCE_DATE_EPOCH in the environment" in result.output
    assert "\nreproducible  " in result.output


@pytest.mark.parametrize(
    "kind, builder, current, said",
    [
        ("docker", "buildx", True, None),
        ("docker", "buildx", False, "this Docker release's BuildKit predates SOURCE_DATE_EPOCH"),
        ("docker", "docker", True, "Docker's legacy builder stamps the build's clock"),
        ("docker", "docker", False, "Docker's legacy builder stamps the build's clock"),
        ("podman", "docker", False, None),
    ],
)
def test_a_current_dockers_buildkit_and_podman_builds_are_claimed_reproducible(kind, builder, current, said):
    """Docker 20.10 stamps the clock whether its legacy builder or its old BuildKit builds; Podman
    builds in the OCI format with every date given (oci_build.py)."""
    engine = engine_of(kind, "unix:///x.sock", "test", version="26.1.5" if current else "20.10.24")
    why = engine.builder(builder).why_not_reproducible()
    assert why is None if said is None else why.startswith(said), why


def test_buildkit_steps_clamp_their_files_and_the_image_keeps_the_plain_shell(plan_for):
    """Each BuildKit step ends by giving what it wrote FILE_EPOCH (with byte code checked by hash);
    the image's own SHELL, which an image built FROM it inherits, is the plain one."""
    plan = plan_for(builder="buildx", methods={"torch": "wheel", "openblas": "distro"}, torch_wheel="index")
    for stage in plan.stages:
        text = render_dockerfile(plan, stage)
        shells = [json.loads(line.removeprefix("SHELL ")) for line in text.splitlines() if line.startswith("SHELL ")]
        assert shells[0][:4] == ["/bin/bash", "-o", "pipefail", "-c"] and shells[0][5] == "step", stage.name
        assert f"SOURCE_DATE_EPOCH={reproducible.FILE_EPOCH} " in shells[0][4]
        assert f"-newermt @{reproducible.FILE_EPOCH}" in shells[0][4] and "/proc/self/mountinfo" in shells[0][4]
        assert shells[-1] == ["/bin/bash", "-o", "pipefail", "-c"], stage.name
        assert text.index("USER 0") > text.index(shells[0][4][:20]), "the clamp is set before the first step"
    legacy = plan_for(methods={"torch": "wheel", "openblas": "distro"}, torch_wheel="index")
    assert all("newermt" not in render_dockerfile(legacy, s) for s in legacy.stages), "the legacy builder's steps are as before"


def test_apt_leaves_no_log_list_or_backup_with_the_clock_in_it(plan_for):
    plan = plan_for(builder="buildx")
    base = render_dockerfile(plan, plan.stage("base"))
    for path in ("/var/lib/apt/lists/*", "/var/log/apt/*", "/var/log/dpkg.log", "/var/cache/ldconfig/aux-cache", "/var/lib/dpkg/*-old"):
        assert path in base, path


def test_buildkit_dates_the_image_with_the_plans_epoch_and_names_it_only_when_asked():
    job = BuildJob(Path("/ctx/base"), None, "linux/amd64", {}, "os", Path("/log"), image_date=1795800000)
    command = buildx_command(job, metadata=Path("/tmp/metadata.json"))
    assert "--tag" not in command
    assert command[command.index("--build-arg") + 1] == "SOURCE_DATE_EPOCH=1795800000"
    assert command[command.index("--metadata-file") + 1] == "/tmp/metadata.json"


def test_buildkit_attaches_no_attestation_of_its_own_whose_clock_would_change_the_image_id():
    """On Docker's containerd image store BuildKit's default provenance (its start and end times)
    goes into an index beside the image, whose digest is the image's ID and pushed digest."""
    command = buildx_command(BuildJob(Path("/ctx/base"), "t:1", "linux/amd64", {}, "os", Path("/log")), no_attestations=True)
    assert "--provenance=false" in command and "--sbom=false" in command


def test_the_image_id_is_what_the_engines_store_calls_it():
    """buildx's metadata names the manifest and the config; the containerd store knows an image by
    the first, overlay2 by the second (its --iidfile gives the config's on both: docker/buildx#3952)."""
    said = {"containerimage.digest": "sha256:" + "aa" * 32, "containerimage.config.digest": "sha256:" + "cc" * 32}
    assert image_id_from(said, containerd_store=True) == "sha256:" + "aa" * 32
    assert image_id_from(said, containerd_store=False) == "sha256:" + "cc" * 32
    # Docker 20.10's BuildKit names the image's ID (its config's digest) containerimage.digest alone (seen here).
    assert image_id_from({"containerimage.digest": "sha256:" + "cc" * 32}, containerd_store=False) == "sha256:" + "cc" * 32


def test_a_context_has_fixed_times_and_the_users_files_keep_theirs(plan_for, tmp_path, monkeypatch):
    """A user's wheel is copied (its time stays); what the toolkit downloaded is linked."""
    state = tmp_path / "state"
    monkeypatch.setenv("TORCHSTACK_CACHE", str(state))
    users = tmp_path / "wheelhouse" / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    users.parent.mkdir()
    with zipfile.ZipFile(users, "w") as wheel:
        wheel.writestr("torch/__init__.py", "")
    before = users.stat().st_mtime
    plan = plan_for(builder="buildx", methods={"torch": "wheel", "openblas": "distro"}, torch_wheel="index")
    plan = dataclasses.replace(plan, torch_wheel_file=users)
    numpy = plan.component("numpy").source.filename
    downloaded = state / "sources" / numpy
    downloaded.parent.mkdir(parents=True)
    downloaded.write_bytes(b"numpy")
    assemble_context(plan, plan.stage("tools"), tmp_path / "tools", {numpy: downloaded})
    assemble_context(plan, plan.stage("dev"), tmp_path / "dev", {})
    assemble_context(plan, plan.stage("final"), tmp_path / "final", {})
    for folder in ("tools", "dev", "final"):
        times = {p.relative_to(tmp_path): p.lstat().st_mtime for p in (tmp_path / folder, *(tmp_path / folder).rglob("*"))}
        assert set(times.values()) == {reproducible.FILE_EPOCH}, times
    assert users.stat().st_mtime == before and users.stat().st_nlink == 1, "the user's wheel is copied, never touched"
    assert (tmp_path / "tools" / "sources" / "numpy" / numpy).stat().st_ino == downloaded.stat().st_ino, "the toolkit's download is linked"


def test_the_provenance_names_the_images_date_the_archives_state_and_the_claim(plan_for):
    plan = plan_for(builder="buildx", methods={"torch": "wheel", "openblas": "distro"}, torch_wheel="index", source_date_epoch=1795800000)
    state = [
        {
            "suite": "bookworm",
            "uri": "http://deb.example/debian/dists/bookworm/InRelease",
            "date": "Sat, 08 Nov 2026 10:00:00 UTC",
            "sha256": "ef" * 32,
        }
    ]
    when = datetime(2026, 11, 25, tzinfo=timezone.utc)
    engine = {"kind": "docker", "version": "29.1.3", "store": "containerd"}
    record = {"base_image_id": "sha256:" + "ab" * 32, "archive": state, "why_not": None, "engine": engine}
    found = provenance.predicate(plan, build_info(plan), record, when, when)
    assert found["buildDefinition"]["externalParameters"]["source_date_epoch"] == 1795800000
    suite = next(d for d in found["buildDefinition"]["resolvedDependencies"] if d["name"] == "debian/bookworm/InRelease")
    assert suite == {
        "name": "debian/bookworm/InRelease",
        "uri": state[0]["uri"],
        "digest": {"sha256": "ef" * 32},
        "annotations": {"date": state[0]["date"]},
    }
    assert found["buildDefinition"]["internalParameters"]["reproducible"] == {"claimed": True, "why_not": None}
    version = found["runDetails"]["builder"]["version"]
    assert (version["engine"], version["image_store"]) == ("docker 29.1.3", "containerd"), "a rebuild must know the engine and its store"
    assert all(isinstance(value, str) for value in version.values()), "SLSA's builder.version is a map of strings (cosign refuses others)"
    legacy = provenance.predicate(plan, build_info(plan), {**record, "why_not": "the clock"}, when, when)
    assert legacy["buildDefinition"]["internalParameters"]["reproducible"] == {"claimed": False, "why_not": "the clock"}


def test_the_archives_state_is_each_suites_signed_index_its_date_and_digest(tmp_path):
    with LocalArchive(tmp_path) as local:
        local.publish("bookworm", "amd64")
        found = archive.suite_state(Suite(local.url, "bookworm", "release"), local.keyring)
        data = (local.root / "dists" / "bookworm" / "InRelease").read_bytes()
    assert found["suite"] == "bookworm" and found["uri"] == f"{local.url}/dists/bookworm/InRelease"
    assert found["date"] and found["date"].endswith("GMT")
    assert found["sha256"] == hashlib.sha256(data).hexdigest()
