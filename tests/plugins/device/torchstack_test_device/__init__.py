"""A device plugin as IBM's torch_nnpa is one: PrivateUse1 renamed, a torch.<name> module, loaded
by torch itself at import through the `torch.backends` entry point group. It has no kernels: it
proves the plugin path, not an accelerator."""

import types

NAME = "tsdev"


def autoload():
    import torch

    torch.utils.rename_privateuse1_backend(NAME)
    module = types.ModuleType(f"torch.{NAME}")
    module.is_available = lambda: False  # no hardware behind it
    module.device_count = lambda: 0
    # what torch.manual_seed asks of every device module (a device without them gets a warning)
    module._is_in_bad_fork = lambda: False
    module.manual_seed_all = lambda seed: None
    torch._register_device_module(NAME, module)
    torch.utils.generate_methods_for_privateuse1_backend(for_tensor=True, for_module=True, for_storage=False)
