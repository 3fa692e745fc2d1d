"""URLs as the toolkit prints them: the password of a login in one shown as ****, as pip shows it."""

from __future__ import annotations

import re
import urllib.parse

HIDDEN = "****"
# SCHEME://USERINFO@, the userinfo up to the last @ before the host (a password may hold an @ unquoted)
_LOGIN = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/?#\s@]*(?:@[^/?#\s@]*)*)@")


def _hidden(found: re.Match) -> str:
    """pip's redact_netloc: USER:PASSWORD becomes USER:****; a USER alone (a token) becomes ****."""
    user, colon, _ = found["userinfo"].partition(":")
    return f"{found['scheme']}{user}:{HIDDEN}@" if colon else f"{found['scheme']}{HIDDEN}@"


def url(text: str) -> str:
    """`text`, a URL or a line that holds URLs, with the password of each login in them
    (https://USER:PASSWORD@host/...), or a token given alone (https://TOKEN@host/...), as ****."""
    return _LOGIN.sub(_hidden, text)


def without_login(text: str) -> str:
    """The URL with no login at all: what is asked for once the login goes as a header, what a download is kept by."""
    parts = urllib.parse.urlsplit(text)
    if "@" not in parts.netloc:
        return text
    return urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
