"""torchvision's compiled operators and a transforms pipeline, on data made here (no downloads).

The final checks run it in every image that installs torchvision (plugins.yaml: checks); by hand:
`python3 torchvision_ops.py` in the image. A torchvision built against another torch build (PyPI's
CUDA build beside a `+cpu` torch) imports, then fails here: `operator torchvision::nms does not exist`.
"""

import torch
import torchvision
from PIL import Image
from torchvision import ops
from torchvision.transforms import functional, v2

# Non-maximum suppression: the second box overlaps the first (IoU 0.68) and goes; the third stays.
boxes = torch.tensor([[0, 0, 10, 10], [1, 1, 11, 11], [50, 50, 60, 60]], dtype=torch.float32)
kept = ops.nms(boxes, torch.tensor([0.9, 0.8, 0.7]), iou_threshold=0.5)
assert kept.tolist() == [0, 2], f"nms kept {kept.tolist()}, expected [0, 2]"

# RoIAlign over the whole 4x4 map into 1x1: the mean of its bilinear samples, the map's mean.
features = torch.arange(16, dtype=torch.float32).reshape(1, 1, 4, 4)
pooled = ops.roi_align(features, [torch.tensor([[0.0, 0.0, 4.0, 4.0]])], output_size=(1, 1), aligned=True, sampling_ratio=2)
torch.testing.assert_close(pooled.flatten(), torch.tensor([7.5]))

# A model's preprocessing, on a uint8 image made here, then through PIL (pillow) and back.
image = torch.randint(0, 256, (3, 64, 48), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
pipeline = v2.Compose(
    [
        v2.Resize((32, 32), antialias=True),
        v2.CenterCrop(24),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
    ]
)
out = pipeline(image)
assert out.shape == (3, 24, 24) and out.dtype == torch.float32, (out.shape, out.dtype)
as_pil = functional.to_pil_image(image)
assert isinstance(as_pil, Image.Image) and functional.pil_to_tensor(as_pil).equal(image)

print(f"torchvision {torchvision.__version__} on torch {torch.__version__}: nms, roi_align and a transforms pipeline ran")
