"""Which engine the toolkit talks to, what Podman refuses, and the lines a missing engine gives."""

import dataclasses
import os
import shutil
import subprocess

import pytest
from click.testing import CliRunner

from torchstack.catalog.model import ROOT
from torchstack.cli import make_cli
from torchstack.engines import connection
from torchstack.engines.connection import choose, engine_of


@pytest.fixture(scope="module")
def cli(catalog):
    return make_cli(catalog)


def one_line(cli, args, env=None):
    result = CliRunner().invoke(cli, args, env=env)
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("torchstack: error: "), result.output
    return result.exit_code, lines[0]


@pytest.fixture
def sockets(tmp_path, monkeypatch):
    """Docker's and root's Podman socket paths, in a folder the test decides is there or not."""
    docker_socket, podman_socket = tmp_path / "docker.sock", tmp_path / "podman" / "podman.sock"
    monkeypatch.setattr(connection, "DOCKER_SOCKET", docker_socket)
    monkeypatch.setattr(connection, "PODMAN_ROOT_SOCKET", podman_socket)
    podman_socket.parent.mkdir()
    return docker_socket, podman_socket


@pytest.mark.parametrize(
    ("wanted", "environ", "present", "expected"),
    [
        # auto: DOCKER_HOST first (a Podman socket path names Podman), then CONTAINER_HOST, then the sockets
        ("auto", {"DOCKER_HOST": "tcp://builder:2375"}, {"podman"}, ("docker", "tcp://builder:2375", "DOCKER_HOST")),
        ("auto", {"DOCKER_HOST": "unix:///run/podman/podman.sock"}, set(), ("podman", "unix:///run/podman/podman.sock", "DOCKER_HOST")),
        ("auto", {"CONTAINER_HOST": "unix:///tmp/p.sock"}, {"docker"}, ("podman", "unix:///tmp/p.sock", "CONTAINER_HOST")),
        ("auto", {}, {"docker", "podman"}, ("docker", "unix://{docker}", "its socket is here")),
        ("auto", {}, {"podman"}, ("podman", "unix://{podman}", "its socket is here, Docker's is not")),
        ("auto", {}, set(), ("docker", "unix://{docker}", "the default")),
        # asked for by name
        ("docker", {}, {"podman"}, ("docker", "unix://{docker}", "--engine docker")),
        ("podman", {}, {"docker"}, ("podman", "unix://{podman}", "--engine podman")),
        ("podman", {"DOCKER_HOST": "unix:///x.sock"}, set(), ("podman", "unix:///x.sock", "--engine podman, DOCKER_HOST")),
    ],
)
def test_the_engine_chosen_and_why(sockets, wanted, environ, present, expected):
    docker_socket, podman_socket = sockets
    for name, path in (("docker", docker_socket), ("podman", podman_socket)):
        if name in present:
            path.touch()
    kind, url, why = expected
    assert choose(wanted, environ, uid=0) == engine_of(kind, url.format(docker=docker_socket, podman=podman_socket), why)


def test_a_rootless_user_gets_podman_under_its_runtime_folder():
    found = choose("podman", {"XDG_RUNTIME_DIR": "/run/user/1000"}, uid=1000)
    assert found.url == "unix:///run/user/1000/podman/podman.sock"
    assert choose("podman", {}, uid=1001).url == "unix:///run/user/1001/podman/podman.sock"


@pytest.mark.parametrize(
    ("version", "kind"),
    [
        ({"Components": [{"Name": "Podman Engine", "Version": "4.3.1"}], "Version": "4.3.1"}, "podman"),
        ({"Components": [{"Name": "Engine", "Version": "20.10.24"}, {"Name": "containerd"}]}, "docker"),
        ({"Version": "20.10.24"}, "docker"),
    ],
)
def test_the_engine_says_what_it_is(version, kind):
    assert connection.kind_of(version) == kind


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--builder", "buildx"], "--builder buildx needs BuildKit, which Podman does not have"),
        (["--ccache-dir", "/tmp/cc"], "--ccache-dir moves BuildKit's compiler cache mount"),
        (["--buildx-builder", "remote"], "--buildx-builder names a BuildKit builder"),
        (["--compression", "zstd", "--push", "--registry", "registry.example/ml"], "--compression zstd copies the release image"),
    ],
)
def test_what_podman_cannot_do_is_refused_before_any_work(cli, args, message):
    code, line = one_line(cli, ["--engine", "podman", "--dry-run", *args])
    assert code == 2 and message in line


