#!/usr/bin/env python3
"""What a child image that bakes a model adds to the README image, against what it must carry.

    .venv/bin/python benchmarks/child.py --image IMAGE [--json FILE]

Builds the docs' child image (docs/using/building-on-the-image.md, "Models compiled ahead, loaded
warm": its Dockerfile word for word, its app from tests/engine/children.py) on IMAGE, with no
network, and measures what it adds to IMAGE in the engine against what it must carry: its app and
the package its bake made. Goal: added / carried at most 1.10 (a bake that left its working files
behind added some 300 MB to a 14 MB package). The child image is removed afterwards.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.run import du, emit, image_size, recorded, run  # noqa: E402
from tests.engine.children import CARRIED, write_docs_child  # noqa: E402

GOAL = 1.10  # added / carried


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", required=True, help="the image the child is built on (the README's release image)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    name = f"torchstack-bench-child:{uuid.uuid4().hex[:10]}"
    with tempfile.TemporaryDirectory() as work:
        write_docs_child(Path(work), args.image)
        run(["docker", "build", "--quiet", "--network", "none", "--tag", name, work])
    try:
        size, parent = image_size(name), image_size(args.image)
        carried = du(name, *CARRIED)
    finally:
        run(["docker", "rmi", name])
    added = size - parent
    ratio = round(added / carried, 3)
    sizes = {"image": parent, "child": size, "added": added, "carried": carried}
    result = {
        **recorded("child.py"),
        "image": args.image,
        "mib": {key: round(value / 2**20, 1) for key, value in sizes.items()},
        "child_added_over_carried": ratio,
        "goal": f"<= {GOAL}",
        "goal_met": ratio <= GOAL,
    }
    emit(result, args.json)


if __name__ == "__main__":
    main()
