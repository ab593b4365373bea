"""The site's proxy in the roles (issue 31), through ansible-playbook on this machine:

- every task of the roles that reaches outside the cluster (apt and apt_index, pip, get_url/uri, the
  node tools install, a command running pip install/wheel/download or the wheel build) carries the one
  definition, ``environment: "{{ instinct_proxy_env }}"`` (a guard: a new task without it fails);
- that environment, worked out by the common role's defaults from the inventory, reaches a role's pip
  task as the role has it: pip goes to the proxy for the index, and straight to a node's address;
- preflight's apt snippet (roles/preflight/tasks/apt-proxy.yml) is written right, root-only with a
  password, unchanged on a second run, not written in check mode, and removed when no proxy is set;
- the job's launch.env carries it, and a bad proxy URL stops the play naming the host and the runbook.
"""

import functools
import http.server
import json
import os
import re
import socket
import stat
import subprocess
import sys
import threading
import venv
from pathlib import Path
from typing import ClassVar

import jinja2
import pytest
import yaml
from ansible.plugins.filter import core as core_filters

from ansible_collections.instinct.finetune.plugins.filter.finetune import FilterModule
from ansible_collections.instinct.finetune.plugins.module_utils import proxy
from tests.unit.conftest import COLLECTIONS, ROOT

ENV_LINE = "instinct_proxy_env"
NET_MODULES = {
    "ansible.builtin.apt", "ansible.builtin.pip", "ansible.builtin.get_url", "ansible.builtin.uri",
    "ansible.builtin.git", "ansible.builtin.apt_key", "ansible.builtin.apt_repository",
    "instinct.finetune.apt_index", "instinct.finetune.node_tools",
}  # fmt: skip
COMMANDS = ("ansible.builtin.command", "ansible.builtin.shell")
# pip reaching an index, git fetching a source, or the wheel build's background job (git clone, pip wheel).
REACHES_OUT = re.compile(r"\bpip\b[\s,'\"-]*(install|wheel|download)|git clone|locked_build|llamafactory-cli")


def _flat(tasks):
    for task in tasks or []:
        if isinstance(task, dict):
            if "block" in task:
                yield from _flat(task["block"])
                yield from _flat(task.get("rescue"))
                yield from _flat(task.get("always"))
            else:
                yield task


def _reaches_out(task):
    if any(key in task for key in NET_MODULES):
        return True
    return any(key in task and REACHES_OUT.search(yaml.safe_dump(task[key], width=10000)) for key in COMMANDS)


def outside_tasks():
    for path in sorted((ROOT / "roles").glob("*/tasks/*.yml")):
        for task in _flat(yaml.safe_load(path.read_text()) or []):
            if _reaches_out(task):
                yield f"{path.relative_to(ROOT)}: {task.get('name')}", task


OUTSIDE = dict(outside_tasks())


def test_the_guard_sees_the_tasks_that_reach_out():
    roles = {name.split("/")[1] for name in OUTSIDE}
    assert roles >= {"preflight", "rocm", "instinct_python", "pytorch", "llama_factory", "wheel_build", "monitoring"}
    assert any("Start the build in the background" in name for name in OUTSIDE)  # git clone, pip wheel
    assert any("evaluation" in name for name in OUTSIDE)  # the hub client of an evaluation


@pytest.mark.parametrize("name", sorted(OUTSIDE))
def test_every_task_that_reaches_out_gets_the_proxy_environment(name):
    environment = OUTSIDE[name].get("environment")
    assert isinstance(environment, str) and ENV_LINE in environment, (
        f'{name}: add environment: "{{{{ {ENV_LINE} }}}}" (the site\'s proxy, issue 31)'
    )


# ---- through ansible-playbook --------------------------------------------------------------------


def _free_port(address="127.0.0.1"):
    with socket.socket() as sock:
        sock.bind((address, 0))
        return sock.getsockname()[1]


def run_play(tmp_path, play, extravars, *, check=False, env_extra=None):
    (tmp_path / "play.yml").write_text(play)
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory()))
    base = {k: v for k, v in os.environ.items() if "proxy" not in k.lower() and not k.startswith("PIP_")}
    env = dict(
        base,
        ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS),
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json",
        ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
        **(env_extra or {}),
    )
    playbook = Path(sys.executable).parent / "ansible-playbook"
    extravars = {"ansible_python_interpreter": sys.executable, **extravars}
    proc = subprocess.run(
        [str(playbook) if playbook.exists() else "ansible-playbook", "-i", str(tmp_path / "inventory.yml"),
         str(tmp_path / "play.yml"), "-e", json.dumps(extravars), *(["--check"] if check else [])],
        capture_output=True, text=True, env=env, check=False, cwd=ROOT, timeout=300,
    )  # fmt: skip
    start = proc.stdout.find("{")
    assert start >= 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    return proc, json.loads(proc.stdout[start:])


def inventory(**node1):
    # node1 runs the play here; node2 only exists in the inventory, as a node whose address the
    # others fetch from (the wheel server, the dependency share).
    return {
        "all": {
            "vars": {"ansible_connection": "local", "ansible_become": False},
            "hosts": {"node1": {"ansible_host": "127.0.0.1", **node1}, "node2": {"ansible_host": "127.0.0.3"}},
        }
    }


