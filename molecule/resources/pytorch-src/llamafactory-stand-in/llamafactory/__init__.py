"""Stand-in for LLaMA-Factory's package (instinct.finetune molecule test double, not LLaMA-Factory).

Only the import chain that the llama_factory role's trainer check exercises: ``import
llamafactory.train.tuner`` imports torchaudio, as LLaMA-Factory 0.9.5's trainer does through
``data/template.py`` -> ``data/mm_plugin.py`` (see ../README.md).
"""
