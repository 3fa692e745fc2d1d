"""Where a registry's login or token may be sent: to that registry's own origin, a token service over HTTPS."""

from __future__ import annotations

import base64
import ipaddress
from urllib.parse import urlsplit

from torchstack.registries.logins import Login

DEFAULT_PORTS = {"https": 443, "http": 80}


def is_loopback(host: str) -> bool:
    name = host.rsplit(":", 1)[0].strip("[]") if host.count(":") <= 1 or host.startswith("[") else host
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def same_origin(url: str, home: str) -> bool:
    """Whether `url` has the scheme, host and port of `home` (a port left out being its scheme's own), as
    requests' `should_strip_auth` compares a redirect's: 127.0.0.1 and localhost are two hosts."""

    def origin(text: str) -> tuple[str, str | None, int | None]:
        parts = urlsplit(text)
        return parts.scheme.lower(), parts.hostname, parts.port or DEFAULT_PORTS.get(parts.scheme.lower())

    return origin(url) == origin(home)


def authorization(url: str, home: str, bearer: str, login: Login | None) -> dict[str, str]:
    """The Authorization header of a request to `url` by the client of the registry at `home`: its token,
    else its login (Basic); none where `url` is another origin's (an upload Location elsewhere, say)."""
    if not same_origin(url, home):
        return {}
    if bearer:
        return {"Authorization": f"Bearer {bearer}"}
    if login:
        return {"Authorization": "Basic " + base64.b64encode(f"{login.username}:{login.password}".encode()).decode()}
    return {}


def realm_refused(realm: str) -> str | None:
    """Why the token service a Bearer challenge names (its realm) is not one a login may go to: None where
    it is HTTPS, or plain HTTP on loopback (the engines' rule for registries)."""
    parts = urlsplit(realm)
    if not parts.hostname or parts.scheme not in DEFAULT_PORTS:
        return f"its Bearer challenge names no token service (realm {realm[:80]!r})"
    if parts.scheme != "https" and not is_loopback(parts.hostname):
        return f"its token service {parts.hostname} is plain HTTP: a login goes to a token service over HTTPS only"
    return None