def results(out, host="node1"):
    return {t["task"]["name"]: t["hosts"].get(host, {}) for t in out["plays"][0]["tasks"]}


def role_task(path, name):
    """One task of a role as the role has it (its environment: included), without become: this
    machine runs it as the user running the tests."""
    tasks = {t.get("name"): t for t in _flat(yaml.safe_load((ROOT / path).read_text()))}
    task = dict(tasks[name])
    for key in ("become", "become_user", "when"):
        task.pop(key, None)
    return task


def pip_play(task):
    return yaml.safe_dump(
        [
            {
                "name": "Run a role's pip task",
                "hosts": "node1",
                "gather_facts": False,
                "vars_files": [
                    str(ROOT / "roles/common/defaults/main.yml"),
                    str(ROOT / "roles/instinct_python/defaults/main.yml"),
                ],
                "tasks": [{**task, "register": "pip_result", "ignore_errors": True}],
            }
        ],
        sort_keys=False,
    )


@pytest.fixture(scope="module")
def tiny_venv(tmp_path_factory):
    folder = tmp_path_factory.mktemp("venv") / "venv"
    venv.EnvBuilder(with_pip=True).create(folder)
    return folder


PIP_TASK = ("roles/instinct_python/tasks/venv.yml", "Pin pip in the venv")


def test_a_roles_pip_task_goes_to_the_proxy_for_the_index(tmp_path, tiny_venv):
    closed = _free_port()  # nothing listens: the proxy cannot be reached, and pip says so as it retries
    _rc, out = run_play(
        tmp_path,
        pip_play(role_task(*PIP_TASK)),
        {"instinct_venv": str(tiny_venv), "instinct_python_pip_version": "0.0.1",
         "instinct_http_proxy": f"http://127.0.0.2:{closed}"},
        env_extra={"PIP_CONFIG_FILE": os.devnull, "PIP_INDEX_URL": "https://pypi.org/simple", "PIP_RETRIES": "1",
                   "PIP_TIMEOUT": "5"},
    )  # fmt: skip
    result = results(out)[PIP_TASK[1]]
    assert result.get("failed"), result
    said = result.get("stderr", "") + result.get("stdout", "") + result.get("msg", "")
    assert "ProxyError" in said or "Cannot connect to proxy" in said, said[-2000:]


class _Index(http.server.SimpleHTTPRequestHandler):
    seen: ClassVar[list] = []

    def log_message(self, *args):
        self.seen.append(self.path)


