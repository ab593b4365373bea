# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""When a probe of the training venv need not run again: the pure part of the venv_probe module.

A probe (``ds_report``, ``llamafactory-cli version``, the pre-launch job check) answers from what is
installed in the venv, the Python it runs on, the GPU device nodes the host shows and whatever the
task names besides. Its answer is recorded with a key over all of these; while the key is the
same, the recorded answer stands for a new run of the probe.
"""

from __future__ import absolute_import, division, print_function

import hashlib
import json

__metaclass__ = type

RECORD_FORMAT = 1


def venv_fingerprint(dist_infos, pyvenv_cfg):
    """What a venv holds: each installed distribution's metadata folder as ``(name, mtime_ns, size)``
    of its RECORD file (a reinstall of the same version rewrites it), and the venv's pyvenv.cfg
    (which Python it runs on)."""
    entries = sorted([str(name), int(mtime_ns), int(size)] for name, mtime_ns, size in dist_infos)
    return {"distributions": entries, "pyvenv_cfg": pyvenv_cfg}


def probe_key(argv, fingerprint, devices, depends_on):
    """The key of a probe's answer: the command, the venv, the host's GPU devices and versions
    (``devices``) and the task's extras."""
    text = json.dumps(
        {"argv": list(argv), "venv": fingerprint, "devices": sorted(devices), "depends_on": list(depends_on)},
        sort_keys=True,
    )
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def recorded_answer(record, key):
    """The answer recorded under ``key`` as ``(rc, stdout, stderr)``, or None: a record of another
    key, format or shape is no record."""
    if not isinstance(record, dict) or record.get("format") != RECORD_FORMAT or record.get("key") != key:
        return None
    answer = record.get("answer")
    if not isinstance(answer, dict) or not isinstance(answer.get("rc"), int):
        return None
    if not isinstance(answer.get("stdout"), str) or not isinstance(answer.get("stderr"), str):
        return None
    return answer["rc"], answer["stdout"], answer["stderr"]


def new_record(key, rc, stdout, stderr, record_rcs):
    """The record to keep after a run, or None when its exit code is not one to record (a failed
    probe is always run again)."""
    if rc not in record_rcs:
        return None
    return {"format": RECORD_FORMAT, "key": key, "answer": {"rc": rc, "stdout": stdout, "stderr": stderr}}
