#!/usr/bin/env python3
"""The benchmarks' results as Markdown: every benchmarks/results/*.json, one row per figure with its goal.

    .venv/bin/python benchmarks/table.py > benchmarks/README.md

Reads what benchmarks/run.py and benchmarks/refresh.py write with --json (standard library only,
no engine); the goals of run.py's figures are read from run.py's GOALS, the verdicts from the result.
"""

from __future__ import annotations

import ast
import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
MIB = 2**20

INTRO = """\
# Benchmarks

What the images and the toolkit cost and deliver, each figure measured side by side in one run so
that a ratio holds on a noisy host. Each benchmark needs a build host with a running Docker engine
(`bash scripts/setup-host.sh --tests`), runs with the toolkit's venv (`.venv/bin/python`) and writes
nothing into the checkout unless told to.

- **run**: `.venv/bin/python benchmarks/run.py [--rounds 5] [--runs 20] [--cpus N] --json benchmarks/results/run.json`.
  The README's image against a plain Debian image with the same torch wheel installed by pip alone
  (eager inference without and under a CPU limit, torch.compile), `./build.py` against the engine's own
  build of the same contexts, image size against its payload, build time per stage.
- **refresh**: `.venv/bin/python benchmarks/refresh.py --json benchmarks/results/refresh.json`. A Debian
  security fix's refresh of the README's image against a cold build of it.
- **warm**: `.venv/bin/python benchmarks/warm.py --image IMAGE --json benchmarks/results/warm.json`. A new
  container's whole `docker run` to its first compiled answer: the model compiled at run time against
  the package the image baked when it was built.
- **pull**: `.venv/bin/python benchmarks/pull.py --image IMAGE --json benchmarks/results/pull.json`. A new
  node's pull and unpack of an image from a loopback registry, zstd layers against gzip, with
  containerd's `ctr` (what Kubernetes nodes run) and with Podman.
- **lazy**: `.venv/bin/python benchmarks/lazy.py --image IMAGE --json benchmarks/results/lazy.json` (as root).
  A new node's first answer from the README image, from the request to the baked model's answer on an
  empty containerd node with SOCI's snapshotter: started lazily from the image's SOCI index
  (`--lazy soci`) against after a plain pull, from a loopback registry.
- **first_build**: `.venv/bin/python benchmarks/first_build.py --json benchmarks/results/first_build.json` (as
  root). The README's build on an engine of its own with an empty data root and an empty toolkit
  cache, as on a new host: the bootstrap, each stage and the checks.
- **size**: `.venv/bin/python benchmarks/size.py --image IMAGE --vs OTHER --json benchmarks/results/size.json`. The
  README image as a new node pays for it (its size against its payload, its layers as pushed, a pull and
  unpack with containerd's `ctr`) against another build of the same request, side by side.
- **child**: `.venv/bin/python benchmarks/child.py --image IMAGE --json benchmarks/results/child.json`. The
  docs' child image that bakes a model, built on the README image: what it adds against what it must
  carry (its app and the baked package).
- **checks**: `.venv/bin/python benchmarks/checks.py --image IMAGE --json benchmarks/results/checks.json`. One
  check run of the README image (`./build.py test IMAGE`, three times): the seconds the command reports, and
  the host's CPU-seconds over it.
- **qemu**: `.venv/bin/python benchmarks/qemu.py --image ARM64-IMAGE --vs /usr/bin/qemu-aarch64-static --json
  benchmarks/results/qemu.json`. Emulated Python under the qemu-user that `scripts/setup-host.sh`
  installs against bookworm's qemu-user-static.

Both take the torch wheel's folder with `--wheelhouse DIR` (default `$PIP_FIND_LINKS`). `--short` is
the test suite's quick mode of `run.py`. Ratios: "plain / ours" above 1 means our image is faster;
under a CPU limit the times are means over more runs (throughput), since the median hides the quota's
throttling. The gap under a CPU limit grows with the ratio of the host's cores to the limit.

This file is generated from `benchmarks/results/*.json`: after a run, regenerate it with
`.venv/bin/python benchmarks/table.py > benchmarks/README.md`.
"""