def test_a_roles_pip_task_fetches_from_a_node_address_directly(tmp_path, tiny_venv):
    # A node's index (the dependency share serves like this) on node2's address, 127.0.0.3.
    root = tmp_path / "index"
    (root / "simple" / "pip").mkdir(parents=True)
    (root / "simple" / "pip" / "index.html").write_text("<html><body></body></html>\n")
    server = http.server.ThreadingHTTPServer(("127.0.0.3", 0), functools.partial(_Index, directory=str(root)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        _Index.seen.clear()
        _rc, out = run_play(
            tmp_path,
            pip_play(role_task(*PIP_TASK)),
            {"instinct_venv": str(tiny_venv), "instinct_python_pip_version": "0.0.1",
             "instinct_http_proxy": f"http://127.0.0.2:{_free_port()}"},
            env_extra={"PIP_CONFIG_FILE": os.devnull, "PIP_RETRIES": "0", "PIP_TIMEOUT": "5",
                       "PIP_INDEX_URL": f"http://127.0.0.3:{server.server_address[1]}/simple"},
        )  # fmt: skip
    finally:
        server.shutdown()
        server.server_close()
    said = json.dumps(results(out)[PIP_TASK[1]])
    # pip asked node2 itself, not the proxy, and found no such pip version there.
    assert "/simple/pip/" in _Index.seen, said[-2000:]
    assert "ProxyError" not in said and "No matching distribution found for pip==0.0.1" in said


APT_PLAY = f"""\
- name: Run preflight's apt proxy step
  hosts: node1
  gather_facts: false
  vars_files:
    - {ROOT}/roles/common/defaults/main.yml
    - {ROOT}/roles/preflight/defaults/main.yml
  tasks:
    - name: Keep apt on the site's proxy
      ansible.builtin.include_tasks: {ROOT}/roles/preflight/tasks/apt-proxy.yml
"""
SECRET_PROXY = "http://svc-build:s3cr%40t@proxy.example.com:3128"  # noqa: S105 - made up, for the rules


@pytest.mark.skipif(os.geteuid() != 0, reason="the snippet is written owned by root")
def test_the_apt_snippet_is_written_kept_and_removed(tmp_path):
    snippet = tmp_path / "80instinct-finetune-proxy"
    proxy_url = "http://proxy.example.com:3128"
    settings = {"preflight_apt_proxy_file": str(snippet), "instinct_http_proxy": proxy_url,
                "instinct_no_proxy": [".corp.example.com", "apt-mirror.corp.example.com"]}  # fmt: skip
    # Check mode writes nothing.
    proc, out = run_play(tmp_path, APT_PLAY, settings, check=True)
    assert proc.returncode == 0 and not snippet.exists()

    proc, out = run_play(tmp_path, APT_PLAY, settings)
    assert proc.returncode == 0, proc.stdout[-3000:]
    written = results(out)["Keep apt on the site's proxy (apt.conf.d)"]
    assert written["changed"] is True
    # Readable by everyone (apt-cache as a user reads it): it holds no secret, credentials are refused.
    assert stat.S_IMODE(snippet.stat().st_mode) == 0o644
    lines = snippet.read_text().splitlines()
    assert f'Acquire::http::Proxy "{proxy_url}";' in lines
    assert f'Acquire::https::Proxy "{proxy_url}";' in lines  # https follows http unless set
    for host in ("apt-mirror.corp.example.com", "localhost", "node1", "127.0.0.1", "node2", "127.0.0.3"):
        assert f'Acquire::http::Proxy::{host} "DIRECT";' in lines
    # apt itself reads it: the proxy and an exception, as apt-config dumps them.
    if Path("/usr/bin/apt-config").exists():
        dump = subprocess.run(
            ["apt-config", "-c", str(snippet), "dump"], capture_output=True, text=True, check=True
        ).stdout
        assert f'Acquire::http::Proxy "{proxy_url}";' in dump
        assert 'Acquire::http::Proxy::apt-mirror.corp.example.com "DIRECT";' in dump

    proc, out = run_play(tmp_path, APT_PLAY, settings)
    assert results(out)["Keep apt on the site's proxy (apt.conf.d)"]["changed"] is False

    proc, out = run_play(tmp_path, APT_PLAY, dict(settings, instinct_http_proxy=""))
    assert proc.returncode == 0 and not snippet.exists()
    removed = results(out)["Remove the apt proxy setting this collection wrote, now that no proxy is set"]
    assert removed["changed"] is True


def test_a_proxy_url_with_a_password_stops_the_step_before_anything_is_written(tmp_path):
    snippet = tmp_path / "80instinct-finetune-proxy"
    proc, out = run_play(
        tmp_path, APT_PLAY, {"preflight_apt_proxy_file": str(snippet), "instinct_http_proxy": SECRET_PROXY}
    )
    assert proc.returncode != 0 and not snippet.exists()
    text = json.dumps(out)
    assert "node1: instinct_http_proxy is" in text and "command lines (ps)" in text
    assert "s3cr" not in text and "docs/runbooks/proxy.md" in text


def test_a_proxy_url_without_a_scheme_stops_the_step_naming_host_and_runbook(tmp_path):
    proc, out = run_play(
        tmp_path, APT_PLAY, {"preflight_apt_proxy_file": str(tmp_path / "x"),
                             "instinct_http_proxy": "svc:hunter2@proxy.example.com:3128"},
    )  # fmt: skip
    assert proc.returncode != 0
    text = json.dumps(out)
    assert "node1: instinct_http_proxy is" in text and "docs/runbooks/proxy.md" in text
    assert "hunter2" not in text and not (tmp_path / "x").exists()


def test_the_jobs_launch_env_carries_the_proxy_and_nothing_without_one():
    env_file = FilterModule().filters()["env_file"]
    environment = jinja2.Environment(trim_blocks=True, keep_trailing_newline=True)  # noqa: S701
    # The template quotes its values with Ansible's own quote filter, as the role renders it.
    environment.filters["quote"] = core_filters.quote
    template = environment.from_string((ROOT / "roles/finetune/templates/launch.env.j2").read_text())
    nodes = [{"name": "node1", "fabric": "10.10.0.11"}, {"name": "node2", "fabric": "10.10.0.12"}]
    common = {
        "ansible_managed": "managed", "finetune_node_rank": 0, "finetune_job_name": "tiny-sft",
        "instinct_rccl_env_file": "/etc/instinct-finetune/rccl.env", "finetune_ranks": ["node1", "node2"],
        "finetune_nproc": 1, "finetune_omp": {"threads": 2, "source": "test"}, "instinct_venv": "/opt/instinct/venv",
        "finetune_hf_home": "/var/lib/instinct-finetune/hf", "finetune_hf_endpoint": "https://huggingface.co",
        "finetune_progress_metrics": False, "finetune_device": "cpu",
    }  # fmt: skip
    with_proxy = env_file(
        template.render(
            **common, instinct_proxy_env=proxy.proxy_environment("http://proxy:3128", "http://proxy:3128", [], nodes)
        )
    )
    assert with_proxy["HTTPS_PROXY"] == with_proxy["https_proxy"] == "http://proxy:3128"
    # The rendezvous (the master's fabric address) never goes to the proxy.
    assert "10.10.0.11" in with_proxy["NO_PROXY"].split(",")
    without = env_file(template.render(**common, instinct_proxy_env={}))
    assert not [name for name in without if "proxy" in name.lower()]
    assert without["HF_ENDPOINT"] == "https://huggingface.co"
