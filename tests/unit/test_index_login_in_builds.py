"""A package index's login reaches no layer with any builder: BuildKit and Podman's buildah mount pip's
configuration into the steps that reach the index, and Docker's legacy builder, which could only copy it
into the build context (a layer of the engine's build cache), is refused such an index in one line
(exit 2) before any work; an index without a login builds with it as before."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from tests.memory_engine import memory_engine
from torchstack.base.errors import UsageProblem
from torchstack.base.reproducible import STEP_ENVIRONMENT
from torchstack.catalog.wheels import pip_conf_text
from torchstack.cli import make_cli
from torchstack.engines import oci_build
from torchstack.engines.buildjob import BuildJob, BuildProgress, BuildResult
from torchstack.engines.docker_engine import DockerEngine
from torchstack.engines.engine import Builder, BuildRun
from torchstack.engines.podman_engine import PodmanEngine
from torchstack.making import building
from torchstack.making.render import BuildSecrets, assemble_context, render_dockerfile
from torchstack.reports.progress import StageReport
from torchstack.request.run_settings import RunOptions
from torchstack.run import pipeline
from torchstack.run.settle import Settled

SECRET = "s3cret-token"
LOGIN_INDEX = f"https://ci:{SECRET}@pypi.example/simple"
PLAIN_INDEX = "https://pypi.example/simple"
DOCKER = DockerEngine("docker", "unix:///nowhere/docker.sock", "test", version="20.10.24")
PODMAN = PodmanEngine("podman", "unix:///nowhere/podman.sock", "test", version="4.3.1")


def pip_conf(tmp_path: Path, index: str = LOGIN_INDEX) -> Path:
    conf = tmp_path / "secrets" / "pip.conf"
    conf.parent.mkdir(mode=0o700, exist_ok=True)
    conf.write_text(pip_conf_text(index))
    return conf


def files_under(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): p.read_text(errors="replace") for p in folder.rglob("*") if p.is_file()}


# Rendering, as each builder takes the secrets.


def test_a_builder_with_secret_mounts_mounts_pips_configuration_and_copies_none(plan_for, tmp_path):
    """Podman's builds render with --builder's legacy word (builder_word: "docker"): mounted secrets, and
    none of BuildKit's own mounts or shell, which buildah is not given."""
    plan = plan_for(builder="docker", methods={"openblas": "distro"})
    secrets = BuildSecrets(pip_conf=pip_conf(tmp_path), mounted=True)
    for name in ("tools", "final"):
        text = render_dockerfile(plan, plan.stage(name), secrets)
        assert "pip.conf" not in text, name
        assert "ENV PIP_CONFIG_FILE=/run/secrets/pip" in text and "RUN --mount=type=secret,id=pip " in text, name
        assert "--mount=type=bind" not in text and "--mount=type=cache" not in text, name
        # As Podman's endpoint is given it: each RUN in exec form, its secret mount kept.
        oci = oci_build.oci_dockerfile(text, STEP_ENVIRONMENT)
        assert 'RUN --mount=type=secret,id=pip ["/bin/bash", "-o", "pipefail", "-c", ' in oci, name
    assemble_context(plan, plan.stage("final"), tmp_path / "final", {}, secrets)
    held = files_under(tmp_path / "final")
    assert "pip.conf" not in held and not [name for name, text in held.items() if SECRET in text]


def test_the_legacy_builder_copies_a_login_free_configuration_into_a_throwaway_stage(plan_for, tmp_path):
    plan = plan_for(builder="docker", methods={"openblas": "distro"})
    secrets = BuildSecrets(pip_conf=pip_conf(tmp_path, PLAIN_INDEX))
    build, runtime = render_dockerfile(plan, plan.stage("final"), secrets).rsplit("\nFROM ", 1)
    assert "COPY pip.conf /tmp/torchstack-pip.conf" in build and "--mount=type=secret" not in build
    assert "pip.conf" not in runtime
    assemble_context(plan, plan.stage("final"), tmp_path / "final", {}, secrets)
    assert (tmp_path / "final" / "pip.conf").read_text() == pip_conf_text(PLAIN_INDEX)


# Podman's build endpoint: the secrets sent beside the context, never in it.


