# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""Filters for PyTorch's source build and for the trainer's import check."""

from __future__ import absolute_import, division, print_function

from ansible.errors import AnsibleFilterError

from ansible_collections.instinct.finetune.plugins.module_utils import source_build, trainer_import

__metaclass__ = type


def rocm_source_build_packages(extra=None):
    try:
        return source_build.source_build_packages(extra)
    except ValueError as err:
        raise AnsibleFilterError(f"rocm_source_build_packages: {err}") from err


def rocm_release_pins(packages, madison, rocm_core_version):
    try:
        return source_build.release_pins(packages, madison, rocm_core_version)
    except ValueError as err:
        raise AnsibleFilterError(f"rocm_release_pins: {err}") from err


def trainer_import_problem(rc, output, host="this node", torch_version="?", install_method=None):
    return trainer_import.import_problem(rc, output, host, torch_version, install_method)


class FilterModule:
    """Source build and trainer import filters."""

    def filters(self):
        return {
            "rocm_source_build_packages": rocm_source_build_packages,
            "rocm_release_pins": rocm_release_pins,
            "trainer_import_problem": trainer_import_problem,
        }