def run_goals() -> dict[str, float]:
    """run.py's GOALS, read from its source (importing it would need the toolkit's dependencies)."""
    tree = ast.parse((HERE / "run.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "GOALS" for t in node.targets):
            return ast.literal_eval(node.value)
    return {}


def verdict(holds: bool | None) -> str:
    return "" if holds is None else ("holds" if holds else "missed")


def goal(text: str, holds: bool | None) -> str:
    return f"{text}: {verdict(holds)}" if holds is not None else text


def cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def run_figures(result: dict) -> list[tuple[str, str, str]]:
    """(figure, measured, goal) rows of a benchmarks/run.py result."""
    goals, met = run_goals(), result.get("goals", {})
    inf, over, size = result.get("inference", {}), result.get("overhead", {}), result.get("size", {})
    rows = []

    def ratio(label: str, value: float | None, key: str, sign: str = ">=", unit: str = "x", detail: str = "") -> None:
        if value is None:
            return
        target = f"{sign} {goals[key]}{unit}" if key in goals else ""
        rows.append((label, f"{value:.2f}{unit}{detail}", goal(target, met.get(key)) if target else ""))

    workloads = inf.get("workloads", {})
    worst = min(workloads, key=lambda name: workloads[name]["ratio"]) if workloads else ""
    ratio("eager, median plain / ours", inf.get("median_ratio"), "eager_median_ratio")
    ratio("eager, worst workload", inf.get("worst_ratio"), "eager_worst_ratio", detail=f" ({worst})" if worst else "")
    if inf.get("cpu_limit"):
        limit = inf["cpu_limit"]
        limited = [name for name in workloads if "limited_ratio" in workloads[name]]
        worst_limited = min(limited, key=lambda name: workloads[name]["limited_ratio"]) if limited else ""
        ratio(f"eager under `--cpus={limit}`, median plain / ours", inf.get("limited_median_ratio"), "limited_median_ratio")
        ratio(
            f"eager under `--cpus={limit}`, worst workload",
            inf.get("limited_worst_ratio"),
            "limited_worst_ratio",
            detail=f" ({worst_limited})" if worst_limited else "",
        )
    compiled = inf.get("compile", {})
    ratio("torch.compile / eager, ours", compiled.get("speedup"), "compile_speedup")
    if "plain_image" in compiled:
        rows.append(("torch.compile in the plain image", compiled["plain_image"], ""))
    noop = over.get("noop")
    if noop:
        detail = f" ({noop['toolkit_s']:.2f} s / {noop['docker_build_s']:.2f} s)"
        ratio("no-op rebuild, `./build.py` / the engine's build", noop.get("ratio"), "noop_overhead", "<=", detail=detail)
    if "final_only" in over and "cold" in over:
        final_only, cold = over["final_only"], over["cold"]
        rebuilt = ", ".join(stage for stage, status in final_only.get("stages", {}).items() if status != "cached")
        rows.append(
            (
                "change to the final stage only / cold build",
                f"{final_only['seconds']:.0f} s / {cold['seconds']:.0f} s = {final_only['seconds'] / cold['seconds']:.2f}"
                + (f" (rebuilt: {rebuilt})" if rebuilt else ""),
                "",
            )
        )
    matrix = over.get("matrix")
    if matrix:
        rows.append(
            (
                f"whole matrix: {matrix['jobs']} builds, {matrix['dockerfiles']} Dockerfiles rendered",
                f"{matrix['plan_and_render_s']:.2f} s; `matrix --format github` {matrix['matrix_command_s']:.2f} s",
                "",
            )
        )
    if "final_over_payload" in size:
        detail = f" ({size['final'] / MIB:,.0f} / {size['payload'] / MIB:,.0f} MiB)"
        ratio("final image / payload", size["final_over_payload"], "final_over_payload", "<=", unit="", detail=detail)
    if "final_within_plain_plus_toolchain" in size:
        rows.append(
            (
                "final image against plain pip image + toolchain",
                f"{size['final'] / MIB:,.0f} MiB against {size['plain'] / MIB:,.0f} + {size['toolchain'] / MIB:,.0f} MiB",
                goal("no larger", size["final_within_plain_plus_toolchain"]),
            )
        )
    if "cold" in over:
        stages = ", ".join(f"{stage} {seconds:.0f} s" for stage, seconds in over["cold"]["stages"].items())
        rows.append(("cold build per stage", f"{stages}; total {over['cold']['seconds']:.0f} s", ""))
    return rows


def refresh_figures(result: dict) -> list[tuple[str, str, str]]:
    """(figure, measured, goal) rows of a benchmarks/refresh.py result."""
    refresh, cold = result["refresh"], result["cold"]
    upgraded = "; ".join(refresh.get("upgraded", []))
    measured = f"{refresh['seconds']:.1f} s / {cold['seconds']:.1f} s = {result['refresh_cold_ratio']:.3f}"
    rows = [("a security fix's refresh / cold build", measured, goal(result.get("goal", ""), result.get("goal_met")))]
    if upgraded:
        rows.append(("upgraded in the refresh", upgraded, ""))
    return rows


def qemu_figures(result: dict) -> list[tuple[str, str, str]]:
    """(figure, measured, goal) rows of a benchmarks/qemu.py result."""
    ours, theirs = result["ours"], result["theirs"]
    measured = f"{ours['median_s']:.2f} s / {theirs['median_s']:.2f} s = {result['qemu_ratio']:.3f}"
    return [(f"emulated Python: {ours['qemu']} / {theirs['qemu']}", measured, "")]


def warm_figures(result: dict) -> list[tuple[str, str, str]]:
    """(figure, measured, goal) rows of a benchmarks/warm.py result."""
    baked, cold = result["baked"], result["cold"]
    measured = f"{baked['median_s']:.1f} s / {cold['median_s']:.1f} s = {result['baked_cold_ratio']:.3f}"
    return [("a new container's first compiled answer, baked / compiled at run time", measured, goal(result["goal"], result["goal_met"]))]


def pull_figures(result: dict) -> list[tuple[str, str, str]]:
    """(figure, measured, goal) rows of a benchmarks/pull.py result."""
    sizes, goals = result["sizes_mib"], result["goals"]

    def within(ratio: float, wanted: str) -> bool:
        return ratio <= float(wanted.split()[-1])

    size = result["zstd_gzip_size_ratio"]
    measured = f"{sizes['zstd']:,.0f} MiB / {sizes['gzip']:,.0f} MiB = {size:.3f}"
    rows = [("layers, zstd / gzip", measured, goal(f"zstd_gzip_size_ratio {goals['size']}", within(size, goals["size"])))]
    for tool, by in result["pull_s"].items():
        ratio = result[f"zstd_gzip_pull_ratio_{tool}"]
        medians = {name: statistics.median(runs) for name, runs in by.items()}
        measured = f"{medians['zstd']:.1f} s / {medians['gzip']:.1f} s = {ratio:.3f}"
        wanted = f"zstd_gzip_pull_ratio_{tool} {goals['pull']}"
        rows.append((f"pull and unpack ({tool}), zstd / gzip", measured, goal(wanted, within(ratio, goals["pull"]))))
    return rows


def lazy_figures(result: dict) -> list[tuple[str, str, str]]:
    """(figure, measured, goal) rows of a benchmarks/lazy.py result."""
    medians = {name: statistics.median(runs) for name, runs in result["first_answer_s"].items()}
    goals = result["goals"]
    measured = f"{medians['lazy']:.1f} s / {medians['plain']:.1f} s = {result['lazy_plain_ratio']:.3f}"
    wanted = f"lazy {goals['lazy_s']} s, lazy / plain {goals['ratio']}"
    return [
        ("a new node's first answer, lazily (SOCI) / after a plain pull", measured, goal(wanted, result["goals_met"])),
        ("making and pushing the SOCI index (`--lazy soci`)", f"{result['index_s']:.0f} s", ""),
    ]


def size_figures(result: dict) -> list[tuple[str, str, str]]:
    """(figure, measured, goal) rows of a benchmarks/size.py result."""
    ours, other = result["mib"]["image"], result["mib"]["vs"]
    wanted = f"image / payload {result['goals']['image_over_payload']}"
    return [
        (
            "image / payload",
            f"{result['image_over_payload']:.2f} ({ours['size']:,.0f} / {ours['payload']:,.0f} MiB); before: "
            f"{result['vs_over_payload']:.2f} ({other['size']:,.0f} / {other['payload']:,.0f} MiB)",
            goal(wanted, result["goals_met"]),
        ),
        ("size, image / before", f"{ours['size']:,.0f} MiB / {other['size']:,.0f} MiB = {result['size_ratio']:.3f}", ""),
        (
            "layers as pushed (gzip), image / before",
            f"{ours['pushed']:,.0f} MiB / {other['pushed']:,.0f} MiB = {result['pushed_ratio']:.3f}",
            "",
        ),
        (
            "pull and unpack (ctr), image / before",
            f"{statistics.median(result['pull_s']['image']):.1f} s / {statistics.median(result['pull_s']['vs']):.1f} s = "
            f"{result['pull_ratio']:.3f}",
            "",
        ),
    ]


def child_figures(result: dict) -> list[tuple[str, str, str]]:
    """(figure, measured, goal) rows of a benchmarks/child.py result."""
    mib = result["mib"]
    return [
        (
            "the docs' baking child: added / carried (its app and package)",
            f"{mib['added']:,.1f} MiB / {mib['carried']:,.1f} MiB = {result['child_added_over_carried']:.2f} "
            f"(image {mib['image']:,.0f} MiB, child {mib['child']:,.0f} MiB)",
            goal(f"added / carried {result['goal']}", result["goal_met"]),
        )
    ]


def checks_figures(result: dict) -> list[tuple[str, str, str]]:
    """(figure, measured, goal) rows of a benchmarks/checks.py result."""
    runs = result["runs"]
    return [
        (
            "one check run of the image, the test command's own figure (median)",
            f"{result['check_run_median_s']:.0f} s (runs: {', '.join(str(run['reported_s']) + ' s' for run in runs)}; "
            f"host CPU {statistics.median(run['host_cpu_s'] for run in runs):.0f} s per run; {runs[0]['summary']})",
            goal(f"median {result['goal']}", result["goal_met"]),
        )
    ]


def first_build_figures(result: dict) -> list[tuple[str, str, str]]:
    """(figure, measured, goal) rows of a benchmarks/first_build.py result."""
    stages = ", ".join(f"{stage} {seconds:.0f} s" for stage, seconds in result["stages_s"].items())
    return [
        (
            "the README's build on an empty engine, set-up not included",
            f"{result['build_s']:.0f} s",
            f"first command <= {result['total_goal_s']} s",
        ),
        ("its parts", f"bootstrap {result['bootstrap_s'] or 0:.0f} s; {stages}; checks {result['checks_s']:.0f} s", ""),
    ]


def benchmark_of(result: dict) -> tuple[str, list[tuple[str, str, str]]]:
    if "stages_s" in result:
        return "first_build", first_build_figures(result)
    if "image_over_payload" in result:
        return "size", size_figures(result)
    if "child_added_over_carried" in result:
        return "child", child_figures(result)
    if "check_run_median_s" in result:
        return "checks", checks_figures(result)
    if "lazy_plain_ratio" in result:
        return "lazy", lazy_figures(result)
    if "zstd_gzip_size_ratio" in result:
        return "pull", pull_figures(result)
    if "baked_cold_ratio" in result:
        return "warm", warm_figures(result)
    if "qemu_ratio" in result:
        return "qemu", qemu_figures(result)
    if "refresh_cold_ratio" in result:
        return "refresh", refresh_figures(result)
    if "inference" in result:
        return "run", run_figures(result)
    raise SystemExit(f"table: a result of no known benchmark (keys: {', '.join(sorted(result))})")


def machine(result: dict) -> str:
    found = result.get("machine", {})
    text = f"{found.get('cpu', '?')}, {found.get('cores', '?')} cores, {found.get('arch', '?')}"
    return text + (" (emulated)" if found.get("emulated") else "")


def workloads_table(result: dict) -> list[str]:
    """Per workload: seconds in each image and the ratios, for a run.py result."""
    inf = result.get("inference", {})
    workloads, limit = inf.get("workloads", {}), inf.get("cpu_limit")
    if not workloads:
        return []
    header = "| workload | ours | plain pip | plain / ours | settings flipped | flipped / ours |"
    rule = "|---|---|---|---|---|---|"
    if limit:
        header += f" ours, `--cpus={limit}` | plain, `--cpus={limit}` | plain / ours |"
        rule += "---|---|---|"
    lines = [header, rule]
    for name, row in workloads.items():
        line = (
            f"| {cell(name)} | {row['ours_s']:.4f} | {row['plain_s']:.4f} | {row['ratio']:.2f}x"
            f" | {row['flipped_s']:.4f} | {row['flipped_ratio']:.2f}x |"
        )
        if limit and "limited_ratio" in row:
            line += f" {row['ours_limited_s']:.4f} | {row['plain_limited_s']:.4f} | {row['limited_ratio']:.2f}x |"
        lines.append(line)
    rounds, runs = inf.get("rounds"), inf.get("runs_per_round")
    threads = ", ".join(f"{which} {count}" for which, count in inf.get("threads", {}).items())
    notes = [f"{rounds} interleaved rounds x {runs} runs, median seconds per run" if rounds and runs else ""]
    if limit:
        notes.append(f"under `--cpus={limit}`: mean seconds per run over more runs (throughput)")
    if threads:
        notes.append(f"threads: {threads}")
    notes.append("settings flipped: our image with each runtime default the other way round (`docker run -e`)")
    return lines + ["", "; ".join(note for note in notes if note) + "."]


def render(results: list[tuple[str, dict]]) -> str:
    out = [INTRO, "## Results", ""]
    out += ["| benchmark | date | CPU | command | figure | measured | goal |", "|---|---|---|---|---|---|---|"]
    ordered = sorted(results, key=lambda item: (benchmark_of(item[1])[0], item[1].get("date", "")))
    notes = []
    for name, result in ordered:
        benchmark, rows = benchmark_of(result)
        first = f"{benchmark} | {result.get('date', '?')} | {cell(machine(result))} | `{cell(result.get('command', '?'))}`"
        for index, (figure, measured, target) in enumerate(rows):
            lead = first if index == 0 else " | | |"
            out.append(f"| {lead} | {cell(figure)} | {cell(measured)} | {cell(target)} |")
        for key in ("note", "source"):
            if result.get(key):
                notes.append(f"- {benchmark}, {result.get('date', '?')} (`results/{name}`): {result[key]}")
    if notes:
        out += ["", "Notes:", "", *notes]
    for name, result in ordered:
        table = workloads_table(result)
        if table:
            out += ["", f"### Inference per workload, {result.get('date', '?')} (`results/{name}`)", "", *table]
    return "\n".join(out) + "\n"


def main() -> None:
    if len(sys.argv) > 1:
        raise SystemExit(__doc__.strip())
    results = [(path.name, json.loads(path.read_text())) for path in sorted(RESULTS.glob("*.json"))]
    sys.stdout.write(render(results))


if __name__ == "__main__":
    main()
