#!/usr/bin/env python3
"""The README image's size as a new node pays for it, against another build of it, side by side in one run.

    .venv/bin/python benchmarks/size.py --image IMAGE --vs OTHER [--rounds 3] [--json FILE]

For each image: its size in the engine, its payload (the OS image, the venv, the compiled libraries, the
Debian packages it adds and the toolkit's files: what it must carry), the size of its layers as pushed
(gzip, as the engine pushes them to a registry on loopback), and a new node's pull and unpack of it with
containerd's `ctr` (what Kubernetes nodes run), the two interleaved round by round. Figures: image /
payload (goal at most 1.10) and IMAGE / OTHER of each.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.pull import ctr_pull, layers_size  # noqa: E402
from benchmarks.run import du, emit, image_size, packages, recorded  # noqa: E402
from tests.engine.hosts import running_registry  # noqa: E402

GOAL = 1.10  # image / payload


def run(*command: str) -> str:
    return subprocess.run(command, check=True, capture_output=True, text=True).stdout


def payload(image: str) -> dict[str, int]:
    """What the image must carry, from its build-info: as benchmarks/run.py counts it."""
    labels = json.loads(run("docker", "image", "inspect", "-f", "{{json .Config.Labels}}", image))
    info, os_image = json.loads(labels["io.torchstack.build-info"]), labels["org.opencontainers.image.base.name"]
    os_packages = packages(os_image)
    added = sum(size for name, size in packages(image).items() if name not in os_packages)
    parts = {
        "os_image": image_size(os_image),
        "venv": du(image, info["venv"]),
        "compiled_libraries": du(image, *sorted({lib["directory"] for lib in info["payload"]["libraries"]})),
        "debian_packages_added": added,
        "toolkit_files": du(image, "/opt/torchstack"),
    }
    return {**parts, "payload": sum(parts.values())}


def pushed_size(registry: str, image: str, name: str) -> int:
    remote = f"{registry}/bench/{name}:bench"
    run("docker", "tag", image, remote)
    try:
        run("docker", "push", "--quiet", remote)
    finally:
        run("docker", "rmi", remote)
    return layers_size(registry, f"bench/{name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", required=True, help="the image measured")
    parser.add_argument("--vs", required=True, help="the image it is measured against (an earlier build of the same request)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    images = {"image": args.image, "vs": args.vs}
    figures = {name: {"size": image_size(image), **payload(image)} for name, image in images.items()}
    with tempfile.TemporaryDirectory(dir="/var/tmp") as work, running_registry(Path(work), auth=False) as registry:
        for name, image in images.items():
            figures[name]["pushed"] = pushed_size(registry, image, name)
        pulls: dict[str, list[float]] = {name: [] for name in images}
        for _ in range(args.rounds):  # interleaved, so that drift hits both alike
            for name in images:
                pulls[name].append(ctr_pull(f"{registry}/bench/{name}:bench"))
    mib = {name: {key: round(value / 2**20, 1) for key, value in f.items()} for name, f in figures.items()}
    medians = {name: statistics.median(times) for name, times in pulls.items()}
    over_payload = round(figures["image"]["size"] / figures["image"]["payload"], 3)
    result = {
        **recorded("size.py"),
        "images": images,
        "mib": mib,
        "pull_s": {name: [round(s, 2) for s in times] for name, times in pulls.items()},
        "image_over_payload": over_payload,
        "vs_over_payload": round(figures["vs"]["size"] / figures["vs"]["payload"], 3),
        "size_ratio": round(figures["image"]["size"] / figures["vs"]["size"], 3),
        "pushed_ratio": round(figures["image"]["pushed"] / figures["vs"]["pushed"], 3),
        "pull_ratio": round(medians["image"] / medians["vs"], 3),
        "goals": {"image_over_payload": f"<= {GOAL}"},
        "goals_met": over_payload <= GOAL,
    }
    emit(result, args.json)


if __name__ == "__main__":
    if shutil.which("ctr") is None or shutil.which("docker-registry") is None:
        raise SystemExit("size: needs ctr (containerd) and docker-registry: bash scripts/setup-host.sh --tests installs them")
    main()
