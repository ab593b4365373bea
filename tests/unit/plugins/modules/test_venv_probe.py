"""The venv_probe module through ansible, as a task runs it: a real venv made by the venv module,
a probe that counts its runs, and the record it keeps."""

import json
import sys
import venv

import pytest

from tests.unit.conftest import run_module


@pytest.fixture
def setting(tmp_path):
    env = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env)
    site = next((env / "lib").glob("python*")) / "site-packages"
    info = site / "example-1.0.dist-info"
    info.mkdir()
    (info / "RECORD").write_text("example/__init__.py,,\n")
    counter = tmp_path / "runs"
    # A probe that counts its runs in a file and answers with the count.
    count = "p.write_text((p.read_text() if p.exists() else '') + 'x'); print('answer', len(p.read_text()))"
    probe = [sys.executable, "-c", f"import pathlib; p = pathlib.Path({str(counter)!r}); {count}"]
    record = tmp_path / "cache" / "probes" / "example.json"
    return {"venv": env, "site": site, "counter": counter, "argv": probe, "record": record}


def probe(setting, extra=(), **options):
    args = {"argv": setting["argv"], "venv": str(setting["venv"]), "record": str(setting["record"]), **options}
    return run_module("venv_probe", json.dumps(args), extra)


def runs(setting):
    return len(setting["counter"].read_text()) if setting["counter"].exists() else 0


def test_an_unchanged_venv_gets_the_recorded_answer_and_a_new_install_runs_the_probe(setting):
    rc, first = probe(setting)
    assert rc == 0, first
    assert (first["rc"], first["stdout"].strip(), first["cached"], first["changed"]) == (0, "answer 1", False, False)
    assert setting["record"].exists()

    _rc, again = probe(setting)
    assert (again["stdout"].strip(), again["cached"], again["changed"]) == ("answer 1", True, False)
    assert again["key"] == first["key"]
    assert runs(setting) == 1

    # A distribution installed into the venv: the probe runs again.
    (setting["site"] / "another-2.0.dist-info").mkdir()
    (setting["site"] / "another-2.0.dist-info" / "RECORD").write_text("")
    _rc, after_install = probe(setting)
    assert (after_install["stdout"].strip(), after_install["cached"]) == ("answer 2", False)

    # And so does a change the task names.
    _rc, other = probe(setting, depends_on=["rocm 7.1.1"])
    assert (other["stdout"].strip(), other["cached"]) == ("answer 3", False)


def test_check_mode_runs_the_probe_and_records_nothing(setting):
    rc, result = probe(setting, extra=["--check"])
    assert rc == 0, result
    assert (result["stdout"].strip(), result["cached"]) == ("answer 1", False)
    assert not setting["record"].exists()


def test_a_failed_probe_is_never_recorded(setting):
    failing = [sys.executable, "-c", "import sys; print('broken', file=sys.stderr); sys.exit(1)"]
    for _run in range(2):
        rc, result = run_module(
            "venv_probe",
            json.dumps({"argv": failing, "venv": str(setting["venv"]), "record": str(setting["record"])}),
        )
        # As with ansible.builtin.command, a non-zero exit fails the task unless it says otherwise
        # (the roles' probes set failed_when: false and explain the failure themselves).
        assert rc != 0
        assert result["failed"] is True
        assert (result["rc"], result["stderr"].strip(), result["cached"]) == (1, "broken", False)
    assert not setting["record"].exists()


def test_a_probe_that_records_problems_as_another_exit_code_is_rerun(setting):
    problems = [sys.executable, "-c", "import sys; sys.exit(3)"]
    args = {"argv": problems, "venv": str(setting["venv"]), "record": str(setting["record"])}
    _rc, result = run_module("venv_probe", json.dumps(args))
    assert result["rc"] == 3
    assert not setting["record"].exists()
    _rc, result = run_module("venv_probe", json.dumps({**args, "record_rcs": [0, 3]}))
    assert setting["record"].exists()
    _rc, result = run_module("venv_probe", json.dumps({**args, "record_rcs": [0, 3]}))
    assert result["cached"] is True


def test_an_empty_command_is_refused(setting):
    rc, result = run_module(
        "venv_probe", json.dumps({"argv": [], "venv": str(setting["venv"]), "record": str(setting["record"])})
    )
    assert rc != 0
    assert "argv is empty" in result["msg"]
