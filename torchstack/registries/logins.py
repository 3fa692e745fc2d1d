"""A registry's login, with the TLS trust this host gives it, found where the engines find them.

Logins come from the files Podman, skopeo and Docker read, in their order, and from the credential
helpers those files name (ECR's `ecr-login`, `pass`, `secretservice`, ...), asked through the
helper's own protocol by the Docker SDK's code for it (`docker.auth`: the one use of an engine's SDK
outside engines/, which reads files and helpers, never an engine). Nothing here prints a secret or
passes one to another program's command line."""

from __future__ import annotations

import json
import os
import ssl
from dataclasses import dataclass, field
from pathlib import Path

import docker.auth
import docker.errors
import requests.adapters

from torchstack.base.errors import ToolkitError, UsageProblem

LOG_IN = "log in with `docker login {host}` or `podman login {host}`"
# Where the engines look for a registry's own CA (*.crt) and a client certificate (NAME.cert with NAME.key).
CERTS_D = (Path("/etc/docker/certs.d"), Path("/etc/containers/certs.d"))


class LoginRefused(ToolkitError):
    """The registry refused the login this host has for it (none, or one that no longer holds)."""

    exit_code = 2


@dataclass(frozen=True)
class Login:
    """A login to one registry, as a login file or its credential helper keeps it. Never printed:
    `source` says where it came from."""

    source: str
    username: str = field(default="", repr=False)
    password: str = field(default="", repr=False)
    identity_token: str = field(default="", repr=False)  # an OAuth2 refresh token (`docker login` to ACR, say)


def auth_files() -> list[Path]:
    """Where logins are kept, in the order Podman and skopeo read them (containers-auth.json(5)):
    REGISTRY_AUTH_FILE, else Podman's auth.json (`podman login`) and the one under
    ~/.config/containers; then the Docker config (`docker login`, DOCKER_CONFIG), which is all
    Docker reads."""
    named = os.environ.get("REGISTRY_AUTH_FILE")
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    configs = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    if named:
        podman = [Path(named)]
    else:
        podman = [Path(runtime, "containers") if runtime else Path(f"/run/containers/{os.getuid()}"), configs / "containers"]
        podman = [folder / "auth.json" for folder in podman]
    return [*podman, Path(os.environ.get("DOCKER_CONFIG") or Path.home() / ".docker") / "config.json"]


def login_for(host: str) -> Login | None:
    """The login this host keeps for `host`: the first of `auth_files` that has one, in its `auths`
    or through the credential helper it names for `host` (`credHelpers`, else `credsStore`), asked
    through the helper's own protocol (the host on its stdin) by the Docker SDK. A helper that fails
    is one line."""
    for path in auth_files():
        try:
            kept = json.loads(path.read_text())
            if not isinstance(kept, dict):
                raise ValueError("not a JSON object")
            config = docker.auth.load_config(config_dict=kept)
        except OSError:
            continue
        except (ValueError, docker.errors.DockerException) as exc:
            raise UsageProblem(f"{path}: not a login file the engines read ({' '.join(str(exc).split())[:160]})") from None
        helper = config.get_credential_store(host)
        try:
            found = config.resolve_authconfig(host)
        except docker.errors.DockerException as exc:
            raise LoginRefused(
                f"{host}: the credential helper docker-credential-{helper} that {path} names could not be asked "
                f"({' '.join(str(exc).split())[:200]}): install it, or log in again with `docker login {host}`"
            ) from None
        if not found:
            continue
        # The SDK answers an `auths` entry in its own keys (username, password) and a helper's in Docker's.
        user, secret = found.get("Username") or found.get("username"), found.get("Password") or found.get("password")
        if user or found.get("IdentityToken"):
            kept = f"{path}'s credential helper docker-credential-{helper}" if "ServerAddress" in found else str(path)
            return Login(kept, user or "", secret or "", found.get("IdentityToken") or "")
    return None


class Trusting(requests.adapters.HTTPAdapter):
    """HTTPS with the trust the engines have: the host's CA store (OpenSSL's default paths,
    SSL_CERT_FILE) and the registry's own CA and client certificate in certs.d."""

    def __init__(self, context: ssl.SSLContext):
        self.context = context
        super().__init__()

    def init_poolmanager(self, *args, **kwargs):
        kwargs["ssl_context"] = self.context
        return super().init_poolmanager(*args, **kwargs)


def tls_context(host: str) -> ssl.SSLContext:
    """The TLS trust for `host` (HOST[:PORT]): the host's CA store, with what certs.d holds for it."""
    context = ssl.create_default_context()
    for folder in (base / host for base in CERTS_D):
        for path in sorted(folder.glob("*.crt")) + sorted(folder.glob("*.cert")):
            try:
                if path.suffix == ".crt":
                    context.load_verify_locations(cafile=str(path))
                elif path.with_suffix(".key").is_file():
                    context.load_cert_chain(str(path), str(path.with_suffix(".key")))
            except (ssl.SSLError, OSError) as exc:
                raise UsageProblem(f"{path}: not a certificate the engines can use for {host} ({exc})") from None
    return context
