"""A ResNet-style image classifier (random weights) for inference; checked against float64.

python3 resnet.py [--batch 8] [--image-size 224] [--benchmark]
"""

import torch
from _bench import options, report, seconds_per_run
from torch import nn


class Block(nn.Module):
    def __init__(self, channels_in: int, channels: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(channels_in, channels, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.shortcut = nn.Identity()
        if stride != 1 or channels_in != channels:
            self.shortcut = nn.Sequential(nn.Conv2d(channels_in, channels, 1, stride, bias=False), nn.BatchNorm2d(channels))

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + self.shortcut(x))


def resnet(classes: int = 1000, widths=(64, 128, 256, 512)) -> nn.Module:
    """ResNet-18's shape: a stem, four stages of two basic blocks, pooling and a classifier."""
    layers = [nn.Conv2d(3, widths[0], 7, 2, 3, bias=False), nn.BatchNorm2d(widths[0]), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
    channels = widths[0]
    for i, width in enumerate(widths):
        layers += [Block(channels, width, 1 if i == 0 else 2), Block(width, width, 1)]
        channels = width
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, classes)]
    return nn.Sequential(*layers)


def main() -> None:
    args = options(__doc__.splitlines()[0], image_size=64)
    torch.manual_seed(0)
    model = resnet().eval()
    images = torch.randn(args.batch, 3, args.image_size, args.image_size)
    with torch.inference_mode():
        logits = model(images)
        reference = model.double()(images.double()).float()
        model.float()
    torch.testing.assert_close(logits, reference, rtol=1e-3, atol=1e-3)
    if args.benchmark:
        times = seconds_per_run(lambda: model(images), args.runs, args.warmup)
        report("resnet", args, times, items=args.batch, unit="images", image_size=args.image_size)
    else:
        print(
            f"resnet: {args.batch} image(s) of {args.image_size}x{args.image_size} -> classes {logits.argmax(1).tolist()}, matches float64"
        )


if __name__ == "__main__":
    main()
