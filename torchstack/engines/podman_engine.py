"""Podman's engine: buildah through its own build endpoint, its logins, what it cannot do."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torchstack.engines.builders import PodmanBuilder
from torchstack.engines.docker_api import DockerApi
from torchstack.engines.engine import SETUP, Builder, Engine, numbers, reason

# The oldest Podman builds are tried with (Debian 12's): its own build endpoint with every date given
# (oci_build.py) and the Docker-compatible API the toolkit drives. RHEL 8 and 9 ship newer ones.
PODMAN_OLDEST = (4, 3)

# What needs BuildKit or Docker's builder, which Podman's builder (buildah) does not have: refused before any work.
PODMAN_REFUSES = {
    "builder": "--builder buildx needs BuildKit, which Podman does not have; with Podman every stage "
    "builds on its legacy-API builder (buildah): drop --builder buildx",
    "buildx_builder": "--buildx-builder names a BuildKit builder, which Podman does not have: drop it",
    "zstd": "--compression zstd copies the release image from Docker's engine with skopeo: with Podman, push gzip layers (the default)",
    "ccache_dir": "--ccache-dir moves BuildKit's compiler cache mount, which Podman's builder does not have: "
    "drop it (Podman reuses unchanged steps from its own cache, as Docker's legacy builder does)",
}


@dataclass(frozen=True)
class PodmanEngine(DockerApi, Engine):
    """Podman 4.3 and later, through its API service (`podman system service`, podman.socket). Its
    builder reuses only steps it made itself, so an earlier stage another host built is taken by
    its content name (`takes_stages_by_name`)."""

    cli = "podman"
    takes_stages_by_name = True
    push_streams_layers = False
    refusals = PODMAN_REFUSES

    @classmethod
    def names_itself(cls, version: dict) -> bool:
        return any("podman" in str(c.get("Name", "")).lower() for c in version.get("Components") or [])

    def builder_word(self, compiles_torch: bool, buildx_installed: Callable[[], bool], released: Callable[[], Engine]) -> str:
        return "docker"  # its builder, behind the legacy build API's word

    def builder(self, wanted: str, buildx_builder: str | None = None) -> Builder:
        return PodmanBuilder(self.sdk, self)

    def login_hint(self, host: str) -> str:
        return f"log in with `podman login {host}` (Podman's service reads its auth.json, then the Docker config)"

    def tls_hint(self, host: str) -> str:
        return (
            f"give Podman the registry's CA (/etc/containers/certs.d/{host}/ca.crt) or, for a plain-HTTP "
            f'registry, add [[registry]] location = "{host}" insecure = true to /etc/containers/registries.conf and '
            "restart Podman's service"
        )

    def reached_by(self) -> dict[str, str]:
        """The SDK through DOCKER_HOST; podman's CLI as a client of the same service (CONTAINER_HOST)."""
        return {"DOCKER_HOST": self.url, "CONTAINER_HOST": self.url}

    def too_old_to_build(self) -> str | None:
        if numbers(self.version.split("-")[0]) >= PODMAN_OLDEST:
            return None
        oldest = ".".join(map(str, PODMAN_OLDEST))
        return f"Podman {self.version} at {self.url} is older than {oldest}, the oldest the toolkit builds with: upgrade Podman"

    def unreachable(self, exc: Exception) -> str:
        return (
            f"no Podman engine answers at {self.url} ({reason(exc)}); start its API service with "
            f"`podman system service --time=0 {self.url} &` or `systemctl start podman.socket` "
            f"(apt-get install podman, dnf install podman), or run {SETUP} --engine podman"
        )
