"""Stand-in for llamafactory.train.tuner: imports what the real one imports of the torch family."""

import torch  # noqa: F401
import torchaudio  # noqa: F401  (LLaMA-Factory 0.9.5: data/mm_plugin.py, reached through the trainer)