class _Endpoint:
    """podman-py's client as oci_build.stream drives it: what each build posts, kept."""

    posted: list[dict] = []

    def __init__(self, base_url, version):
        self.api = self

    def post(self, path, params, data, headers, stream):
        self.posted.append({"path": path, "params": dict(params), "archive": data.read()})
        return SimpleNamespace(raise_for_status=lambda: None, iter_lines=lambda: iter(()), close=lambda: None)

    def close(self):
        pass


def _podman_build(monkeypatch, context: Path, secrets: dict[str, Path]) -> dict:
    monkeypatch.setattr(oci_build.podman, "PodmanClient", _Endpoint)
    _Endpoint.posted = []
    job = BuildJob(context, None, "linux/amd64", {}, "final", context / "log", file_date=1, secrets=secrets)
    list(oci_build.stream(PODMAN.url, PODMAN.version, job))
    (posted,) = _Endpoint.posted
    return posted


def test_podman_gets_the_secrets_as_its_endpoint_takes_them_outside_the_context(monkeypatch, tmp_path):
    context = tmp_path / "context"
    context.mkdir()
    (context / "Dockerfile").write_text("FROM base\nRUN --mount=type=secret,id=pip cat /run/secrets/pip\n")
    conf = pip_conf(tmp_path)
    posted = _podman_build(monkeypatch, context, {"pip": conf})
    # podman-remote's way: the file in the archive by a name of its own, which the service moves out of
    # the context it unpacked before the build starts.
    assert json.loads(posted["params"]["secrets"]) == ["id=pip,src=.torchstack-secret-pip"]
    with tarfile.open(fileobj=io.BytesIO(posted["archive"])) as tar:
        member = tar.getmember(".torchstack-secret-pip")
        assert tar.extractfile(member).read() == conf.read_bytes() and member.mode == 0o600
        assert {"Dockerfile", "Dockerfile.oci"} <= set(tar.getnames())
    assert sorted(files_under(context)) == ["Dockerfile", "Dockerfile.oci"], "no copy of the secret is left in the context"

    plain = _podman_build(monkeypatch, context, {})
    assert "secrets" not in plain["params"]
    with tarfile.open(fileobj=io.BytesIO(plain["archive"])) as tar:
        assert not [name for name in tar.getnames() if "secret" in name]


# The stages' building: each builder gets the secrets as it takes them.


class _Recording(Builder):
    """A builder that builds nothing: it keeps each job and what its context held."""

    def build(self, job: BuildJob) -> BuildResult:
        self.jobs.append((job, files_under(job.context)))
        return BuildResult(image_id="sha256:0", seconds=0.0, cached=False)


class _Mounting(_Recording):
    mounts_secrets = True


def _build_every_stage(monkeypatch, tmp_path, plan, kind: type[_Recording], conf: Path) -> list:
    monkeypatch.setenv("TORCHSTACK_CACHE", str(tmp_path / "cache"))
    engine = memory_engine()
    for stage in plan.stages:
        engine.held.add(stage.image)
    builder = kind(None, engine)
    object.__setattr__(builder, "jobs", [])
    contexts = tmp_path / "contexts"
    contexts.mkdir(mode=0o700)
    view = SimpleNamespace(start=lambda report: BuildProgress(), line=lambda *said: None, note=lambda *said: None)
    reports = [StageReport(stage=s.name, image=s.image, tags=[s.image]) for s in plan.stages]
    run = BuildRun(builder, contexts, tmp_path / "log", view.note)
    building.build_stages(run, plan, RunOptions(), reports, view, {}, BuildSecrets(pip_conf=conf))
    return builder.jobs


def test_a_builder_with_secret_mounts_is_given_them_and_no_context_holds_them(monkeypatch, tmp_path, plan_for):
    plan = plan_for(builder="docker", methods={"openblas": "distro"})
    conf = pip_conf(tmp_path)
    jobs = _build_every_stage(monkeypatch, tmp_path, plan, _Mounting, conf)
    assert [job.stage for job, _ in jobs] == [s.name for s in plan.stages]
    for job, held in jobs:
        assert job.secrets == {"pip": conf}, job.stage
        assert "pip.conf" not in held and not [name for name, text in held.items() if SECRET in text], job.stage
    final = dict((job.stage, held) for job, held in jobs)["final"]["Dockerfile"]
    assert "RUN --mount=type=secret,id=pip " in final


