#!/usr/bin/env python3
"""Emulated Python, bookworm's qemu-user-static 7.2 against the qemu-user that scripts/setup-host.sh
installs (Debian trixie's, 10.0), side by side in one run.

    .venv/bin/python benchmarks/qemu.py --image IMAGE --vs /usr/bin/qemu-aarch64-static [--json FILE] [--rounds 5]

Byte-compiling is most of what an emulated build's pip install does (torch and sympy hold thousands
of modules). Each round runs, under each emulator in turn, the image's python3 compiling Python's own
typing.py ten times, in the image's root file system (unpacked to a temporary folder); the figure is
ours / theirs of the medians (`qemu_ratio`, lower is faster). IMAGE: an arm64 image with python3
(the emulated chain's base stage, say).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import docker

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.run import emit, recorded  # noqa: E402

OURS = Path("/usr/local/lib/torchstack/qemu/aarch64-binfmt-P")
WORK = "import glob, time; src = open(sorted(glob.glob('/usr/lib/python3*/typing.py'))[0]).read(); t = time.time()\n" + (
    "for _ in range(10): compile(src, 'typing.py', 'exec')\nprint(time.time() - t)"
)


def seconds(qemu: str, rootfs: Path) -> float:
    command = [qemu, "-L", str(rootfs), str(rootfs / "usr/bin/python3"), "-S", "-c", WORK]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return float(done.stdout.split()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", required=True)
    parser.add_argument("--vs", required=True, help="the other qemu-aarch64 binary (bookworm's: /usr/bin/qemu-aarch64-static)")
    parser.add_argument("--ours", default=str(OURS))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    client = docker.from_env()
    with tempfile.TemporaryDirectory() as work:
        rootfs = Path(work) / "rootfs"
        rootfs.mkdir()
        container = client.containers.create(args.image, "true")
        try:
            with tempfile.TemporaryFile() as tar:
                for chunk in container.export():
                    tar.write(chunk)
                tar.seek(0)
                with tarfile.open(fileobj=tar) as archive:
                    archive.extractall(rootfs, filter="tar")
        finally:
            container.remove()
        # Run directly, the binary needs its plain name: named *-binfmt-P it expects the kernel's argument layout.
        plain = Path(work) / "qemu-aarch64"
        plain.symlink_to(args.ours)
        ours, theirs = [], []
        for _ in range(args.rounds):  # interleaved, so that drift hits both alike
            ours.append(seconds(str(plain), rootfs))
            theirs.append(seconds(args.vs, rootfs))
        versions = {
            name: subprocess.run([path, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
            for name, path in (("ours", str(plain)), ("theirs", args.vs))
        }
    result = {
        **recorded("qemu.py"),
        "image": args.image,
        "ours": {"qemu": versions["ours"], "median_s": round(statistics.median(ours), 2), "runs_s": [round(s, 2) for s in ours]},
        "theirs": {"qemu": versions["theirs"], "median_s": round(statistics.median(theirs), 2), "runs_s": [round(s, 2) for s in theirs]},
        "qemu_ratio": round(statistics.median(ours) / statistics.median(theirs), 3),
    }
    emit(result, args.json)


if __name__ == "__main__":
    main()
