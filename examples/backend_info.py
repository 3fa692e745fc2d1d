"""Print what this PyTorch runs on: version, CPU capability, oneDNN, BLAS and threads."""

import torch

print(f"torch {torch.__version__}")
print(f"CPU capability: {torch.backends.cpu.get_cpu_capability()}")
print(f"oneDNN (mkldnn) available: {torch.backends.mkldnn.is_available()}")
print(f"threads: {torch.get_num_threads()}")
for line in torch.__config__.show().splitlines():
    if any(key in line for key in ("BLAS_INFO", "LAPACK_INFO", "USE_MKLDNN", "CXX_FLAGS")):
        print(line.strip()[:200])
