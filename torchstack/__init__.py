"""torchstack: build optimized PyTorch container images in stages."""

from torchstack.base.version import VERSION as __version__

__all__ = ["__version__"]
