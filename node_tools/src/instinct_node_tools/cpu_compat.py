"""Loaded by the launcher (:mod:`launch`) only on a node that trains on the CPU.

With more than one process, accelerate gives each CPU rank the device ``cpu:0`` and the Trainer
resumes with ``torch.load(..., map_location=args.device)``; torch's own CPU deserializer accepts
only the tag ``cpu``, so every resume fails with "don't know how to restore data location of
torch.storage.UntypedStorage (tagged with cpu:0)". This registers, through torch's public
``register_package`` hook, a deserializer that keeps such storages where they are: on the CPU.
"""

import re

import torch.serialization

_INDEXED_CPU = re.compile(r"cpu:\d+")


def _restore_indexed_cpu(storage, location):
    return storage if _INDEXED_CPU.fullmatch(location) else None


def register():
    torch.serialization.register_package(11, lambda _storage: None, _restore_indexed_cpu)
