#!/usr/bin/env python3
"""A new node's first answer from the README image: started lazily (SOCI) against after a plain pull, side by side in one run.

    .venv/bin/python benchmarks/lazy.py --image IMAGE [--rounds 3] [--json FILE]   (as root)

IMAGE (the README's release image: a final image built natively, which bakes examples/warm.py's
model) goes to a registry on loopback (Debian's docker-registry) as the engine pushes it (gzip), and
its SOCI index is made and pushed as `./build.py --push --lazy soci` does (torchstack/publishing/lazy.py). Each
round then starts, in turn, two empty nodes (containerd 2 with SOCI's snapshotter, on sockets and
roots of their own: tests/engine/lazy_node.py) and times, from the request to the answer:

- plain: `ctr images pull` (every layer fetched and unpacked), then `ctr run` of the example;
- lazy: `soci image rpull` with the index (the layers mounted, fetched as they are read), then
  `ctr run --snapshotter soci` of the example.

Both must print the baked model's answer. Figures: the median seconds of each, and lazy / plain
(`lazy_plain_ratio`). Goals: lazy at most 8 s, and at most half the plain pull's time.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.run import emit, recorded  # noqa: E402
from tests.engine.hosts import running_registry  # noqa: E402
from tests.engine.lazy_node import lazy_node  # noqa: E402
from torchstack.publishing import lazy  # noqa: E402
from torchstack.registries import registry as registry_api  # noqa: E402

GOALS = {"lazy_s": 8.0, "ratio": 0.5}
EXAMPLE = "/opt/torchstack/examples/warm.py"


def first_answer(registry: str, reference: str, index: str | None) -> tuple[float, str]:
    """Seconds from the request to the example's answer on an empty node; what it printed."""
    with tempfile.TemporaryDirectory(dir="/var/tmp", prefix="torchstack-node-") as folder, lazy_node(Path(folder), registry) as node:
        started = time.monotonic()
        if index:
            node.rpull(reference, index)
        else:
            node.pull(reference)
        said = node.run(reference, ["python3", EXAMPLE], lazily=bool(index))
        return time.monotonic() - started, said.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir="/var/tmp") as work, running_registry(Path(work), auth=False) as registry:
        remote = f"{registry}/bench/lazy:bench"
        subprocess.run(["docker", "tag", args.image, remote], check=True)
        try:
            subprocess.run(["docker", "push", "--quiet", remote], check=True, capture_output=True)
        finally:
            subprocess.run(["docker", "rmi", remote], check=True, capture_output=True)
        digest, _ = registry_api.Registry(registry).manifest(registry_api.parse(remote))
        pinned = f"{registry}/bench/lazy@{digest}"
        started = time.monotonic()
        index = lazy.publish(pinned, print)
        indexing = time.monotonic() - started
        times: dict[str, list[float]] = {"plain": [], "lazy": []}
        said = {}
        for _ in range(args.rounds):  # interleaved, so that drift hits both alike
            for name, using in (("plain", None), ("lazy", index)):
                seconds, said[name] = first_answer(registry, pinned, using)
                times[name].append(seconds)
    if not all("baked model" in answer for answer in said.values()):
        raise SystemExit(f"lazy: the runs did not answer as meant: {said}")
    medians = {name: statistics.median(runs) for name, runs in times.items()}
    ratio = medians["lazy"] / medians["plain"]
    result = {
        **recorded("lazy.py"),
        "image": args.image,
        "index_s": round(indexing, 1),
        "first_answer_s": {name: [round(s, 2) for s in runs] for name, runs in times.items()},
        "lazy_plain_ratio": round(ratio, 3),
        "goals": {"lazy_s": f"<= {GOALS['lazy_s']}", "ratio": f"<= {GOALS['ratio']}"},
        "goals_met": medians["lazy"] <= GOALS["lazy_s"] and ratio <= GOALS["ratio"],
    }
    emit(result, args.json)


if __name__ == "__main__":
    try:
        lazy.check("soci", push=True, compression="gzip")
    except Exception as exc:  # the toolkit's one line: what this host lacks
        raise SystemExit(f"lazy: {exc}") from None
    main()
