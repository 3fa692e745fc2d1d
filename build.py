#!/usr/bin/env python3
"""torchstack: build optimized PyTorch container images. Run ./build.py --help."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from torchstack.cli import main  # noqa: E402

if __name__ == "__main__":
    main()
