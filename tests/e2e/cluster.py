"""What every e2e test module shares: the sandbox driver (scripts/sandbox.py), the node names, and
commands run inside a node."""

import importlib.util
import json
import os
import re
import shlex
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
JOB = "sandbox-tiny"
JOB_ROOT = "/var/lib/instinct-finetune/jobs"
VENV = "/opt/instinct/venv"
LF_SETS = "/opt/instinct/wheels/llama-factory"  # llama_factory_dependency_root
FABRIC_PREFIX = "172.29.20."
# The fabric stage's all-reduce launch (roles/fabric/tasks/smoke.yml): a run that must launch nothing skips it.
SMOKE_TASK = "Start one all-reduce process per GPU (one per node without a GPU) over the fabric interface"

_spec = importlib.util.spec_from_file_location("sandbox", ROOT / "scripts" / "sandbox.py")
sandbox = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sandbox)
_spec = importlib.util.spec_from_file_location("standin_hub", ROOT / "tests" / "fixtures" / "hub" / "standin_hub.py")
standin_hub = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(standin_hub)

# SANDBOX_NODES of them (default 2); the first is the master and the Prometheus server.
NODES = sandbox.nodes()
_INVENTORY = sandbox.inventory_script()


def _ssh(host):
    """ssh to a node as Ansible reaches it (the sandbox inventory's address, key and known_hosts),
    through a master connection of the tests' own: a command costs about a quarter of the CPU of a
    `docker exec` (the tests read the nodes thousands of times while jobs train)."""
    inventory = _INVENTORY.inventory(len(NODES))
    settings = inventory["instinct_nodes"]["vars"]
    address = inventory["_meta"]["hostvars"][host]["ansible_host"]
    control = Path(settings["ansible_ssh_private_key_file"]).parent / "e2e-%C"
    return ["ssh", *shlex.split(settings["ansible_ssh_args"]), *shlex.split(settings["ansible_ssh_common_args"]),
            "-o", f"ControlPath={control}", "-o", "BatchMode=yes", "-i", settings["ansible_ssh_private_key_file"],
            f"{settings['ansible_user']}@{address}"]  # fmt: skip


def node(host, *argv, check=True):
    """Run argv inside a node (as root), over SSH; argv is quoted for the node's shell. ssh's own
    failure (exit 255: no connection) always raises: read as the command's exit, it would pass for
    "nothing found" (no process, no checkpoint) where a test checks that nothing is left."""
    done = subprocess.run(
        [*_ssh(host), shlex.join(argv)], check=False, capture_output=True, text=True, stdin=subprocess.DEVNULL
    )
    if done.returncode == 255 or (check and done.returncode != 0):
        raise subprocess.CalledProcessError(done.returncode, done.args, done.stdout, done.stderr)
    return done


def as_trainer(host, *argv, check=False):
    """Run argv inside a node as the training account, the way the units and the roles' tasks run it:
    from the account's home (an SSH session starts in root's, which the account cannot enter; Ansible's
    modules move to the become user's home, and the units have their own WorkingDirectory)."""
    return node(host, "sh", "-c", 'cd "$(getent passwd instinct | cut -d: -f6)" && exec sudo -H -u instinct "$@"',
                "as-trainer", *argv, check=check)  # fmt: skip


def node_python(host, code):
    """The venv's Python on a node, as the training account: nothing, the tests included, runs the
    venv's code as root (test_sandbox.py plants a .pth there and checks that root never ran it)."""
    return as_trainer(host, f"{VENV}/bin/python", "-c", code, check=True)


def debug_messages(result, task):
    """The messages of a debug task, by host."""
    return {d["host"]: d["msg"] for d in result.debug if task in (d["task"] or "")}


def served_lines(result, host):
    """Every line the wheel servers on ``host`` printed (the share step's report, once per share)."""
    return [
        line
        for d in result.debug
        if d["host"] == host and "Show what the builder served" in (d["task"] or "")
        for line in (d["msg"] if isinstance(d["msg"], list) else str(d["msg"]).splitlines())
    ]


def summary_lines(result):
    """The summary table's lines: a list, or one string of lines where the callback renders YAML."""
    msgs = [d["msg"] for d in result.debug if "Print one row per node" in (d["task"] or "")]
    assert msgs, "no summary was printed"
    return msgs[0].splitlines() if isinstance(msgs[0], str) else msgs[0]


def mgmt_address(host):
    """A node's address on the management network (where wheels are served and the hub is reached)."""
    return node(host, "sh", "-c", "ip -4 -o addr show | grep 172.29.10.").stdout.split()[3].split("/")[0]


def ip_json(host, *argv):
    return json.loads(node(host, "ip", "-j", *argv).stdout)


