#!/usr/bin/env python3
"""A security fix's refresh of the README's image against a cold build of it, side by side in one run.

    .venv/bin/python benchmarks/refresh.py [--json FILE] [--wheelhouse DIR]

On a build host that built the README's image before (stages in the engine's cache), a fix that
the -security suite publishes afterwards reaches the next build of the same request as the
release image's last layer: nothing is compiled again. The -security suite here is a real Debian
archive this script signs with a key of its own and serves on loopback, holding tzdata, which the
image holds, at a newer version (tests/local_archive.py). Measured, with `--no-test` both:

- refresh: the same request again once the fix is published (its stages from the engine's cache);
- cold: the same request with `--no-cache` (every step again: numpy's compile, the final stage).

The figure is refresh / cold (`refresh_cold_ratio`; goal at most 0.3). Every image it tags is
untagged afterwards. Needs a running Docker engine; writes nothing into the checkout.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.run import README_ARGS, cpu_model, throwaway_images, toolkit  # noqa: E402
from tests.local_archive import LocalArchive, debian_suites, published_deb, rebuilt  # noqa: E402
from torchstack.engines.connection import choose, connect  # noqa: E402
from torchstack.making import archive  # noqa: E402

GOAL = 0.3
PACKAGE = "tzdata"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument(
        "--wheelhouse", default=os.environ.get("PIP_FIND_LINKS"), help="folder of the torch wheel (default $PIP_FIND_LINKS)"
    )
    args = parser.parse_args()
    if not args.wheelhouse:
        raise SystemExit("benchmark: name the torch wheel's folder with --wheelhouse or $PIP_FIND_LINKS")
    started = time.monotonic()
    _, built = toolkit(*README_ARGS, "--torch-wheel", args.wheelhouse)  # the host's earlier build (or made now)
    engine = connect(choose("auto"))
    final = engine.image(built["final_image"])
    name, arch = json.loads(final.labels["io.torchstack.build-info"])["distribution"], final.architecture
    have = archive.installed(engine, built["image_id"])[PACKAGE]
    tag = f"bench-refresh-{uuid.uuid4().hex[:10]}"
    with tempfile.TemporaryDirectory() as tmp, throwaway_images(tag), LocalArchive(Path(tmp) / "site") as site:
        original = published_deb(PACKAGE, have, Path(tmp), debian_suites(name), arch)
        site.publish(f"{name}-security", arch)
        request = [
            *README_ARGS,
            "--torch-wheel",
            args.wheelhouse,
            "--security-mirror",
            site.url,
            "--archive-keyring",
            str(site.keyring),
            "--no-test",
        ]
        toolkit(*request, "--tag", tag)  # the build before the fix
        site.publish(f"{name}-security", arch, [rebuilt(original, Path(tmp), f"{have}+bench1")])
        refresh_s, refreshed = toolkit(*request, "--tag", tag)
        cold_s, cold = toolkit(*request, "--tag", f"{tag}-cold", "--no-cache")
    figures = {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        "command": " ".join(["python3", "benchmarks/refresh.py", *sys.argv[1:]]),
        "machine": {"cpu": cpu_model(), "cores": os.cpu_count(), "arch": platform.machine()},
        "request": " ".join(README_ARGS),
        "fix": f"{PACKAGE} {have} -> {have}+bench1 in {name}-security",
        "refresh": {
            "seconds": round(refresh_s, 1),
            "stages": {s["stage"]: s["status"] for s in refreshed["stages"]},
            "upgraded": refreshed["security_updates"]["upgraded"],
        },
        "cold": {"seconds": round(cold_s, 1), "stages": {s["stage"]: round(s["seconds"], 1) for s in cold["stages"]}},
        "refresh_cold_ratio": round(refresh_s / cold_s, 3),
        "goal": f"refresh_cold_ratio <= {GOAL}",
    }
    figures["goal_met"] = figures["refresh_cold_ratio"] <= GOAL
    figures["seconds"] = round(time.monotonic() - started, 1)
    print(json.dumps(figures, indent=2))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
