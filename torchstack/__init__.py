"""torchstack: build optimized PyTorch container images in stages."""

__version__ = "0.1.0"