def test_with_podman_the_builder_is_the_legacy_api_even_for_a_torch_compile(cli, monkeypatch):
    monkeypatch.setattr("torchstack.engines.buildkit.available", lambda: True)
    result = CliRunner().invoke(cli, ["--engine", "podman", "--dry-run", "--release", "r26.11"])
    assert result.exit_code == 0, result.output
    assert "builder       buildah\n" in result.output
    assert "engine        podman at unix:///run/podman/podman.sock (--engine podman)" in result.output
    docker_default = CliRunner().invoke(cli, ["--engine", "docker", "--dry-run", "--release", "r26.11"])
    assert "builder       buildkit" in docker_default.output


@pytest.mark.parametrize(
    ("buildx", "engine_version", "builder"),
    [
        (True, "26.1.5+dfsg1", "buildkit"),  # Debian 13's docker.io: BuildKit is its default
        (True, "28.2.2", "buildkit"),  # Docker CE on a CI runner
        (True, "20.10.24+dfsg1", "legacy"),  # Debian 12's docker.io: the legacy builder is its default
        (True, None, "legacy"),  # no engine answers: the build itself says so
        (False, "26.1.5+dfsg1", "legacy"),  # no buildx plugin: the engine's own API builder
    ],
)
def test_a_wheel_build_takes_buildkit_where_the_engine_builds_with_it_by_default(cli, monkeypatch, buildx, engine_version, builder):
    class Client:
        def __init__(self, base_url, timeout):
            pass

        def version(self):
            if engine_version is None:
                raise connection.docker.errors.DockerException("no engine")
            return {"Version": engine_version, "Components": [{"Name": "Engine"}]}

    monkeypatch.setattr("torchstack.engines.buildkit.available", lambda: buildx)
    monkeypatch.setattr("torchstack.engines.connection.docker.DockerClient", Client)
    result = CliRunner().invoke(cli, ["plan", "--engine", "docker", "--torch-from", "wheel", "--openblas-from", "distro"])
    assert result.exit_code == 0, result.output
    assert f"builder       {builder}" in result.output  # in the summary's words


def test_the_engine_comes_from_the_environment_too(cli):
    result = CliRunner().invoke(cli, ["plan", "--release", "r26.11"], env={"TORCHSTACK_ENGINE": "podman"})
    assert "engine        podman at" in result.output
    code, line = one_line(cli, ["plan", "--engine", "rkt"])
    assert code == 2 and "Invalid value for '--engine'" in line


@pytest.mark.parametrize(
    ("engine", "says"),
    [
        (
            "docker",
            [
                "no Docker engine answers at unix:///nonexistent/e.sock",
                "dockerd",
                "apt-get install docker.io",
                "scripts/setup-host.sh",
                "--engine podman",
            ],
        ),
        (
            "podman",
            [
                "no Podman engine answers at unix:///nonexistent/e.sock",
                "podman system service --time=0",
                "apt-get install podman",
                "scripts/setup-host.sh --engine podman",
            ],
        ),
    ],
)
def test_a_missing_engine_is_one_line_naming_how_to_get_one(cli, engine, says):
    code, line = one_line(cli, ["test", "--engine", engine, "some-image"], env={"DOCKER_HOST": "unix:///nonexistent/e.sock"})
    assert code == 1
    for part in says:
        assert part in line


def test_an_engine_that_is_not_the_one_asked_for_is_one_line(monkeypatch):
    class Client:
        def __init__(self, base_url, timeout):
            pass

        def version(self):
            return {"Components": [{"Name": "Podman Engine"}], "Version": "4.3.1", "ApiVersion": "1.41", "MinAPIVersion": "1.24"}

        def info(self):
            return {"Driver": "overlay"}

    monkeypatch.setattr(connection.docker, "DockerClient", Client)
    with pytest.raises(connection.UsageProblem, match="--engine docker, but the engine at unix:///x.sock is Podman 4.3.1"):
        connection.connect(engine_of("docker", "unix:///x.sock", "--engine docker, DOCKER_HOST"))
    found = connection.connect(engine_of("docker", "unix:///x.sock", "DOCKER_HOST"))
    said = engine_of("podman", "unix:///x.sock", "DOCKER_HOST; the engine says it is Podman", "4.3.1", "1.41", "1.24", "overlay")
    assert found == said


CONTAINERD_INFO = {"Driver": "overlayfs", "DriverStatus": [["driver-type", "io.containerd.snapshotter.v1"]]}