def test_the_legacy_builder_is_given_a_login_free_configuration_in_its_context(monkeypatch, tmp_path, plan_for):
    plan = plan_for(builder="docker", methods={"openblas": "distro"})
    jobs = _build_every_stage(monkeypatch, tmp_path, plan, _Recording, pip_conf(tmp_path, PLAIN_INDEX))
    final = dict((job.stage, held) for job, held in jobs)["final"]
    assert final["pip.conf"] == pip_conf_text(PLAIN_INDEX) and "COPY pip.conf " in final["Dockerfile"]


# The refusal: one line, exit 2, before any work.


def _dry_run(catalog, *args: str, **env: str):
    return CliRunner().invoke(make_cli(catalog), ["--dry-run", "--build-type", "base", *args], env=env)


@pytest.mark.parametrize("given", [("--pip-index-url", LOGIN_INDEX), ()])
def test_the_legacy_builder_with_an_index_login_is_refused_in_one_line(catalog, given):
    env = {} if given else {"PIP_INDEX_URL": LOGIN_INDEX}
    result = _dry_run(catalog, "--engine", "docker", "--builder", "docker", *given, **env)
    assert result.exit_code == 2, result.output
    line = result.output.strip()
    assert "\n" not in line and SECRET not in line and "https://ci:****@pypi.example/simple" in line, line
    assert "legacy builder" in line and "--builder buildx" in line and "--engine podman" in line and "setup-host.sh" in line, line


def test_auto_settled_on_the_legacy_builder_is_refused_too(catalog, monkeypatch):
    monkeypatch.setattr("torchstack.engines.buildkit.available", lambda: False)  # Docker 20.10 without buildx
    result = _dry_run(catalog, "--engine", "docker", "--pip-index-url", f"https://{SECRET}@pypi.example/simple")
    assert result.exit_code == 2 and "https://****@pypi.example/simple carries a login" in result.output, result.output


@pytest.mark.parametrize(
    "args",
    [
        ("--engine", "docker", "--builder", "docker", "--pip-index-url", PLAIN_INDEX),
        ("--engine", "docker", "--builder", "buildx", "--pip-index-url", LOGIN_INDEX),
        ("--engine", "podman", "--pip-index-url", LOGIN_INDEX),
    ],
)
def test_a_login_free_index_or_a_builder_with_secret_mounts_is_not_refused(catalog, args):
    result = _dry_run(catalog, *args)
    assert result.exit_code == 0 and "release tag" in result.output, result.output
    assert SECRET not in result.output


def test_each_engine_refuses_by_its_builders_secret_mounts():
    for index in (LOGIN_INDEX, f"https://{SECRET}@pypi.example/simple"):
        with pytest.raises(UsageProblem, match="carries a login"):
            DOCKER.refuse_index_login("docker", index)
        DOCKER.refuse_index_login("buildx", index)
        PODMAN.refuse_index_login("docker", index)
    DOCKER.refuse_index_login("docker", PLAIN_INDEX)
    DOCKER.refuse_index_login("docker", None)


def test_the_engine_as_it_answered_refuses_before_any_work(monkeypatch, catalog, plan_for):
    """Settled for Podman (CONTAINER_HOST), answered by Docker: its legacy builder is refused the login
    before the run sweeps, pulls or writes anything."""
    plan = plan_for(builder="docker")
    monkeypatch.setattr(pipeline.connection, "connect", lambda chosen: DOCKER)

    def work(*args, **kwargs):
        raise AssertionError("work began before the refusal")

    monkeypatch.setattr(pipeline.sharing, "sweep", work)
    monkeypatch.setattr(pipeline, "_builder", work)
    settled = Settled(request=None, plan=plan, run=RunOptions(pip_index_url=LOGIN_INDEX), pushes=(), notes=(), engine=PODMAN)
    with pytest.raises(UsageProblem, match="carries a login"):
        pipeline.run_build(catalog, settled)