class Hub:
    """The stand-in hub of tests/fixtures/hub/standin_hub.py, serving the sandbox's tiny model on the
    sandbox's management gateway, where the nodes reach this machine (the real hub is unreachable)."""

    REPO = "sandbox/tiny-llama"
    PORT = int(os.environ.get("SANDBOX_HUB_PORT", "8769"))  # free of the molecule repositories (8764-8768)
    COMMIT = standin_hub.COMMIT
    # Where the nodes reach it (the sandbox's management gateway) and the folder a node stages it in
    # (roles/finetune/vars/main.yml, finetune_hub_models_dir).
    URL = f"http://{os.environ.get('SIM_GATEWAY', '172.29.10.1')}:{PORT}"
    STAGED = f"/var/lib/instinct-finetune/models/hub/sandbox--tiny-llama--{standin_hub.COMMIT}"

    def __init__(self, process, started):
        self.process = process
        self.url, self.commit = started["url"], started["commit"]

    def requests(self):
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never through a proxy
        with opener.open(f"{self.url}/_standin/requests", timeout=10) as answer:
            return json.load(answer)

    def gets(self, client, name):
        """The GETs of one repository file, from one client address, in the order they came."""
        return [r for r in self.requests() if r["method"] == "GET" and r["file"] == name and r["client"] == client]


class AlertReceiver:
    """A webhook receiver on the sandbox's management gateway, where the sandbox's Alertmanager posts
    every alert (inventories/sandbox: monitoring_alertmanager_webhook_urls): it keeps each payload."""

    PORT = 8771
    URL = f"http://{os.environ.get('SIM_GATEWAY', '172.29.10.1')}:{PORT}/alerts"

    def __init__(self):
        import http.server  # noqa: PLC0415 - only the alert test needs it
        import threading  # noqa: PLC0415

        self.payloads = []
        received = self.payloads

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # the name http.server calls
                length = int(self.headers.get("Content-Length") or 0)
                received.append({"path": self.path, "body": json.loads(self.rfile.read(length) or b"{}")})
                self.send_response(200)
                self.end_headers()

            def log_message(self, *_):
                pass

        host = os.environ.get("SIM_GATEWAY", "172.29.10.1")
        self.server = http.server.ThreadingHTTPServer((host, self.PORT), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def alerts(self, name, instance, status="firing"):
        """Every alert of that name and node, with that status, in the payloads so far."""
        return [alert for payload in self.payloads for alert in payload["body"].get("alerts", [])
                if alert["labels"].get("alertname") == name and alert["labels"].get("instance") == instance
                and alert.get("status") == status]  # fmt: skip

    def close(self):
        self.server.shutdown()
        self.server.server_close()


# A job's checkpoints, processes, progress and the plays that watch it.
def since_last_launch(text):
    """The part of a training log written by the latest launch (the unit marks each one)."""
    return text.rsplit("==== instinct.finetune launch", 1)[-1]


def complete_checkpoints(host, job):
    out = node(host, "sh", "-c", f"ls -d {JOB_ROOT}/{job}/output/checkpoint-*/trainer_state.json", check=False)
    return sorted(int(re.search(r"checkpoint-(\d+)/", line).group(1)) for line in out.stdout.split())


def training_processes(host):
    out = node(host, "pgrep", "-af", "torchrun|instinct_node_tools.launch", check=False)
    return [line for line in out.stdout.splitlines() if "pgrep" not in line]


def run_in_thread(playbook, extra, outcome):
    """A playbook run in the background (a job's watching play), its result put in ``outcome``."""

    def run():
        outcome["result"] = sandbox.run_playbook(
            playbook,
            cmdline=sandbox.site_cmdline(extra),
            extravars={"finetune_collect_dir": str(sandbox.collect_dir()), "finetune_progress_interval": 5},
            quiet=True,
        )

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def wait_until(condition, thread, what, timeout=600):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not condition():
        assert thread is None or thread.is_alive(), f"the play ended before {what}"
        time.sleep(1)
    assert condition(), what


def trained_steps(host, job):
    """The newest step of the latest launch in a node's progress file (0 before its first)."""
    out = node(host, "sh", "-c", f"cat {JOB_ROOT}/{job}/metrics/rank*.prom", check=False).stdout
    found = re.search(r"^instinct_finetune_step\{[^}]*\} (\S+)$", out, re.M)
    return float(found.group(1)) if found else 0


# torchrun's worker of the node tools' launcher, the process a test kills or freezes.
WORKER = "python[0-9.]* -u -m instinct_node_tools.launch"
WATCH_TASK = "Watch the job until it ends, a rank dies or it stalls"


# The health check's burn-in on the containers' shared cores: small matrices, one thread a node, and a
# tolerance so wide that it checks the path, not the figures (test_sandbox_monitoring.py's soak).
SANDBOX_BURNIN = {"health_burnin_matrix_size": 256, "health_burnin_cpu_threads": 1, "health_burnin_tolerance": 0.9}
