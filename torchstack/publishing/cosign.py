"""The host's cosign, asked once which major release it is, with the options that release takes for each signature form."""

from __future__ import annotations

import functools
import json
import re
import shutil
import subprocess
from dataclasses import dataclass

from torchstack.base.errors import HostNotReady, UsageProblem

# The two forms a signature or an attestation takes in a registry: a Sigstore bundle attached to the
# image as an OCI 1.1 referrer (cosign 3's default; the referrers tag `sha256-HEX` where the registry has
# no referrers API), and the legacy `sha256-HEX.sig` / `.att` tags (cosign 2's only form).
BUNDLE, LEGACY = "bundle", "legacy"
FORMS = (BUNDLE, LEGACY)
# What --signature-format asks for: "both" is every form the host's cosign makes.
CHOICES = ("both", BUNDLE, LEGACY)
MAKES = {2: (LEGACY,), 3: (BUNDLE, LEGACY)}
READS = MAKES  # cosign 2 reads no bundle offline (its --new-bundle-format verify needs Sigstore's TUF root)
_VERSION = re.compile(r"v?(\d+)\.(\d+)\.(\d+)")


@dataclass(frozen=True)
class Cosign:
    path: str
    major: int
    said: str  # the version as the binary says it, or how it was told where it says none

    def forms(self, asked: str) -> tuple[str, ...]:
        """The forms --signature-format `asked` makes with this cosign; refused in one line where it makes none of them."""
        wanted = FORMS if asked == "both" else (asked,)
        made = tuple(form for form in wanted if form in MAKES[self.major])
        if not made:
            raise UsageProblem(
                f"--signature-format {asked}: cosign {self.said} makes only the {' and '.join(MAKES[self.major])} form; "
                "cosign 3 makes Sigstore bundles (put it first on PATH), or ask for --signature-format legacy"
            )
        return made

    def sign_options(self, form: str) -> tuple[str, ...]:
        """Offline (no transparency log, no signing config) in `form`, asking nothing on a terminal."""
        if self.major == 2:
            return ("--tlog-upload=false", "--yes")
        legacy = ("--new-bundle-format=false",) if form == LEGACY else ()
        return ("--use-signing-config=false", "--tlog-upload=false", *legacy, "--yes")

    def verify_options(self, form: str) -> tuple[str, ...]:
        """Offline verification that reads `form` (cosign 3 reads the legacy tags only when told)."""
        legacy = ("--new-bundle-format=false",) if self.major == 3 and form == LEGACY else ()
        return ("--insecure-ignore-tlog=true", *legacy)


def _ask(path: str, *args: str) -> str:
    try:
        result = subprocess.run([path, *args], capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise HostNotReady(f"{path} {' '.join(args)} did not answer ({exc}): reinstall cosign (bash scripts/setup-host.sh)") from None
    return result.stdout + result.stderr


def found(option: str) -> Cosign:
    """The cosign first on PATH, for `option` (what needs it): refused in one line before any work
    where there is none, or it is neither cosign 2 nor cosign 3."""
    tool = _installed()
    if isinstance(tool, str):
        raise HostNotReady(f"{tool}, for {option}: bash scripts/setup-host.sh installs cosign (the distribution's package)")
    return tool


@functools.cache
def _installed() -> Cosign | str:
    """The cosign first on PATH with its major release, from `cosign version` or, where a distribution
    built it without one (Debian's says "devel"), from the options its `sign` takes; else why not."""
    path = shutil.which("cosign")
    if not path:
        return "missing cosign"
    try:
        said = str(json.loads(_ask(path, "version", "--json")).get("gitVersion", ""))
    except (json.JSONDecodeError, AttributeError):
        said = ""
    if version := _VERSION.match(said):
        major, said = int(version[1]), said.removeprefix("v")
    else:
        options = _ask(path, "sign", "--help")
        major = 3 if "--use-signing-config=true" in options else 2 if "--tlog-upload" in options else 0
        said = f"{major} (its build says {said or 'no version'!r})" if major else said
    if major not in MAKES:
        return f"{path} is not cosign 2 or 3 (it says its version is {said[:40] or 'nothing'!r}): torchstack drives those two"
    return Cosign(path, major, said)
