"""A model compiled ahead of time when the image was built, answered from in a new container.

    python3 warm.py            # loads the baked package (or compiles, said in one line) and checks it
    python3 warm.py --bake     # at build time, as root: compiles it ahead of time into the image

The image's build ran `--bake` on this ResNet-style model, so a new container loads the package and
answers without compiling anything (Dynamo and Inductor count no compiled frame). A package made for
another machine (other vector instructions, another torch or compiler) is never used: the model is
compiled here instead. Both answers are checked against eager mode.
"""

import shutil
import sys

import torch
import torchstack_warm
from _bench import options
from resnet import resnet
from torch._dynamo.utils import counters

NAME = "resnet-example"


def model_and_inputs(batch: int = 8, image_size: int = 64):
    """The example's model, with random weights (seeded), and a batch of inputs."""
    torch.manual_seed(0)
    return resnet(widths=(32, 64, 128, 256)).eval(), torch.randn(batch, 3, image_size, image_size)


def main() -> None:
    bake = "--bake" in sys.argv
    if bake:
        sys.argv.remove("--bake")
    args = options(__doc__.splitlines()[0], batch=8, image_size=64)
    model, images = model_and_inputs(args.batch, args.image_size)
    if bake:
        torchstack_warm.bake(NAME, model, (images,))
        return
    baked = torchstack_warm.folder_for(NAME).is_dir()
    if not baked and shutil.which("g++") is None and shutil.which("c++") is None:
        print("warm: no package baked for this machine, and torch.compile needs a C++ compiler, which this image lacks", file=sys.stderr)
        sys.exit(3)
    run, how = torchstack_warm.load(NAME, model, (images,))
    with torch.inference_mode():
        answer, eager = run(images), model(images)
    torch.testing.assert_close(answer, eager, rtol=1e-3, atol=1e-3)
    frames = counters["frames"]["total"]
    print(f"warm: answered from the {how} model, matching eager mode; frames compiled in this process: {frames}")


if __name__ == "__main__":
    main()
