#!/usr/bin/env python3
"""A new container's first compiled answer: compiled at run time (cold) against loaded from the
package baked when the image was built, side by side in one run.

    .venv/bin/python benchmarks/warm.py --image IMAGE [--rounds 3] [--json FILE]

Each round starts, in turn, two new containers of IMAGE (a final image built natively, which bakes
examples/warm.py's model) and times the whole `docker run` to the example's answer:

- cold: `TORCHSTACK_WARM_DIR` pointed at an empty folder, so torchstack_warm finds no package and
  compiles the model with torch.compile, Inductor's cache empty, as every new pod does today;
- baked: the package the image carries.

Both check the answer against eager mode. The figure is baked / cold of the medians
(`baked_cold_ratio`; goal at most 0.3).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.run import emit, recorded  # noqa: E402

GOAL = 0.3
EXAMPLE = "/opt/torchstack/examples/warm.py"


def first_answer(image: str, cold: bool) -> tuple[float, str]:
    env = ["-e", "TORCHSTACK_WARM_DIR=/tmp/no-package"] if cold else []
    started = time.monotonic()
    done = subprocess.run(["docker", "run", "--rm", "--network", "none", *env, image, "python3", EXAMPLE], capture_output=True, text=True)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"warm: {'cold' if cold else 'baked'} run failed:\n{done.stderr[-2000:]}")
    return seconds, done.stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    cold, baked, said = [], [], {}
    for _ in range(args.rounds):  # interleaved, so that drift hits both alike
        seconds, said["cold"] = first_answer(args.image, cold=True)
        cold.append(seconds)
        seconds, said["baked"] = first_answer(args.image, cold=False)
        baked.append(seconds)
    if "baked model" not in said["baked"] or "compiled model" not in said["cold"]:
        raise SystemExit(f"warm: the runs did not answer as meant: {said}")
    ratio = statistics.median(baked) / statistics.median(cold)
    result = {
        **recorded("warm.py"),
        "image": args.image,
        "cold": {"median_s": round(statistics.median(cold), 2), "runs_s": [round(s, 2) for s in cold], "said": said["cold"]},
        "baked": {"median_s": round(statistics.median(baked), 2), "runs_s": [round(s, 2) for s in baked], "said": said["baked"]},
        "baked_cold_ratio": round(ratio, 3),
        "goal": f"baked_cold_ratio <= {GOAL}",
        "goal_met": ratio <= GOAL,
    }
    emit(result, args.json)


if __name__ == "__main__":
    main()
