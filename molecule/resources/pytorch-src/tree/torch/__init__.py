"""Stand-in torch, built from the test double in instinct.finetune's molecule/resources/pytorch-src.

It is not PyTorch: it has no tensors and sees no GPU. It only tells how it was built.
"""

import json
import pathlib

_stand_in_build = json.loads(pathlib.Path(__file__).with_name("_stand_in_build.json").read_text())
__version__ = _stand_in_build["version"]
