"""Print what this PyTorch runs on: version, CPU capability, oneDNN, BLAS and threads."""

import torch

try:  # the start-up hook of torchstack images: what it decided, and from what
    import torchstack_startup
except ImportError:
    torchstack_startup = None

print(f"torch {torch.__version__}")
print(f"CPU capability: {torch.backends.cpu.get_cpu_capability()}")
print(f"oneDNN (mkldnn) available: {torch.backends.mkldnn.is_available()}")
print(
    f"threads: {torch.get_num_threads()}"
    + (f" ({torchstack_startup.decision})" if torchstack_startup else " (not a torchstack image: torch's own choice)")
)
if torchstack_startup:
    print(f"torch.compile scratch: {torchstack_startup.scratch}")
for line in torch.__config__.show().splitlines():
    if any(key in line for key in ("BLAS_INFO", "LAPACK_INFO", "USE_MKLDNN", "CXX_FLAGS")):
        print(line.strip()[:200])
