"""Docker's engine, on either image store: BuildKit or its legacy builder, its logins, its API floor."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from torchstack.engines.builders import BuildKitBuilder, LegacyBuilder
from torchstack.engines.docker_api import DockerApi
from torchstack.engines.engine import SETUP, Builder, Engine, numbers, reason

BUILDKIT = "buildx"  # --builder's word for BuildKit; "docker" is the legacy builder's


@dataclass(frozen=True)
class DockerEngine(DockerApi, Engine):
    """Docker 20.10 and later. Its two image stores differ as data (`containerd_store`): what an
    image's ID and size are, which layers a step writes."""

    cli = "docker"
    default_url = "unix:///var/run/docker.sock"

    @property
    def containerd_store(self) -> bool:
        return self.store == "containerd"

    @property
    def buildkit_default(self) -> bool:
        major = self.version.split(".")[0]
        return major.isdigit() and int(major) >= 23

    def builder_word(self, compiles_torch: bool, buildx_installed: Callable[[], bool], released: Callable[[], Engine]) -> str:
        """BuildKit wherever the engine has it as its default (Docker 23 and later) and buildx is
        installed, and for a PyTorch compile (its compiler cache mount); the legacy builder where the
        engine offers nothing else (Docker 20.10 without buildx)."""
        if not buildx_installed():
            return "docker"
        return BUILDKIT if compiles_torch or released().buildkit_default else "docker"

    def builder(self, wanted: str, buildx_builder: str | None = None) -> Builder:
        if wanted == BUILDKIT:
            return BuildKitBuilder(self.sdk, self, buildx_builder)
        return LegacyBuilder(self.sdk, self)

    def login_hint(self, host: str) -> str:
        return f"log in with `docker login {host}` (credentials are read from the Docker config)"

    def tls_hint(self, host: str) -> str:
        return (
            f"give the engine the registry's CA (/etc/docker/certs.d/{host}/ca.crt) or, for a plain-HTTP "
            f"registry, list {host} in the engine's insecure-registries"
        )

    def cli_refused(self, environ: Mapping[str, str] | None = None) -> str | None:
        """The `docker` command's API is older than the oldest the engine accepts (Debian 12's
        docker.io 20.10 speaks 1.41, Docker 29 accepts 1.44 and later); None where it can drive it,
        or where there is no such floor."""
        cli = shutil.which("docker")
        if not self.min_api_version or cli is None:  # no floor; or no CLI: prerequisites names what is missing
            return None
        said = subprocess.run(
            [cli, "version", "--format", "{{.Client.APIVersion}}"],
            capture_output=True,
            text=True,
            env={**(os.environ if environ is None else environ), "DOCKER_HOST": self.url},
        ).stdout.strip()
        if said and numbers(said) < numbers(self.min_api_version):
            return (
                f"the docker command here ({cli}) speaks API {said}, and the engine at {self.url} (Docker {self.version}) "
                f"accepts {self.min_api_version} and later: install the Docker CLI of the engine's release "
                "(docker-cli, docker-ce-cli) or put it first on PATH"
            )
        return None

    def unreachable(self, exc: Exception) -> str:
        return (
            f"no Docker engine answers at {self.url} ({reason(exc)}); start one with `sudo dockerd &` or "
            f"`sudo systemctl start docker` (apt-get install docker.io), or run {SETUP}; "
            "on a host with Podman, use --engine podman"
        )
