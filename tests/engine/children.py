"""The docs' child image that bakes a model ("Models compiled ahead, loaded warm" in
docs/using/building-on-the-image.md): its app, and its Dockerfile taken word for word from the docs.
The engine tests build it to prove the bake leaves nothing behind; benchmarks/child.py measures it."""

from __future__ import annotations

from pathlib import Path

from torchstack.catalog.model import ROOT

APP = """import torch


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten())
"""
EXPORT = """import torch, torchstack_warm
from app import make_model

model = make_model().eval()
torchstack_warm.bake("classifier", model, (torch.randn(2, 3, 32, 32),))
"""
# Loads the baked package in a new container and says how ("baked") and whether it matches eager.
LOAD = (
    "import sys, torch, torchstack_warm; sys.path.insert(0, '/app'); from app import make_model; "
    "model = make_model().eval(); x = torch.randn(2, 3, 32, 32); "
    "run, how = torchstack_warm.load('classifier', model, (x,)); "
    "print(how, torch.allclose(run(x), model(x), atol=1e-5))"
)
# What the child must carry beyond its parent: its app and the package its bake made.
CARRIED = ("/app", "/opt/torchstack/warm/classifier")


def write_docs_child(folder: Path, parent: str) -> None:
    """The child's build context in `folder`: the app, and the docs' Dockerfile on `parent`."""
    (folder / "app").mkdir()
    (folder / "app" / "app.py").write_text(APP)
    (folder / "app" / "export.py").write_text(EXPORT)
    docs = (ROOT / "docs" / "using" / "building-on-the-image.md").read_text()
    (dockerfile,) = [block.split("```", 1)[0] for block in docs.split("```dockerfile\n")[1:] if "export.py" in block.split("```", 1)[0]]
    (folder / "Dockerfile").write_text(dockerfile.replace(dockerfile.splitlines()[0], f"FROM {parent}"))
