"""Run a small convolutional network for inference and check it against the reference path."""

import torch

torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(),
    torch.nn.Conv2d(16, 8, 3, padding=1), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
).eval()  # fmt: skip
x = torch.randn(2, 3, 32, 32)
with torch.inference_mode():
    fast = model(x)
    with torch.backends.mkldnn.flags(enabled=False):
        reference = model(x)
error = float((fast - reference).abs().max())
assert error < 1e-3, f"convolution results differ by {error}"
print(f"conv2d inference on {tuple(x.shape)}: output {tuple(fast.shape)}, max difference {error:.2e}")