@pytest.mark.parametrize(
    ("version", "info", "store", "sizes", "buildkit"),
    [
        ("29.1.3", CONTAINERD_INFO, "containerd", "compressed", True),  # a new install of Docker 29
        ("28.5.2+dfsg4", {"Driver": "overlay2", "DriverStatus": [["Backing Filesystem", "extfs"]]}, "overlay2", "unpacked", True),
        ("20.10.24+dfsg1", {"Driver": "overlay2"}, "overlay2", "unpacked", False),  # Debian 12's docker.io
    ],
)
def test_the_engine_says_once_where_it_keeps_images_and_what_its_sizes_count(version, info, store, sizes, buildkit):
    found = connection.described(engine_of("docker", "unix:///x.sock", "test"), {"Version": version, "MinAPIVersion": "1.44"}, info)
    assert (found.store, found.containerd_store, found.sizes, found.buildkit_default) == (store, store == "containerd", sizes, buildkit)
    assert found.release() == {"kind": "docker", "version": version, "store": store}


def test_a_docker_command_older_than_the_engines_api_floor_is_refused_in_one_line(monkeypatch, tmp_path):
    """Debian 12's docker.io 20.10 speaks API 1.41; Docker 29 accepts 1.44 and later: buildx and the
    checks' `docker exec` would each fail midway."""
    cli = tmp_path / "docker"
    cli.write_text("#!/bin/sh\necho 1.41\n")
    cli.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    engine = engine_of("docker", "unix:///x.sock", "test", "29.1.3", "1.52", "1.44", "containerd")
    refused = engine.cli_refused()
    assert refused and "speaks API 1.41" in refused and "accepts 1.44 and later" in refused, refused
    assert dataclasses.replace(engine, min_api_version="1.24").cli_refused() is None


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--engine", "rkt"], "setup-host: --engine rkt: valid: docker, podman"),
        (["--engine"], "setup-host: --engine (none): valid: docker, podman"),
        (
            ["--frobnicate"],
            "setup-host: unknown argument --frobnicate "
            "(usage: scripts/setup-host.sh [--engine docker|podman] [--lazy] [--tests] [--toolkit-only])",
        ),
    ],
)
def test_setup_host_refuses_an_engine_it_does_not_know_before_touching_anything(args, says):
    done = subprocess.run(["bash", "scripts/setup-host.sh", *args], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr.strip()) == (2, "", says)


