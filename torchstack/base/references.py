"""Docker's grammar of an image reference (distribution/reference), checked before a name from outside reaches a Dockerfile."""

from __future__ import annotations

import re

from torchstack.base.errors import UsageProblem

# distribution/reference's regexp.go, as Docker, BuildKit and Podman read a name in FROM or a pull:
# [HOST[:PORT]/]PATH[:TAG][@DIGEST], the path's components lower-case, joined by . _ __ or dashes.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN_PART = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_HOST = rf"(?:{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?"
_NAME = rf"(?:{_HOST}/)?{_COMPONENT}(?:/{_COMPONENT})*"
_TAG = r"\w[\w.-]{0,127}"
# The digests go-digest validates: lower-case hex of the algorithm's length.
_DIGEST = r"sha256:[a-f0-9]{64}|sha384:[a-f0-9]{96}|sha512:[a-f0-9]{128}"
_REFERENCE = re.compile(rf"(?P<name>{_NAME})(?::{_TAG})?(?:@(?:{_DIGEST}))?", re.ASCII)
_NAME_MAX = 255  # distribution's NameTotalLengthMax


def check_reference(text: str, what: str) -> str:
    """`text` where it is an image reference by Docker's grammar; else a UsageProblem that names
    `what` gave it (an option, an image's label)."""
    found = _REFERENCE.fullmatch(text)
    if found is None or len(found["name"]) > _NAME_MAX:
        raise UsageProblem(
            f"{what} {text!r} is not a valid image reference: [HOST[:PORT]/]NAME[:TAG][@sha256:DIGEST], "
            f"its NAME in lower case (at most {_NAME_MAX} characters), as Docker reads one"
        )
    return text
