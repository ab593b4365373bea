# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""What instinct.finetune runs on a node, one package with console entry points.

``_probe``, ``rocm_smi`` and ``gpu_metrics`` are the collection's own module_utils parsers, linked
into this package (the wheel holds a copy): the modules on the controller side and the collector on
the node read amd-smi and rocm-smi with one source.
"""

# The node_tools action appends "+<content hash>" when it builds the wheel it installs.
__version__ = "0.2.0"