@pytest.mark.skipif(os.getuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare: a mount over /etc/os-release")
@pytest.mark.parametrize(
    ("os_release", "says"),
    [
        ('PRETTY_NAME="Debian GNU/Linux 11 (bullseye)"\nID=debian\nVERSION_CODENAME=bullseye\n', "Debian GNU/Linux 11 (bullseye)"),
        ('PRETTY_NAME="Fedora Linux 41"\nID=fedora\n', "Fedora Linux 41"),
    ],
)
def test_setup_host_refuses_a_release_it_does_not_know_before_touching_anything(tmp_path, os_release, says):
    """In a mount namespace of its own, so the host's /etc/os-release is not touched."""
    if subprocess.run(["unshare", "--mount", "true"], capture_output=True).returncode != 0:
        pytest.skip("this host refuses a mount namespace of its own (an unprivileged container)")
    fake = tmp_path / "os-release"
    fake.write_text(os_release)
    script = f'mount --bind "{fake}" /etc/os-release && exec bash scripts/setup-host.sh'
    unshared = ["unshare", "--mount", "--propagation", "private", "bash", "-c", script]
    done = subprocess.run(unshared, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stdout == "", (done.stdout, done.stderr)
    assert done.stderr.strip() == (
        f"setup-host: {says} is not a release set-up knows: Debian 12 (bookworm), Debian 13 (trixie), Debian 14 (forky, testing), "
        "Ubuntu 24.04 (noble), Ubuntu 26.04 (resolute)"
    )


@pytest.mark.skipif(os.getuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare: a mount over /etc/os-release")
@pytest.mark.parametrize(
    "os_release",
    [
        'PRETTY_NAME="Ubuntu 26.04 LTS"\nID=ubuntu\nVERSION_CODENAME=resolute\n',
        'PRETTY_NAME="Debian GNU/Linux forky/sid"\nID=debian\nVERSION_CODENAME=forky\n',
    ],
)
def test_setup_host_knows_the_newest_releases(tmp_path, os_release):
    """Ubuntu 26.04 and Debian forky (Python 3.14 both) pass the release check: set-up goes on to its
    venv, where a python3 first on PATH that says it is 3.9 stops it, before anything is installed."""
    if subprocess.run(["unshare", "--mount", "true"], capture_output=True).returncode != 0:
        pytest.skip("this host refuses a mount namespace of its own (an unprivileged container)")
    (tmp_path / "os-release").write_text(os_release)
    python = tmp_path / "python3"
    python.write_text('#!/bin/sh\ncase "$2" in *"print("*) echo 3.9 ;; *) exit 1 ;; esac\n')
    python.chmod(0o755)
    setup = f'PATH="{tmp_path}:$PATH" exec bash scripts/setup-host.sh --toolkit-only'
    script = f'mount --bind "{tmp_path}/os-release" /etc/os-release && {setup}'
    unshared = ["unshare", "--mount", "--propagation", "private", "bash", "-c", script]
    done = subprocess.run(unshared, cwd=ROOT, capture_output=True, text=True, timeout=60)
    said = f"setup-host: {python} is Python 3.9; torchstack needs Python 3.10 or later"
    assert done.returncode == 2 and done.stderr.strip() == said, done


@pytest.mark.skipif(os.getuid() != 0, reason="set-up runs as root")
@pytest.mark.parametrize(
    ("answers", "says"),
    [
        ('*"print("*) echo 3.9 ;; *"exit("*) exit 1 ;;', "{python} is Python 3.9; torchstack needs Python 3.10 or later"),
        (
            '*"print("*) echo 3.12 ;; *"exit("*) exit 0 ;; *ensurepip*) exit 1 ;;',
            "{python} cannot make a virtual environment (no ensurepip): install python3.12-venv (apt-get install python3-venv)",
        ),
    ],
)
def test_setup_host_refuses_a_python_it_cannot_make_the_venv_with_in_one_line(tmp_path, answers, says):
    """A python3 first on PATH that answers set-up's questions as an old Python, or one without venv's pip, would."""
    python = tmp_path / "python3"
    python.write_text(f'#!/bin/sh\ncase "$2" in {answers} *) exit 3 ;; esac\n')
    python.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    setup = ["bash", "scripts/setup-host.sh", "--toolkit-only"]
    done = subprocess.run(setup, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr.strip()) == (2, "", "setup-host: " + says.format(python=python))


@pytest.mark.parametrize(
    ("version", "refused"), [("3.4.4", True), ("4.2.0", True), ("4.3.1", False), ("5.4.2", False), ("6.0.0-dev", False)]
)
def test_a_podman_older_than_the_oldest_tried_is_refused_before_any_build(version, refused):
    engine = engine_of("podman", "unix:///run/podman/podman.sock", "test", version, "1.41", "1.24", "overlay")
    said = engine.too_old_to_build()
    assert (said is not None) == refused, said
    if refused:
        assert (
            said
            == f"Podman {version} at unix:///run/podman/podman.sock is older than 4.3, the oldest the toolkit builds with: upgrade Podman"
        )
    assert engine_of("docker", engine.url, "test", "20.10.24").too_old_to_build() is None


def test_a_third_engine_is_one_class_and_one_line_in_kinds(monkeypatch):
    """A Docker-API-compatible engine: its class answers what differs, one line of KINDS registers it;
    --engine names it, /version's answer is recognised as it, and it builds with the builder it says."""
    from torchstack.engines.builders import LegacyBuilder
    from torchstack.engines.docker_engine import DockerEngine

    class Other(DockerEngine):
        cli = "other"
        default_url = "unix:///run/other.sock"

        @classmethod
        def names_itself(cls, version):
            return any(c.get("Name") == "Other Engine" for c in version.get("Components") or [])

        def builder_word(self, compiles_torch, buildx_installed, released):
            return "docker"

        def login_hint(self, host):
            return f"log in with `other login {host}`"

    monkeypatch.setitem(connection.KINDS, "other", Other)
    chosen = choose("other", {}, uid=0)
    assert (type(chosen), chosen.kind, chosen.url, chosen.why) == (Other, "other", "unix:///run/other.sock", "--engine other")
    assert choose("other", {"DOCKER_HOST": "tcp://h:2375"}, uid=0).url == "tcp://h:2375"
    assert connection.kind_of({"Components": [{"Name": "Other Engine"}]}) == "other"
    assert connection.kind_of({"Components": [{"Name": "Engine"}]}) == "docker"
    assert isinstance(chosen.builder(chosen.builder_word(True, lambda: True, lambda: chosen)), LegacyBuilder)
    assert chosen.login_hint("r.example") == "log in with `other login r.example`"
