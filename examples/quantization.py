"""int8 dynamic quantization of a Linear-heavy model: smaller weights, results close to float.

    python3 quantization.py [--batch 8] [--engine qnnpack] [--benchmark]

Dynamic quantization stores Linear weights as int8 and quantizes activations on the fly. It needs
a quantized engine in the torch build (x86, fbgemm, onednn or qnnpack); a build without one says so.
"""

import io
import statistics
import sys
import warnings

import torch
from _bench import options, report, seconds_per_run
from torch import nn


def size_mib(model: nn.Module) -> float:
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    return buffer.tell() / 2**20


def main() -> None:
    args = options(__doc__.splitlines()[0], width=1024, engine="")
    engines = [e for e in torch.backends.quantized.supported_engines if e != "none"]
    if not engines:
        print("quantization: this torch build has no quantized engine; nothing to run", file=sys.stderr)
        return
    if args.engine:  # default: the one torch picks for this CPU
        if args.engine not in engines:
            sys.exit(f"quantization: --engine {args.engine}: this torch build has {', '.join(engines)}")
        torch.backends.quantized.engine = args.engine
    torch.manual_seed(0)
    width = args.width
    model = nn.Sequential(nn.Linear(width, 4 * width), nn.ReLU(), nn.Linear(4 * width, width), nn.ReLU(), nn.Linear(width, 10)).eval()
    # torch.ao.quantization and quantized dtypes are deprecated for torchao, which builds on the same kernels.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", UserWarning)
        quantized = torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)
    x = torch.randn(args.batch, width)
    with torch.inference_mode():
        expected, got = model(x), quantized(x)
    error = float((got - expected).norm() / expected.norm())
    assert error < 0.05, f"int8 results are {error:.1%} off the float results"
    if args.benchmark:
        times = seconds_per_run(lambda: quantized(x), args.runs, args.warmup)
        float_times = seconds_per_run(lambda: model(x), args.runs, args.warmup)
        report(
            "quantization",
            args,
            times,
            items=args.batch,
            engine=torch.backends.quantized.engine,
            float_median_s=round(statistics.median(float_times), 6),
            relative_error=round(error, 5),
        )
    else:
        print(
            f"quantization: int8 weights on the {torch.backends.quantized.engine} engine, "
            f"{size_mib(model):.1f} -> {size_mib(quantized):.1f} MiB, {error:.2%} off the float results"
        )


if __name__ == "__main__":
    main()
