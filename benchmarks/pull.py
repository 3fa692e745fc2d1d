#!/usr/bin/env python3
"""A new node's pull of the README image: zstd layers against gzip ones, side by side in one run.

    .venv/bin/python benchmarks/pull.py --image IMAGE [--rounds 3] [--json FILE]

IMAGE (the README's release image, say) goes to a registry on loopback (Debian's docker-registry)
twice: as the engine pushes it (gzip) and as `--compression zstd` pushes it (skopeo, zstd, OCI).
Each round then pulls and unpacks each, in turn, as a node that never saw it would:

- containerd (what Kubernetes nodes run): `ctr images pull` into a namespace of its own on the Docker
  engine's containerd, removed afterwards;
- Podman: `podman pull` into a storage folder of its own, removed afterwards.

Figures: zstd / gzip of the median pull-and-unpack times (`zstd_gzip_pull_ratio_ctr`, `..._podman`;
goal at most 0.6) and of the layers' size in the registry (`zstd_gzip_size_ratio`; goal at most 0.9).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.run import emit, recorded  # noqa: E402
from tests.engine.hosts import running_registry  # noqa: E402

CONTAINERD = "/run/docker/containerd/containerd.sock"  # the Docker engine's own containerd
GOALS = {"pull": 0.6, "size": 0.9}
ACCEPT = "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json"


def run(*command: str, **options) -> str:
    return subprocess.run(command, check=True, capture_output=True, text=True, **options).stdout


def layers_size(registry: str, repository: str) -> int:
    request = urllib.request.Request(f"http://{registry}/v2/{repository}/manifests/bench", headers={"Accept": ACCEPT})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return sum(layer["size"] for layer in json.load(answer)["layers"])


def ctr_pull(reference: str) -> float:
    namespace = f"torchstack-bench-{uuid.uuid4().hex[:8]}"
    ctr = ["ctr", "--address", CONTAINERD, "--namespace", namespace]
    started = time.monotonic()
    run(*ctr, "images", "pull", "--plain-http", reference)
    seconds = time.monotonic() - started
    run(*ctr, "images", "rm", "--sync", reference)
    run("ctr", "--address", CONTAINERD, "namespaces", "rm", namespace)
    return seconds


def podman_pull(reference: str) -> float:
    with tempfile.TemporaryDirectory(dir="/var/tmp") as storage:
        podman = ["podman", "--root", f"{storage}/root", "--runroot", f"{storage}/run", "--storage-driver", "overlay"]
        started = time.monotonic()
        run(*podman, "pull", "--quiet", "--tls-verify=false", reference)
        seconds = time.monotonic() - started
        run(*podman, "system", "reset", "--force")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir="/var/tmp") as work, running_registry(Path(work), auth=False) as registry:
        gzip, zstd = f"{registry}/bench/gzip:bench", f"{registry}/bench/zstd:bench"
        run("docker", "tag", args.image, gzip)
        try:
            run("docker", "push", "--quiet", gzip)
        finally:
            run("docker", "rmi", gzip)
        skopeo = ["skopeo", "copy", "--quiet", "--format", "oci", "--dest-compress-format", "zstd", "--dest-tls-verify=false"]
        run(*skopeo, f"docker-daemon:{args.image}", f"docker://{zstd}")
        sizes = {name: layers_size(registry, f"bench/{name}") for name in ("gzip", "zstd")}
        times: dict[str, dict[str, list[float]]] = {tool: {"gzip": [], "zstd": []} for tool in ("ctr", "podman")}
        for _ in range(args.rounds):  # interleaved, so that drift hits both alike
            for tool, pull in (("ctr", ctr_pull), ("podman", podman_pull)):
                for name, reference in (("gzip", gzip), ("zstd", zstd)):
                    times[tool][name].append(pull(reference))
    medians = {tool: {name: statistics.median(runs) for name, runs in by.items()} for tool, by in times.items()}
    ratios = {f"zstd_gzip_pull_ratio_{tool}": round(m["zstd"] / m["gzip"], 3) for tool, m in medians.items()}
    ratios["zstd_gzip_size_ratio"] = round(sizes["zstd"] / sizes["gzip"], 3)
    result = {
        **recorded("pull.py"),
        "image": args.image,
        "sizes_mib": {name: round(size / 2**20, 1) for name, size in sizes.items()},
        "pull_s": {tool: {name: [round(s, 2) for s in runs] for name, runs in by.items()} for tool, by in times.items()},
        **ratios,
        "goals": {"pull": f"<= {GOALS['pull']}", "size": f"<= {GOALS['size']}"},
        "goals_met": all(v <= GOALS["pull"] for k, v in ratios.items() if "pull" in k) and ratios["zstd_gzip_size_ratio"] <= GOALS["size"],
    }
    emit(result, args.json)


if __name__ == "__main__":
    if shutil.which("ctr") is None or shutil.which("podman") is None or shutil.which("skopeo") is None:
        raise SystemExit("pull: needs ctr (containerd), podman and skopeo: bash scripts/setup-host.sh installs them")
    main()
