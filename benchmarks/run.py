#!/usr/bin/env python3
"""What the toolkit costs and what its images deliver, each figure a ratio measured side by side in one run.

    .venv/bin/python benchmarks/run.py [--rounds 5] [--json FILE] [--short]

Builds (or finds in the engine's cache) the README's x86_64 image, and a plain image beside it:
the same Debian image with the same torch wheel installed by pip alone. Then, in one run:

1. inference: the examples' --benchmark mode in both images, interleaved, the median time per
   workload and the ratio (plain time / our time); under a CPU limit below the host's cores
   (`docker run --cpus`, as a Kubernetes CPU limit runs a pod), the mean time over more runs
   (throughput); torch.compile against eager in our image;
2. toolkit overhead: a no-op rebuild through ./build.py against the engine's own build of the
   same rendered contexts on the same cache (Docker's build API, which `docker build` calls); a
   rebuild after a change to the final stage only against a cold (--no-cache) build of the chain;
   planning and rendering the whole matrix;
3. size: the final image against the payload it carries, measured inside it, and against the
   plain image plus the toolchain torch.compile needs;
4. build time per stage, from the cold build's summary.

--short (what the test suite runs) does one round of two small workloads and leaves out the cold
and the final-stage builds. Needs a running Docker engine; writes nothing into the checkout.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

import docker

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from torchstack.catalog.model import load_catalog  # noqa: E402
from torchstack.making.render import BuildSecrets, assemble_context, render_dockerfile  # noqa: E402
from torchstack.making.sources import cached_sources  # noqa: E402
from torchstack.request.matrix import jobs  # noqa: E402
from torchstack.request.metadata import stage_labels  # noqa: E402
from torchstack.request.plan import Request  # noqa: E402
from torchstack.request.planner import make_plan  # noqa: E402

# The README's first command, as a newcomer runs it.
README_ARGS = ["--torch-from", "wheel", "--openblas-from", "distro"]
EXAMPLES = "/opt/torchstack/examples"
# (name, example, arguments): the eager workloads both images run.
WORKLOADS = [
    ("resnet b1", "resnet.py", ["--batch", "1"]),
    ("resnet b8", "resnet.py", ["--batch", "8"]),
    ("bert b1", "bert.py", ["--batch", "1"]),
    ("bert b8", "bert.py", ["--batch", "8"]),
    ("decoder LM b1 (tokens)", "decoder_lm.py", ["--batch", "1"]),
]
SHORT_WORKLOADS = WORKLOADS[:1]
LIMITED_RUNS = 5  # under a CPU limit, this many times the runs (see inference)
GOALS = {
    "eager_median_ratio": 1.1,  # our image at least 1.1x the plain one on the median workload
    "eager_worst_ratio": 1.0,  # and never slower on any
    "limited_median_ratio": 1.5,  # under a CPU limit: at least 1.5x the plain one on the median workload
    "limited_worst_ratio": 0.97,  # and no workload slower than 0.97x
    "compile_speedup": 1.5,  # torch.compile at least 1.5x eager in our image
    "noop_overhead": 1.05,  # ./build.py no-op at most 1.05x the engine's build of the same contexts
    "final_over_payload": 1.10,  # the final image within 1.10x of what it must carry
}


def run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(command, check=True, capture_output=True, text=True, **kwargs)


def timed(command: list[str], **kwargs) -> tuple[float, subprocess.CompletedProcess]:
    started = time.monotonic()
    result = run(command, **kwargs)
    return time.monotonic() - started, result


def legacy_build(*args: str) -> str:
    """`docker build` with the engine's legacy builder, the one ./build.py uses for this chain."""
    env = {**os.environ, "DOCKER_BUILDKIT": "0"}
    return run(["docker", "build", "-q", *args], env=env).stdout.strip().splitlines()[-1]


def engine_build(context: Path, platform: str, labels: dict[str, str]) -> str:
    """The engine's own build of one context, through Docker's build API as ./build.py calls it
    (the legacy builder). Not the `docker` CLI: the CLI packs the context itself, and Docker 20.10's
    CLI packs file headers otherwise than its API's clients do, so the legacy builder's cache
    would take its COPY steps for new ones."""
    client = docker.from_env()
    try:
        image, _ = client.images.build(
            path=str(context), platform=platform, labels=labels, rm=True, forcerm=True, pull=False, network_mode="host"
        )
        return image.id
    finally:
        client.close()


