"""Stand-in torchaudio, built from the test double in instinct.finetune's molecule/resources/pytorch-src.

It is not torchaudio. It only tells which torch it was built against. Like a real torchaudio, whose
compiled library links the exact libtorch it was built with, it does not load beside another torch
build: the error names its library and an undefined symbol, as the dynamic loader's does.
"""

import json
import pathlib

import torch

_stand_in_build = json.loads(pathlib.Path(__file__).with_name("_stand_in_build.json").read_text())
__version__ = _stand_in_build["version"]

if getattr(torch, "_stand_in_build", None) != _stand_in_build["torch_build"]:
    raise OSError(
        f"{pathlib.Path(__file__).with_name('lib')}/libtorchaudio.so: undefined symbol (stand-in: built against "
        f"torch {_stand_in_build['torch_version']}, loaded beside torch {torch.__version__} of another build)"
    )
