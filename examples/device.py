"""Device-agnostic code: runs on an accelerator when a plugin provides one, on the CPU otherwise.

    python3 device.py [--batch 8] [--benchmark]

torch.accelerator names the current accelerator (CUDA, XPU, or a plugin's device such as IBM's
`nnpa` on z16/z17); the same model runs there and is checked against the CPU.
"""

import torch
from _bench import options, report, seconds_per_run
from torch import nn


def pick_device() -> torch.device:
    if torch.accelerator.is_available():
        return torch.accelerator.current_accelerator()
    return torch.device("cpu")


def main() -> None:
    args = options(__doc__.splitlines()[0])
    device = pick_device()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.GELU(), nn.Linear(512, 256)).eval()
    x = torch.randn(args.batch, 256)
    with torch.inference_mode():
        expected = model(x)
        model.to(device)
        got = model(x.to(device)).cpu()
    torch.testing.assert_close(got, expected, rtol=1e-3, atol=1e-3)
    if args.benchmark:
        inputs = x.to(device)
        times = seconds_per_run(lambda: model(inputs), args.runs, args.warmup)
        report("device", args, times, items=args.batch, device=str(device))
    else:
        print(f"device: ran on {device} ({'an accelerator' if device.type != 'cpu' else 'no accelerator found'}), matches the CPU")


if __name__ == "__main__":
    main()
