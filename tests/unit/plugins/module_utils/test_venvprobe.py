"""When a venv probe's recorded answer stands for a new run (module_utils/venvprobe.py)."""

from ansible_collections.instinct.finetune.plugins.module_utils.venvprobe import (
    new_record,
    probe_key,
    recorded_answer,
    venv_fingerprint,
)

TORCH = ("torch-2.10.0+rocm7.0.dist-info", 1764000000000000000, 91234)
DEEPSPEED = ("deepspeed-0.18.4.dist-info", 1764000100000000000, 12000)
CFG = "home = /usr/bin\nversion = 3.11.14\n"
ARGV = ["/opt/instinct/venv/bin/ds_report"]


def key(**changes):
    parts = {"argv": ARGV, "dists": [TORCH, DEEPSPEED], "cfg": CFG, "devices": ["/dev/kfd"], "depends_on": []}
    parts.update(changes)
    fingerprint = venv_fingerprint(parts["dists"], parts["cfg"])
    return probe_key(parts["argv"], fingerprint, parts["devices"], parts["depends_on"])


def test_the_key_does_not_depend_on_the_order_things_are_found_in():
    assert key() == key(dists=[DEEPSPEED, TORCH])
    assert key(devices=["/dev/kfd", "/dev/dri/renderD128"]) == key(devices=["/dev/dri/renderD128", "/dev/kfd"])


def test_anything_the_answer_depends_on_changes_the_key():
    base = key()
    rebuilt = (DEEPSPEED[0], DEEPSPEED[1] + 1, DEEPSPEED[2])  # the same version installed again
    upgraded = ("deepspeed-0.18.5.dist-info", *DEEPSPEED[1:])
    changes = [
        key(argv=[*ARGV, "--hide_operator_status"]),
        key(dists=[TORCH, rebuilt]),
        key(dists=[TORCH, upgraded]),
        key(dists=[TORCH]),
        key(cfg="home = /usr/bin\nversion = 3.11.15\n"),
        key(devices=[]),
        key(devices=["/dev/kfd", "/opt/rocm/.info/version=7.1.1"]),
        key(depends_on=["gfx942"]),
    ]
    assert base not in changes
    assert len(set(changes)) == len(changes)


def test_a_recorded_answer_stands_only_for_its_own_key():
    record = new_record(key(), 0, "accelerator cpu\n", "", record_rcs=[0])
    assert recorded_answer(record, key()) == (0, "accelerator cpu\n", "")
    assert recorded_answer(record, key(devices=[])) is None


def test_only_the_exit_codes_asked_for_are_recorded():
    assert new_record(key(), 1, "", "Traceback", record_rcs=[0]) is None
    assert new_record(key(), 3, "", "", record_rcs=[0]) is None
    assert new_record(key(), 3, "", "", record_rcs=[0, 3]) is not None


def test_a_damaged_or_foreign_record_is_no_record():
    good = new_record(key(), 0, "out", "err", record_rcs=[0])
    damaged = [
        None,
        [],
        "text",
        {**good, "format": 2},
        {**good, "answer": {"rc": "0", "stdout": "", "stderr": ""}},
        {**good, "answer": {"rc": 0, "stdout": None, "stderr": ""}},
        {**good, "answer": None},
    ]
    for record in damaged:
        assert recorded_answer(record, key()) is None, record
