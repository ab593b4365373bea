#!/usr/bin/python
# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: venv_probe
short_description: Run a probe of the training venv, or give its recorded answer while nothing it depends on changed
version_added: 0.1.0
author: instinct.finetune maintainers (@instinct-finetune)
description:
  - Runs O(argv) (a probe that only reads, such as C(ds_report), C(llamafactory-cli version) or the
    finetune role's pre-launch job check) and returns its exit code and output, as
    M(ansible.builtin.command) would.
  - Its answer is recorded in O(record) with a key over the command, every distribution installed in
    O(venv) (name, version and when it was installed), the venv's Python, the GPU device nodes of the
    host with their owner, group and mode and the groups of the user the probe runs as, the ROCm
    release in C(/opt/rocm/.info/version), the loaded amdgpu driver's version and O(depends_on).
    While the key is unchanged the recorded answer is returned without running the probe
    (RV(cached) is true), so that a run that changes nothing does not prove again what has not
    changed.
  - Only the exit codes in O(record_rcs) are recorded; any other answer is found again on every run.
  - The record is a cache of the probe's answer, in the file the task names (normally in the home of
    the user the probe runs as); writing it is not a change of the host and is not reported as one.
    In check mode the probe runs and nothing is recorded.
options:
  argv:
    description: The probe's command, as a list; the first element is the program.
    type: list
    elements: str
    required: true
  venv:
    description: The venv whose installed distributions the answer depends on.
    type: path
    required: true
  record:
    description: The file that holds the latest recorded answer (one answer per file).
    type: path
    required: true
  depends_on:
    description:
      - More that the answer depends on and the module cannot see, as strings (for example the ROCm
        release, or a script's checksum when the script is given by path).
    type: list
    elements: str
    default: []
  record_rcs:
    description: The exit codes whose answer is recorded.
    type: list
    elements: int
    default: [0]
attributes:
  check_mode:
    support: full
    description: Runs the probe in check mode too (it only reads); records nothing.
  diff_mode:
    support: none
    description: Returns no diff of the answers it records.
seealso:
  - module: ansible.builtin.command
"""

EXAMPLES = r"""
- name: Run ds_report as the service user
  instinct.finetune.venv_probe:
    argv: ["/opt/instinct/venv/bin/ds_report"]
    venv: /opt/instinct/venv
    record: ~/.cache/instinct-finetune/probes/ds_report.json
    depends_on: ["rocm 7.1.1"]
  become: true
  become_user: instinct
  register: report

- name: Say whether it ran
  ansible.builtin.debug:
    msg: "{{ 'answered from the record' if report.cached else 'ran' }}"
"""

RETURN = r"""
rc:
  description: The probe's exit code.
  returned: always
  type: int
  sample: 0
stdout:
  description: What the probe printed on standard output.
  returned: always
  type: str
stdout_lines:
  description: RV(stdout) split into lines.
  returned: always
  type: list
  elements: str
stderr:
  description: What the probe printed on standard error.
  returned: always
  type: str
stderr_lines:
  description: RV(stderr) split into lines.
  returned: always
  type: list
  elements: str
cached:
  description: Whether the answer is the recorded one (the probe did not run).
  returned: always
  type: bool
  sample: true
key:
  description: The key the answer is recorded under.
  returned: always
  type: str
  sample: 3f0c8e...
"""

import glob
import json
import os
import tempfile

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.instinct.finetune.plugins.module_utils.venvprobe import (
    new_record,
    probe_key,
    recorded_answer,
    venv_fingerprint,
)

# The device nodes through which a probe sees GPUs: AMD's (KFD and the DRM render nodes) and, for
# the same probes on other accelerators, NVIDIA's.
DEVICE_GLOBS = ("/dev/kfd", "/dev/dri/renderD*", "/dev/nvidia[0-9]*")
# What of the host's GPU stack a probe's answer depends on besides its devices: the ROCm release
# installed and the amdgpu driver loaded (a reboot into a new driver shows as a new version).
HOST_FILES = ("/opt/rocm/.info/version", "/sys/module/amdgpu/version")


def read_venv(venv):
    dist_infos = []
    for folder in glob.glob(os.path.join(venv, "lib", "python*", "site-packages", "*.dist-info")):
        try:
            info = os.stat(os.path.join(folder, "RECORD"))
        except OSError:
            info = os.stat(folder)
        dist_infos.append((os.path.basename(folder), info.st_mtime_ns, info.st_size))
    try:
        with open(os.path.join(venv, "pyvenv.cfg"), encoding="utf-8") as handle:
            pyvenv_cfg = handle.read()
    except OSError:
        pyvenv_cfg = ""
    return venv_fingerprint(dist_infos, pyvenv_cfg)


def read_host():
    """The device nodes (with their owner, group and mode, and the groups of the user the probe runs
    as: access to a GPU decides what torch sees) and the GPU stack's versions, as strings."""
    found = []
    for path in (path for pattern in DEVICE_GLOBS for path in glob.glob(pattern)):
        try:
            info = os.stat(path)
            found.append(f"{path} {info.st_uid}:{info.st_gid} {info.st_mode:o}")
        except OSError:
            found.append(path)
    found.append("groups=" + ",".join(str(group) for group in sorted(os.getgroups())))
    for path in HOST_FILES:
        try:
            with open(path, encoding="utf-8") as handle:
                found.append(f"{path}={handle.read().strip()}")
        except OSError:
            continue
    return found


def read_record(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def write_record(path, record):
    """Replaced atomically, so that a run cut off mid-write leaves the old record or none."""
    folder = os.path.dirname(path)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".venv-probe-")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(record, handle, sort_keys=True)
    os.replace(tmp, path)


def main():
    module = AnsibleModule(
        argument_spec={
            "argv": {"type": "list", "elements": "str", "required": True},
            "venv": {"type": "path", "required": True},
            "record": {"type": "path", "required": True},
            "depends_on": {"type": "list", "elements": "str", "default": []},
            "record_rcs": {"type": "list", "elements": "int", "default": [0]},
        },
        supports_check_mode=True,
    )
    params = module.params
    if not params["argv"]:
        module.fail_json(msg="argv is empty: give the probe's program and its arguments")
    key = probe_key(params["argv"], read_venv(params["venv"]), read_host(), params["depends_on"])
    answer = recorded_answer(read_record(params["record"]), key)
    cached = answer is not None
    if not cached:
        answer = module.run_command(params["argv"])
        record = new_record(key, *answer, record_rcs=params["record_rcs"])
        if record is not None and not module.check_mode:
            try:
                write_record(params["record"], record)
            except OSError as error:  # a record it cannot keep costs time on the next run, nothing else
                module.warn(f"cannot record the answer in {params['record']}: {error}")
    rc, stdout, stderr = answer
    module.exit_json(
        changed=False,
        rc=rc,
        stdout=stdout,
        stdout_lines=stdout.splitlines(),
        stderr=stderr,
        stderr_lines=stderr.splitlines(),
        cached=cached,
        key=key,
    )


if __name__ == "__main__":
    main()