def toolkit(*args: str, cwd: Path = ROOT) -> tuple[float, dict]:
    """Run ./build.py as a user would; its seconds and its JSON summary."""
    with tempfile.TemporaryDirectory() as tmp:
        summary = Path(tmp) / "summary.json"
        seconds, _ = timed([sys.executable, str(cwd / "build.py"), *args, "--quiet", "--json", str(summary)], cwd=cwd)
        return seconds, json.loads(summary.read_text())


def image_ids() -> set[str]:
    return set(run(["docker", "images", "-a", "-q", "--no-trunc"]).stdout.split())


@contextlib.contextmanager
def throwaway_images(tag: str):
    """Afterwards, remove every name with `tag` and exactly the images created inside the block
    (never a prune: the engine's other images and its build cache stay)."""
    before = image_ids()
    try:
        yield
    finally:
        names = run(["docker", "images", "--format", "{{.Repository}}:{{.Tag}}"]).stdout.split()
        for name in names:
            if name.endswith(f":{tag}"):
                subprocess.run(["docker", "rmi", name], capture_output=True)
        created = image_ids() - before
        while created:  # children before parents: a pass removes at least the leaves
            for image in sorted(created):
                subprocess.run(["docker", "rmi", image], capture_output=True)
            left = created & image_ids()
            if left == created:
                print(f"benchmark: could not remove {len(left)} image(s) it made: {sorted(left)[:3]}", file=sys.stderr)
                break
            created = left


# --- the images ------------------------------------------------------------------------------


def readme_plan(catalog, wheelhouse: str):
    return make_plan(catalog, Request(methods={"torch": "wheel", "openblas": "distro"}, torch_wheel=wheelhouse, builder="docker"))


def plain_image(os_image: str, wheel: Path) -> tuple[str, float]:
    """Debian, Python and the same torch wheel installed with pip alone (numpy too, as the examples
    and a user want it); built in two stages so that the wheel file is not in the image."""
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy2(wheel, Path(tmp) / wheel.name)
        cert = os.environ.get("PIP_CERT")
        if cert:
            shutil.copy2(cert, Path(tmp) / "ca.crt")
        use_cert = "PIP_CERT=/tmp/ca.crt " if cert else ""
        (Path(tmp) / "Dockerfile").write_text(
            f"FROM {os_image} AS install\n"
            "RUN apt-get update && apt-get install -y --no-install-recommends python3-venv\n"
            f"COPY {wheel.name} {'ca.crt ' if cert else ''}/tmp/\n"
            f"RUN python3 -m venv /venv && {use_cert}/venv/bin/pip install --no-cache-dir /tmp/{wheel.name} numpy\n"
            f"FROM {os_image}\n"
            "RUN apt-get update && apt-get install -y --no-install-recommends python3 && rm -rf /var/lib/apt/lists/*\n"
            "COPY --from=install /venv /venv\n"
            "ENV PATH=/venv/bin:$PATH\n"
        )
        tag = f"torchstack-bench-plain:{wheel.name.split('-')[1].replace('+', '-')}"
        started = time.monotonic()
        legacy_build("--network", "host", "-t", tag, tmp)
        return tag, time.monotonic() - started


# --- 1. inference ----------------------------------------------------------------------------


