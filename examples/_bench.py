"""What every example shares: its command line, timing (warm-up, several runs, median) and one
JSON line of results in --benchmark mode. Not an example itself."""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Callable

import torch


def options(description: str, batch: int = 1, **defaults: int | str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "--benchmark", action="store_true", help="time the workload (warm-up, several runs, median) and print one JSON line"
    )
    parser.add_argument("--batch", type=int, default=batch, help=f"batch size (default {batch})")
    parser.add_argument("--runs", type=int, default=10, help="timed runs in --benchmark mode (default 10)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed runs first (default 3)")
    for name, value in defaults.items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(value), default=value, help=f"(default {value!r})")
    return parser.parse_args()


def seconds_per_run(work: Callable[[], object], runs: int, warmup: int) -> list[float]:
    with torch.inference_mode():
        for _ in range(warmup):
            work()
        times = []
        for _ in range(runs):
            started = time.perf_counter()
            work()
            times.append(time.perf_counter() - started)
    return times


def report(example: str, args: argparse.Namespace, times: list[float], items: int | None = None, **extra) -> None:
    """One JSON line: the median time of a run and, with `items` (images, tokens) per run, a rate;
    and the mean (`mean_s`: throughput, which the median hides where a CPU quota throttles the
    process for part of each period)."""
    median = statistics.median(times)
    result = {
        "example": example,
        "batch": args.batch,
        "runs": len(times),
        "median_s": round(median, 6),
        "mean_s": round(statistics.fmean(times), 6),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "machine": platform.machine(),
    }
    if items is not None:
        result["per_s"] = round(items / median, 2)
    result.update(extra)
    print(json.dumps(result))
