"""torch.compile of a model against eager mode: the same results, and the speed-up.

    python3 compile.py [--batch 8] [--image-size 224] [--benchmark]

Inductor generates C++ for the CPU and compiles it, so it needs a C++ compiler and the Python
headers at run time: torchstack's default images ship them, its slim images do not.
Freezing (weights folded in as constants) is on, as for inference it should be.
"""

import shutil
import statistics
import sys

import torch
import torch._inductor.config
from _bench import options, report, seconds_per_run
from resnet import resnet
from torch._inductor import cpu_vec_isa


def main() -> None:
    args = options(__doc__.splitlines()[0], image_size=64)
    if shutil.which("g++") is None and shutil.which("c++") is None:
        print(
            "compile: torch.compile needs a C++ compiler, and this image has none (a slim runtime); "
            "run the model in eager mode, or use the default image",
            file=sys.stderr,
        )
        sys.exit(3)
    torch.manual_seed(0)
    model = resnet(widths=(32, 64, 128, 256)).eval()
    images = torch.randn(args.batch, 3, args.image_size, args.image_size)
    torch._inductor.config.freezing = True
    compiled = torch.compile(model)
    with torch.inference_mode():
        eager_out, compiled_out = model(images), compiled(images)
    torch.testing.assert_close(compiled_out, eager_out, rtol=1e-3, atol=1e-3)
    if args.benchmark:
        eager, fast = [], []
        for _ in range(args.runs):  # interleaved, so that drift hits both alike
            eager += seconds_per_run(lambda: model(images), 1, 0 if eager else args.warmup)
            fast += seconds_per_run(lambda: compiled(images), 1, 0 if fast else args.warmup)
        report(
            "compile",
            args,
            fast,
            items=args.batch,
            image_size=args.image_size,
            eager_median_s=round(statistics.median(eager), 6),
            speedup=round(statistics.median(eager) / statistics.median(fast), 3),
        )
    else:
        print(
            f"compile: torch.compile of a ResNet-style model on {args.batch} image(s) matches eager mode; "
            f"Inductor's vector ISA: {vec_isa_name()}"
        )


def vec_isa_name() -> str:
    """The vector ISA Inductor compiles its kernels for, by Inductor's own name of it ("avx2", "avx512
    avx512_vnni", "asimd"...), or "none" where it found none and generates scalar code."""
    isa = cpu_vec_isa.pick_vec_isa()
    return str(isa) if isa else "none"


if __name__ == "__main__":
    main()
