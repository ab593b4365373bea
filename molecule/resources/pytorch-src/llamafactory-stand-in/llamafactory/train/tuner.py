"""Stand-in for llamafactory.train.tuner: imports what the real one imports of the torch family."""

import torch  # noqa: F401  # pylint: disable=unused-import

# LLaMA-Factory 0.9.5 imports it in data/mm_plugin.py, reached through the trainer.
import torchaudio  # noqa: F401  # pylint: disable=unused-import
