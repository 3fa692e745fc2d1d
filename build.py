#!/usr/bin/env python3
"""torchstack: build optimized PyTorch container images. Run ./build.py --help."""

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

# The toolkit's own venv, which scripts/setup-host.sh makes (.venv): run in it from any shell, with no
# activation step, and never with the packages of the Python that started this file.
VENV_PYTHON = HERE / ".venv" / "bin" / "python"
if VENV_PYTHON.exists() and os.path.realpath(sys.prefix) != os.path.realpath(HERE / ".venv"):
    os.execv(VENV_PYTHON, [str(VENV_PYTHON), __file__, *sys.argv[1:]])

sys.path.insert(0, str(HERE))

try:
    from torchstack.cli import main
except ModuleNotFoundError as missing:
    sys.exit(f"torchstack: error: {missing.name} is missing: run scripts/setup-host.sh (it makes the toolkit's venv, .venv)")

if __name__ == "__main__":
    main()
