"""What this image finds at run time, on this machine: the final image's checks and its banner ask.

Usage: probe.py [--json] PROBE...   PROBE: kleidiai | nnpa=/path/to/libzdnn.so
Each answer is a fact read from the library that knows it, never assumed from how the image was
built. Runs in the image (its Python), not on the build host.
"""

from __future__ import annotations

import ctypes
import json
import sys


def kleidiai() -> dict:
    """Arm's KleidiAI micro-kernels: torch.backends.kleidiai.is_available(), where torch has it."""
    import torch

    module = getattr(torch.backends, "kleidiai", None)
    if module is None:
        return {"available": None, "says": f"KleidiAI: torch {torch.__version__} has no torch.backends.kleidiai"}
    available = bool(module.is_available())
    built = "built with KleidiAI kernels" if available else "built without KleidiAI kernels"
    return {"available": available, "says": f"KleidiAI: torch {torch.__version__} is {built} (torch.backends.kleidiai)"}


def nnpa(library: str) -> dict:
    """The IBM Z on-chip AI accelerator, as libzdnn's zdnn_is_nnpa_installed() sees this machine."""
    zdnn = ctypes.CDLL(library)
    zdnn.zdnn_init.restype = None
    zdnn.zdnn_is_nnpa_installed.restype = ctypes.c_bool
    zdnn.zdnn_init()
    present = bool(zdnn.zdnn_is_nnpa_installed())
    where = "present on this machine" if present else "not on this machine: NNPA plugins cannot use it here"
    return {"available": present, "says": f"NNPA: {where} (libzdnn zdnn_is_nnpa_installed())"}


def main(argv: list[str]) -> int:
    as_json = "--json" in argv
    answers = {}
    for probe in (a for a in argv if a != "--json"):
        name, _, argument = probe.partition("=")
        try:
            answers[name] = kleidiai() if name == "kleidiai" else nnpa(argument) if name == "nnpa" else None
        except (ImportError, OSError, AttributeError) as exc:
            answers[name] = {"available": None, "says": f"{name}: could not tell ({exc})"}
        if answers[name] is None:
            print(f"probe.py: unknown probe {name!r}", file=sys.stderr)
            return 2
    if as_json:
        print(json.dumps(answers, sort_keys=True))
    else:
        for answer in answers.values():
            print(answer["says"])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
