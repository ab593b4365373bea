"""Print what the installed torch is: version, GPU backend, visible devices and compiled archs."""

import json

import torch

cuda = torch.cuda.is_available()
print(
    json.dumps(
        {
            "version": torch.__version__,
            "hip": getattr(torch.version, "hip", None),
            "cuda": getattr(torch.version, "cuda", None),
            "available": cuda,
            "device_count": torch.cuda.device_count() if cuda else 0,
            "arch_list": torch.cuda.get_arch_list() if cuda else [],
            "file": torch.__file__,
        }
    )
)