def example(image: str, script: str, args: list[str], plain: bool, env: tuple[str, ...] = (), cpus: str = "") -> dict:
    """One example's --benchmark JSON line from a new container of `image` (with `cpus`: under that CPU limit)."""
    mount = ["-v", f"{ROOT / 'examples'}:{EXAMPLES}:ro"] if plain else []
    settings = [arg for setting in env for arg in ("-e", setting)] + (["--cpus", cpus] if cpus else [])
    result = subprocess.run(
        ["docker", "run", "--rm", *mount, *settings, image, "python3", f"{EXAMPLES}/{script}", *args, "--benchmark"],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        return {"error": (result.stderr.strip().splitlines() or [f"exit status {result.returncode}"])[-1]}
    return json.loads(result.stdout.strip().splitlines()[-1])


def flipped_settings(image: str) -> tuple[str, ...]:
    """Each runtime setting of the image the other way round: a default set empty (-e NAME=), an
    opt-in one set to its value. The image's build-info lists them (runtime_env)."""
    info = json.loads(run(["docker", "image", "inspect", "-f", '{{index .Config.Labels "io.torchstack.build-info"}}', image]).stdout)
    return tuple(f"{name}=" if s["default"] else f"{name}={s['value']}" for name, s in info["runtime_env"].items())


def cpu_limit(cores: int) -> str:
    """The CPU limit of the deployment case: half the host's cores (1 of 2 here), as a pod's
    limit sits below its node's cores; empty on a one-core host (no limit below it to set)."""
    return str(cores // 2) if cores >= 2 else ""


def inference(ours: str, plain: str, workloads: list, rounds: int, runs: int, limit: str) -> dict:
    """Our image, the plain one, our image with its runtime settings flipped, and (where `limit`)
    our image and the plain one under that CPU limit: interleaved."""
    flipped = flipped_settings(ours)
    variants = [("ours", ours, (), ""), ("plain", plain, (), ""), ("flipped", ours, flipped, "")]
    if limit:
        variants += [("ours_limited", ours, (), limit), ("plain_limited", plain, (), limit)]
    # Under a CPU limit, throughput: the mean time of LIMITED_RUNS times as many runs, so that the
    # timed runs span many CFS periods (100 ms). The median hides the throttling: the runs that fit
    # in the unthrottled part of a period are fast, and the wait for the next period falls on few.
    times: dict[str, dict[str, list[float]]] = {name: {v[0]: [] for v in variants} for name, _, _ in workloads}
    threads = {}
    for round_number in range(rounds):
        for name, script, args in workloads:
            shift = round_number % len(variants)  # each variant goes first in turn
            for which, image, env, cpus in variants[shift:] + variants[:shift]:
                count = runs * LIMITED_RUNS if cpus else runs
                line = example(image, script, [*args, "--runs", str(count)], plain=which.startswith("plain"), env=env, cpus=cpus)
                if "error" in line:
                    raise SystemExit(f"benchmark: {script} failed in the {which} image: {line['error']}")
                times[name][which].append(line["mean_s" if cpus else "median_s"])
                threads[which] = line["threads"]
    rows = {}
    for name, found in times.items():
        median = {which: statistics.median(seconds) for which, seconds in found.items()}
        rows[name] = {
            "ours_s": median["ours"],
            "plain_s": median["plain"],
            "ratio": round(median["plain"] / median["ours"], 3),
            "flipped_s": median["flipped"],
            "flipped_ratio": round(median["flipped"] / median["ours"], 3),
        }
        if limit:
            rows[name].update(
                ours_limited_s=median["ours_limited"],
                plain_limited_s=median["plain_limited"],
                limited_ratio=round(median["plain_limited"] / median["ours_limited"], 3),
            )
    compiled = [example(ours, "compile.py", ["--batch", "8", "--runs", str(runs)], plain=False) for _ in range(rounds)]
    # The plain image has no compiler: what torch.compile itself says there.
    plain_compile = subprocess.run(
        ["docker", "run", "--rm", plain, "python3", "-c", "import torch; torch.compile(lambda x: x * 2)(torch.ones(2))"],
        capture_output=True,
        text=True,
    )
    said = [line for line in plain_compile.stderr.splitlines() if "Error" in line.split(":", 1)[0] or "Compiler" in line]
    plain_said = (said or plain_compile.stderr.strip().splitlines() or [""])[-1][:200]
    ratios = [r["ratio"] for r in rows.values()]
    limited = [r["limited_ratio"] for r in rows.values() if "limited_ratio" in r]
    return {
        "workloads": rows,
        "median_ratio": round(statistics.median(ratios), 3),
        "worst_ratio": min(ratios),
        "cpu_limit": limit,
        "limited_median_ratio": round(statistics.median(limited), 3) if limited else None,
        "limited_worst_ratio": min(limited) if limited else None,
        "compile": {
            "speedup": statistics.median(c["speedup"] for c in compiled),
            "compiled_s": statistics.median(c["median_s"] for c in compiled),
            "eager_s": statistics.median(c["eager_median_s"] for c in compiled),
            "plain_image": "ran" if plain_compile.returncode == 0 else f"fails: {plain_said}",
        },
        "flipped_settings": list(flipped),
        "threads": threads,
        "rounds": rounds,
        "runs_per_round": runs,
    }


# --- 2. toolkit overhead ---------------------------------------------------------------------


def noop_overhead(plan, wheelhouse: str, rounds: int) -> dict:
    """./build.py with nothing changed against the engine's build of the same contexts, interleaved."""
    secrets = BuildSecrets(ca_bundle=Path(os.environ["PIP_CERT"]) if os.environ.get("PIP_CERT") else None)
    toolkit_s, docker_s, same_images = [], [], True
    with tempfile.TemporaryDirectory() as tmp:
        for stage in plan.stages:
            assemble_context(plan, stage, Path(tmp) / stage.name, cached_sources(plan), secrets)
        for _ in range(rounds):
            seconds, summary = toolkit(*README_ARGS, "--torch-wheel", wheelhouse)
            toolkit_s.append(seconds)
            started = time.monotonic()
            for stage in plan.stages:
                built = engine_build(Path(tmp) / stage.name, plan.platform, stage_labels(plan, stage))
                expected = run(["docker", "image", "inspect", "-f", "{{.Id}}", stage.image]).stdout.strip()
                same_images &= built == expected
            docker_s.append(time.monotonic() - started)
    return {
        "toolkit_s": round(statistics.median(toolkit_s), 2),
        "docker_build_s": round(statistics.median(docker_s), 2),
        "ratio": round(statistics.median(toolkit_s) / statistics.median(docker_s), 3),
        "same_images": same_images,
        "checks": summary["checks"],
    }


def repo_copy(dest: Path) -> Path:
    files = run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT).stdout.split()
    for name in files:
        if (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    return dest


def final_only_rebuild(wheelhouse: str) -> dict:
    """A change to the final stage only (an ENV early in its runtime part): only that stage builds."""
    tag = f"bench-{uuid.uuid4().hex[:10]}"
    with tempfile.TemporaryDirectory() as tmp, throwaway_images(tag):
        copy = repo_copy(Path(tmp) / "torchstack")
        template = copy / "templates" / "final.Dockerfile.j2"
        text = template.read_text()
        marker = '{{ common.preamble(stage.parent_image, "runtime") }}\n'
        assert marker in text, "the final template's runtime part moved: update the benchmark"
        template.write_text(text.replace(marker, marker + f"ENV TORCHSTACK_BENCHMARK_CHANGE={tag}\n", 1))
        seconds, summary = toolkit(*README_ARGS, "--torch-wheel", wheelhouse, "--tag", tag, "--no-test", cwd=copy)
    return {"seconds": round(seconds, 1), "stages": {s["stage"]: s["status"] for s in summary["stages"]}}


def cold_build(wheelhouse: str) -> dict:
    """Every step of the chain again (--no-cache), under a tag of its own, removed afterwards."""
    tag = f"bench-cold-{uuid.uuid4().hex[:10]}"
    with throwaway_images(tag):
        seconds, summary = toolkit(*README_ARGS, "--torch-wheel", wheelhouse, "--tag", tag, "--no-cache", "--no-test")
    return {"seconds": round(seconds, 1), "stages": {s["stage"]: round(s["seconds"], 1) for s in summary["stages"]}}


def matrix_planning(catalog) -> dict:
    """Planning every allowed build, and rendering each of its stages' Dockerfiles, in seconds."""
    started = time.monotonic()
    found = jobs(catalog, {}, torch_from="source")
    dockerfiles = 0
    for job in found:
        plan = make_plan(catalog, Request(backend=job.backend, arch=job.arch, build_target=job.target, distribution=job.distribution))
        for stage in plan.stages:
            render_dockerfile(plan, stage)
            dockerfiles += 1
    command_s, _ = timed([sys.executable, str(ROOT / "build.py"), "matrix", "--format", "github"])
    return {
        "jobs": len(found),
        "dockerfiles": dockerfiles,
        "plan_and_render_s": round(time.monotonic() - started - command_s, 2),
        "matrix_command_s": round(command_s, 2),
    }


# --- 3. size ---------------------------------------------------------------------------------


def packages(image: str) -> dict[str, int]:
    """Debian packages in `image` and their installed size in bytes."""
    out = run(["docker", "run", "--rm", "--entrypoint", "dpkg-query", image, "-W", "-f", "${Package}\t${Installed-Size}\n"]).stdout
    return {name: int(size or 0) * 1024 for name, size in (line.split("\t") for line in out.splitlines())}


def du(image: str, *paths: str) -> int:
    if not paths:
        return 0
    out = run(["docker", "run", "--rm", "--entrypoint", "du", image, "-sbxc", *paths]).stdout
    return int(out.splitlines()[-1].split()[0])


def image_size(image: str) -> int:
    return int(run(["docker", "image", "inspect", "-f", "{{.Size}}", image]).stdout)


def sizes(ours: str, plain: str, os_image: str) -> dict:
    info = json.loads(run(["docker", "image", "inspect", "-f", '{{index .Config.Labels "io.torchstack.build-info"}}', ours]).stdout)
    os_packages, our_packages, plain_packages = packages(os_image), packages(ours), packages(plain)
    added = sum(size for name, size in our_packages.items() if name not in os_packages)
    toolchain = sum(size for name, size in our_packages.items() if name not in plain_packages)
    venv = du(ours, info["venv"])
    libraries = du(ours, *sorted({lib["directory"] for lib in info["payload"]["libraries"]}))
    toolkit_files = du(ours, "/opt/torchstack")
    payload = image_size(os_image) + venv + libraries + added + toolkit_files
    final, plain_size = image_size(ours), image_size(plain)
    return {
        "final": final,
        "os_image": image_size(os_image),
        "venv": venv,
        "compiled_libraries": libraries,
        "debian_packages_added": added,
        "toolkit_files": toolkit_files,
        "payload": payload,
        "final_over_payload": round(final / payload, 3),
        "plain": plain_size,
        "toolchain": toolchain,
        "plain_plus_toolchain": plain_size + toolchain,
        "final_within_plain_plus_toolchain": final <= plain_size + toolchain,
    }


# --- the report ------------------------------------------------------------------------------


def recorded(script: str) -> dict:
    """What every result says of itself: its date, the command that made it, the machine it ran on."""
    return {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        "command": " ".join([".venv/bin/python", f"benchmarks/{script}", *sys.argv[1:]]),
        "machine": {"cpu": cpu_model(), "cores": len(os.sched_getaffinity(0)), "arch": platform.machine()},
    }


def emit(result: dict, path: Path | None) -> None:
    """A benchmark's result: printed, and written to `path` (its --json) where one is given."""
    print(json.dumps(result, indent=2))
    if path:
        path.write_text(json.dumps(result, indent=2) + "\n")


def cpu_model() -> str:
    with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def verdict(holds: bool) -> str:
    return "holds" if holds else "MISSED"


def report(figures: dict) -> str:
    mib = 2**20
    lines = [
        f"torchstack benchmarks, {figures['date']}: {figures['machine']['cpu']}, {figures['machine']['cores']} cores, "
        f"{figures['machine']['arch']}{' (emulated: reported, not compared)' if figures['machine']['emulated'] else ''}"
    ]
    inf = figures["inference"]
    limit = inf["cpu_limit"]
    threads = ", ".join(f"{which} {count}" for which, count in inf["threads"].items())
    lines += [
        "",
        f"1. inference, median seconds per run ({inf['rounds']} interleaved rounds x {inf['runs_per_round']} runs; threads: {threads})",
        f"   {'workload':<24}{'ours':>10}{'plain pip':>11}{'ratio':>8}{'settings flipped':>18}{'ratio':>8}"
        + (f"{f'ours --cpus={limit}':>16}{'plain':>10}{'ratio':>8}" if limit else ""),
    ]
    for name, row in inf["workloads"].items():
        lines.append(
            f"   {name:<24}{row['ours_s']:>10.4f}{row['plain_s']:>11.4f}{row['ratio']:>7.2f}x"
            f"{row['flipped_s']:>18.4f}{row['flipped_ratio']:>7.2f}x"
            + (f"{row['ours_limited_s']:>16.4f}{row['plain_limited_s']:>10.4f}{row['limited_ratio']:>7.2f}x" if limit else "")
        )
    lines.append(f"   settings flipped (docker run -e): {' '.join(inf['flipped_settings']) or 'none'}; ratio = flipped time / our time")
    if limit:
        lines.append(
            f"   under --cpus={limit}: mean seconds per run over {LIMITED_RUNS}x the runs (throughput; "
            "the median hides the quota's throttling)"
        )
    goals = figures["goals"]
    lines.append(
        f"   median ratio {inf['median_ratio']:.2f}x (goal >= {GOALS['eager_median_ratio']}x: "
        f"{verdict(goals['eager_median_ratio'])}); worst {inf['worst_ratio']:.2f}x "
        f"(goal >= {GOALS['eager_worst_ratio']}x: {verdict(goals['eager_worst_ratio'])})"
    )
    if limit:
        lines.append(
            f"   under --cpus={limit} of {figures['machine']['cores']} cores: median ratio {inf['limited_median_ratio']:.2f}x "
            f"(goal >= {GOALS['limited_median_ratio']}x: {verdict(goals['limited_median_ratio'])}); worst "
            f"{inf['limited_worst_ratio']:.2f}x (goal >= {GOALS['limited_worst_ratio']}x: {verdict(goals['limited_worst_ratio'])})"
        )
    else:
        lines.append("   no CPU limit below this host's single core to measure under")
    comp = inf["compile"]
    lines.append(
        f"   torch.compile in ours: {comp['speedup']:.2f}x eager (goal >= {GOALS['compile_speedup']}x: "
        f"{verdict(goals['compile_speedup'])}); in the plain image: {comp['plain_image']}"
    )
    over = figures["overhead"]
    noop = over["noop"]
    lines += [
        "",
        "2. toolkit overhead",
        f"   no-op rebuild: ./build.py {noop['toolkit_s']:.2f} s, the engine's build of the same contexts {noop['docker_build_s']:.2f} s: "
        f"{noop['ratio']:.2f}x (goal <= {GOALS['noop_overhead']}x: {verdict(goals['noop_overhead'])}); "
        f"same image IDs: {noop['same_images']}; checks: {noop['checks']}",
    ]
    if "final_only" in over:
        final_only, cold = over["final_only"], over["cold"]
        rebuilt = [s for s, status in final_only["stages"].items() if status != "cached"]
        lines.append(
            f"   change to the final stage only: {final_only['seconds']:.0f} s, rebuilt: {', '.join(rebuilt)}; "
            f"cold build {cold['seconds']:.0f} s; ratio {final_only['seconds'] / cold['seconds']:.2f}"
        )
    mat = over["matrix"]
    lines.append(
        f"   whole matrix: {mat['jobs']} builds planned, {mat['dockerfiles']} Dockerfiles rendered in "
        f"{mat['plan_and_render_s']:.2f} s; `./build.py matrix --format github` {mat['matrix_command_s']:.2f} s"
    )
    size = figures["size"]
    lines += [
        "",
        "3. size (MiB)",
        f"   final image {size['final'] / mib:,.0f}; payload {size['payload'] / mib:,.0f} = OS image {size['os_image'] / mib:,.0f}"
        f" + venv {size['venv'] / mib:,.0f} + compiled libraries {size['compiled_libraries'] / mib:,.0f}"
        f" + Debian packages {size['debian_packages_added'] / mib:,.0f} + examples and build-info {size['toolkit_files'] / mib:,.2f}",
        f"   final / payload {size['final_over_payload']:.3f} "
        f"(goal <= {GOALS['final_over_payload']}: {verdict(goals['final_over_payload'])})",
        f"   plain pip image {size['plain'] / mib:,.0f} + toolchain {size['toolchain'] / mib:,.0f} "
        f"= {size['plain_plus_toolchain'] / mib:,.0f}: "
        f"final no larger: {verdict(size['final_within_plain_plus_toolchain'])}",
    ]
    if "cold" in over:
        stages = ", ".join(f"{s} {t:.0f} s" for s, t in over["cold"]["stages"].items())
        lines += [
            "",
            f"4. cold build per stage: {stages}; total {over['cold']['seconds']:.0f} s",
            "   (a cold `bash .ci/run`: see the README, measured with a fresh host)",
        ]
    lines += ["", f"plain image built in {figures['plain_build_s']:.0f} s; whole benchmark {figures['seconds']:.0f} s"]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds per workload (default 5)")
    parser.add_argument("--runs", type=int, default=20, help="timed runs inside each example run (default 20)")
    parser.add_argument(
        "--cpus",
        help="the CPU limit of the deployment case, as docker run --cpus takes it (default: half the host's cores; '' leaves the case out)",
    )
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--short", action="store_true", help="one round of two small workloads; no cold or final-stage build")
    parser.add_argument(
        "--wheelhouse", default=os.environ.get("PIP_FIND_LINKS"), help="folder of the torch wheel (default $PIP_FIND_LINKS)"
    )
    args = parser.parse_args()
    if not args.wheelhouse:
        raise SystemExit("benchmark: name the torch wheel's folder with --wheelhouse or $PIP_FIND_LINKS")
    if args.short:
        args.rounds, args.runs = 1, 3
    started = time.monotonic()

    catalog = load_catalog()
    plan = readme_plan(catalog, args.wheelhouse)
    _, built = toolkit(*README_ARGS, "--torch-wheel", args.wheelhouse)
    ours = built["final_image"]
    if ours != plan.final_image:
        raise SystemExit(f"benchmark: the README's build made {ours}, the plan here says {plan.final_image}")
    plain, plain_build_s = plain_image(plan.base_image, plan.torch_wheel_file)

    figures = {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        "command": " ".join(["python3", "benchmarks/run.py", *sys.argv[1:]]),
        "machine": {"cpu": cpu_model(), "cores": os.cpu_count(), "arch": plan.arch.name, "emulated": plan.emulated},
        "images": {"ours": ours, "plain": plain},
        "plain_build_s": round(plain_build_s, 1),
        "inference": inference(
            ours,
            plain,
            SHORT_WORKLOADS if args.short else WORKLOADS,
            args.rounds,
            args.runs,
            args.cpus if args.cpus is not None else cpu_limit(os.cpu_count() or 1),
        ),
        "overhead": {"noop": noop_overhead(plan, args.wheelhouse, args.rounds), "matrix": matrix_planning(catalog)},
        "size": sizes(ours, plain, plan.base_image),
    }
    if not args.short:
        figures["overhead"]["final_only"] = final_only_rebuild(args.wheelhouse)
        figures["overhead"]["cold"] = cold_build(args.wheelhouse)
    inf, over, size = figures["inference"], figures["overhead"], figures["size"]
    figures["goals"] = {
        "eager_median_ratio": inf["median_ratio"] >= GOALS["eager_median_ratio"],
        "eager_worst_ratio": inf["worst_ratio"] >= GOALS["eager_worst_ratio"],
        "limited_median_ratio": inf["cpu_limit"] != "" and inf["limited_median_ratio"] >= GOALS["limited_median_ratio"],
        "limited_worst_ratio": inf["cpu_limit"] != "" and inf["limited_worst_ratio"] >= GOALS["limited_worst_ratio"],
        "compile_speedup": inf["compile"]["speedup"] >= GOALS["compile_speedup"],
        "noop_overhead": over["noop"]["ratio"] <= GOALS["noop_overhead"],
        "final_over_payload": size["final_over_payload"] <= GOALS["final_over_payload"],
        "final_within_plain_plus_toolchain": size["final_within_plain_plus_toolchain"],
    }
    figures["seconds"] = round(time.monotonic() - started, 1)
    print(report(figures))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
