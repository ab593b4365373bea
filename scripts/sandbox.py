"""The sandbox cluster's main job, driven through ansible-runner's Python API.

`make sandbox` (scripts/sandbox.sh) calls `sandbox.py up`: it makes the sandbox's inputs (a stand-in
for PyTorch's CPU index, a tiny model and dataset), starts the two node containers, turns them
into simulated Instinct nodes, and runs playbooks/site.yml with jobs/sandbox-tiny.yml. Every
playbook runs through ansible_runner.run(); the run is judged from its events (changed and failed
counts per host, the failed tasks with their messages, the wall time of every play), not from
scraped text, and the figures are written to artifacts/sandbox/<name>.json for bench/ and tests.

    sandbox.py up [-- ANSIBLE ARGS]   bring up (or reuse) the cluster and run site.yml
    sandbox.py run PLAYBOOK [-- ARGS] run one playbook of playbooks/ against the running cluster
    sandbox.py down                   remove the containers and networks
"""

import importlib.util
import json
import os
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import ansible_runner

ROOT = Path(__file__).resolve().parent.parent
INVENTORY = ROOT / "inventories" / "sandbox"
JOB_FILE = ROOT / "jobs" / "sandbox-tiny.yml"
RESOURCES = ROOT / "molecule" / "resources"


def inventory_script():
    spec = importlib.util.spec_from_file_location("sandbox_inventory", INVENTORY / "hosts.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def nodes():
    """The sandbox's node names, SANDBOX_NODES of them (default 2), as its inventory lists them.
    A bad SANDBOX_NODES stops here with the inventory's message (Ansible would only warn that it
    could not parse the inventory and run on no host)."""
    script = inventory_script()
    return script.inventory(script.node_count(os.environ))["instinct_nodes"]["hosts"]


def cache_dir():
    """The sandbox's state (the inventory's state_dir(): its SSH key lives there too)."""
    path = inventory_script().state_dir()
    path.mkdir(parents=True, exist_ok=True)
    return path


@dataclass
class RunResult:
    """What a playbook run did, read from ansible-runner's events."""

    playbook: str
    status: str
    rc: int
    seconds: float
    changed: dict = field(default_factory=dict)
    failed: dict = field(default_factory=dict)
    ok: dict = field(default_factory=dict)
    plays: list = field(default_factory=list)
    failures: list = field(default_factory=list)
    debug: list = field(default_factory=list)
    # Every task result: host, task, role, status, seconds, changed, handler, the files it names
    # (files) and, for each part of it that changed, the files that part names (changed_files).
    tasks: list = field(default_factory=list)
    task_walls: list = field(default_factory=list)
    # CPU seconds of the run: "controller" is ansible-playbook with its forks and their connection
    # clients (docker exec here, ssh on a real cluster); "machine" is every core of this machine,
    # the Docker engine and the nodes' own processes included (machine_cpu_seconds).
    cpu: dict = field(default_factory=dict)

    def costliest(self, count=10):
        """The ``count`` tasks that took the most wall time (a task's start to the next's, on all hosts)."""
        return sorted(self.task_walls, key=lambda t: -t["seconds"])[:count]

    def changed_tasks(self):
        """(host, task) of every task result that reported a change."""
        return [(t["host"], t["task"]) for t in self.tasks if t["changed"]]

    def changes(self):
        """Every change the results show, one per changed result or loop item, as (host, task,
        handler, files): files are the paths it names (none for a command). A result whose own diff
        shows a difference is a change even where changed_when said otherwise."""
        return [(t["host"], t["task"], t["handler"], files) for t in self.tasks for files in t["changed_files"]]

    def files(self, host):
        """The paths named by the results that ran on ``host``: the files its copy, template and file
        tasks compared with what they write (and wrote, where they differed)."""
        return {path for t in self.tasks if t["host"] == host and t["status"] != "skipped" for path in t["files"]}

    def ran(self, task):
        """The hosts on which a task of this name ran (ok or failed, not skipped)."""
        return sorted({t["host"] for t in self.tasks if t["task"] == task and t["status"] != "skipped"})

    @property
    def total_changed(self):
        return sum(self.changed.values())

    def failed_hosts(self):
        return sorted(host for host, count in self.failed.items() if count)

    def to_dict(self):
        return {
            "playbook": self.playbook,
            "status": self.status,
            "rc": self.rc,
            "seconds": round(self.seconds, 1),
            "changed": self.changed,
            "failed": self.failed,
            "ok": self.ok,
            "plays": self.plays,
            "failures": self.failures,
            "task_walls": self.task_walls,
            "cpu": self.cpu,
            # What a run that should change nothing changed, by host and task.
            "changed_tasks": [list(pair) for pair in self.changed_tasks()],
            # And the files each change named (a handler's names none).
            "changes": [[host, task, handler, list(files)] for host, task, handler, files in self.changes()],
        }


# The events of a task's result on one host, and the status each stands for.
TASK_EVENTS = {
    "runner_on_ok": "ok",
    "runner_on_failed": "failed",
    "runner_on_skipped": "skipped",
    "runner_on_unreachable": "unreachable",
}


def _diffs(res):
    diff = res.get("diff")
    return [entry for entry in (diff if isinstance(diff, list) else [diff]) if isinstance(entry, dict)]


def _diff_shows_a_change(entry):
    """Whether one diff entry shows a difference: copy's and template's content (before and after
    text), file's attributes (before and after mappings). An unchanged result has none, or equal sides."""
    return entry.get("before") != entry.get("after")


def _named_paths(unit):
    """The absolute paths one result (or loop item) names: its dest or path, and its diff's header
    and attributes' paths. (A folder copied whole names the folder only.)"""
    found = [unit.get("dest"), unit.get("path")]
    for entry in _diffs(unit):
        # copy and template: the destination; lineinfile and the like: "PATH (content)".
        header = entry.get("before_header")
        found.append(header.split(" (", 1)[0] if isinstance(header, str) else None)
        found += [side.get("path") for side in (entry.get("before"), entry.get("after")) if isinstance(side, dict)]
    return sorted({path.rstrip("/") or "/" for path in found if isinstance(path, str) and path.startswith("/")})


def result_files(res):
    """(files, changed_files) of a task result: every path it names, and for each part of it that
    changed (the result, or each loop item of a loop), the paths that part names. A part changed
    where it says so or where its diff shows a difference."""
    items = res.get("results")
    looped = isinstance(items, list) and items and all(isinstance(i, dict) and "ansible_loop_var" in i for i in items)
    units = items if looped else [res]
    changed = [
        tuple(_named_paths(unit))
        for unit in units
        if unit.get("changed") or any(_diff_shows_a_change(entry) for entry in _diffs(unit))
    ]
    if res.get("changed") and not changed:  # a loop whose items do not say which one changed
        changed = [tuple(_named_paths(res))]
    files = sorted({path for unit in [res, *units] for path in _named_paths(unit)})
    return files, changed


# The tasks whose msg a test reads (RunResult.debug): preflight's table of problems among them.
DEBUG_ACTIONS = (
    "ansible.builtin.debug",
    "debug",
    "instinct.finetune.summary_report",
    "instinct.finetune.problem_report",
)


class EventReader:
    """Collects what a run's events say: play boundaries, failures, stats and debug messages."""

    def __init__(self, on_event=None):
        # A caller's own look at each event as it comes (a test acting at a given task's start).
        self.on_event = on_event
        self.play_starts = []
        self.failures = []
        self.stats = {}
        self.debug = []
        self.tasks = []
        self.task_starts = []
        # Ansible-runner reports a handler's start as a task start with is_conditional set.
        self.handlers = set()

    def __call__(self, event):
        kind = event.get("event")
        data = event.get("event_data") or {}
        if kind in TASK_EVENTS:
            res = data.get("res") or {}
            files, changed_files = result_files(res)
            self.tasks.append({
                "host": data.get("host"),
                "task": data.get("task"),
                "role": data.get("role"),
                "status": TASK_EVENTS[kind],
                "seconds": float(data.get("duration") or 0),
                "changed": bool(res.get("changed")),
                "handler": bool(data.get("task_uuid")) and data["task_uuid"] in self.handlers,
                "files": files,
                "changed_files": changed_files,
            })  # fmt: skip
        if kind == "playbook_on_play_start":
            now = time.monotonic()
            self.play_starts.append((data.get("play", ""), now))
            self.task_starts.append((None, None, data.get("play", ""), now))
        elif kind in ("playbook_on_task_start", "playbook_on_handler_task_start"):
            if (kind == "playbook_on_handler_task_start" or data.get("is_conditional")) and data.get("task_uuid"):
                self.handlers.add(data["task_uuid"])
            now = time.monotonic()
            self.task_starts.append((data.get("task", ""), data.get("role", ""), data.get("play", ""), now))
        elif kind in ("runner_on_failed", "runner_on_unreachable") and not data.get("ignore_errors"):
            res = data.get("res") or {}
            self.failures.append({"host": data.get("host"), "task": data.get("task"), "msg": res.get("msg")})
        # summary_report and problem_report print their tables through Ansible's display and return the
        # lines as msg.
        elif kind == "runner_on_ok" and data.get("task_action") in DEBUG_ACTIONS:
            msg = (data.get("res") or {}).get("msg")
            if msg is not None:
                self.debug.append({"host": data.get("host"), "task": data.get("task"), "msg": msg})
        elif kind == "playbook_on_stats":
            self.stats = {key: data.get(key) or {} for key in ("changed", "failures", "ok", "dark")}
        if self.on_event:
            self.on_event(event)
        return True

    def task_walls(self, end):
        """Wall seconds of every task: from its start to the next task's or play's start (the linear
        strategy runs a task on every host before the next one starts)."""
        walls = []
        for index, (task, role, play, start) in enumerate(self.task_starts):
            if task is None:
                continue
            stop = self.task_starts[index + 1][3] if index + 1 < len(self.task_starts) else end
            walls.append({"task": task, "role": role, "play": play, "seconds": round(stop - start, 2)})
        return walls

    def plays(self, end):
        timings = []
        for index, (name, start) in enumerate(self.play_starts):
            stop = self.play_starts[index + 1][1] if index + 1 < len(self.play_starts) else end
            timings.append({"play": name, "seconds": round(stop - start, 1)})
        return timings


def machine_cpu_seconds():
    """Busy CPU seconds of every core since boot, from /proc/stat (all but idle and iowait)."""
    with open("/proc/stat", encoding="ascii") as handle:
        fields = [int(value) for value in handle.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def children_cpu_seconds():
    """User and system CPU seconds of this process's reaped children (ansible-playbook, run and
    waited for by ansible-runner, with its forks and their connection clients)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_playbook(playbook, extravars=None, cmdline="", quiet=False, envvars=None, *, on_event=None):  # noqa: PLR0913
    """Run playbooks/<playbook> (or a path) on the sandbox inventory; return its RunResult.
    ``on_event`` is called with each of ansible-runner's events as the run goes."""
    path = Path(playbook)
    if not path.is_absolute():
        path = ROOT / "playbooks" / playbook if (ROOT / "playbooks" / playbook).exists() else ROOT / playbook
    reader = EventReader(on_event)
    # Read around the run: meaningful when runs do not overlap (the benchmarks), not in threads.
    cpu_before = (children_cpu_seconds(), machine_cpu_seconds())
    with tempfile.TemporaryDirectory(prefix="instinct-runner-") as private:
        start = time.monotonic()
        runner = ansible_runner.run(
            private_data_dir=private,
            project_dir=str(ROOT),
            playbook=str(path),
            inventory=str(INVENTORY),
            extravars=extravars or {},
            cmdline=cmdline or None,
            envvars={"ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), **(envvars or {})},
            event_handler=reader,
            quiet=quiet,
        )
        end = time.monotonic()
    cpu = {
        "controller": round(children_cpu_seconds() - cpu_before[0], 1),
        "machine": round(machine_cpu_seconds() - cpu_before[1], 1),
    }
    stats = reader.stats
    return RunResult(
        playbook=str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path),
        status=runner.status,
        rc=runner.rc,
        seconds=end - start,
        changed=dict(stats.get("changed", {})),
        failed={h: stats.get("failures", {}).get(h, 0) + stats.get("dark", {}).get(h, 0) for h in stats.get("ok", {})},
        ok=dict(stats.get("ok", {})),
        plays=reader.plays(end),
        failures=reader.failures,
        debug=reader.debug,
        tasks=reader.tasks,
        task_walls=reader.task_walls(end),
        cpu=cpu,
    )


def require(result):
    if result.rc != 0:
        for failure in result.failures:
            print(f"FAILED {failure['host']}: {failure['task']}: {failure['msg']}", file=sys.stderr)
        raise SystemExit(f"{result.playbook} failed (rc {result.rc}, failed hosts {result.failed_hosts()})")
    return result


def sandbox_env():
    """Inputs of the sandbox made on this machine, exported for the inventory and job file."""
    state = cache_dir()
    index = state / "torch-index"
    assets = state / "assets"
    subprocess.run([sys.executable, str(RESOURCES / "torch-index" / "build.py"), str(index)], check=True)
    subprocess.run([sys.executable, str(RESOURCES / "sandbox" / "make_assets.py"), str(assets)], check=True)
    env = {
        "INSTINCT_SANDBOX_WHEELS": str(index),
        "INSTINCT_SANDBOX_ASSETS": str(assets),
        "SIM_REPO_DIR": str(state / "amd-repo"),
        "SIM_REPO_PORT": os.environ.get("SANDBOX_REPO_PORT", "8764"),
        "SIM_GATEWAY": "172.29.10.1",
        "SIM_VARS_FILE": str(state / "sim-repo.yml"),
        "SIM_SYS_DIR": str(state / "sim-sys"),
    }
    os.environ.update(env)
    return env


def cluster_up(fresh_apt=False):
    """Start (or reuse) the nodes and make them simulated Instinct nodes. With fresh_apt, leave apt's
    lists empty and new, as on a just-built image, so the run that follows must refresh them."""
    env = sandbox_env()
    require(run_playbook(RESOURCES / "sim-node" / "loaded-driver.yml"))
    require(run_playbook(RESOURCES / "sandbox" / "up.yml"))
    require(run_playbook(RESOURCES / "sim-node" / "repo-up.yml"))
    require(
        run_playbook(
            RESOURCES / "sim-node" / "node-prepare.yml",
            extravars={"sim_repo_base_url": f"http://{env['SIM_GATEWAY']}:{env['SIM_REPO_PORT']}"},
        )
    )
    require(run_playbook(RESOURCES / "site-python" / "prepare.yml"))
    if fresh_apt:
        empty_apt_lists()
    return env


def empty_apt_lists():
    """Leave apt's lists on every node empty and new, as on a just-built image."""
    require(run_playbook(RESOURCES / "containers" / "fresh-apt.yml"))


def site_cmdline(extra=()):
    """site.yml's arguments: the simulated repository's URL and key in place of AMD's, the job file,
    then ``extra`` (a list of arguments, or a string already quoted for a shell). ansible-runner splits
    the line with shlex, so each argument is quoted here and reaches ansible-playbook unchanged."""
    extra = shlex.split(extra) if isinstance(extra, str) else list(extra)
    return shlex.join(["-e", f"@{os.environ['SIM_VARS_FILE']}", "-e", f"@{JOB_FILE}", *extra])


def collect_dir():
    return ROOT / "artifacts" / "sandbox"


def write_report(name, result):
    path = collect_dir() / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result.to_dict(), indent=2) + "\n")
    return path


def print_report(result):
    width = max([len(p["play"]) for p in result.plays] + [10])
    print(f"\n{result.playbook}: {result.status} in {result.seconds:.0f} s")
    for play in result.plays:
        print(f"  {play['play']:<{width}}  {play['seconds']:>7.1f} s")
    for host in sorted(result.ok):
        print(f"  {host}: changed={result.changed.get(host, 0)} failed={result.failed.get(host, 0)}")


def main(argv):
    action = argv[1] if len(argv) > 1 else "up"
    print(f"sandbox cluster: {len(nodes())} nodes (SANDBOX_NODES)")
    # The arguments after -- stay a list: joined with spaces, a quoted -e would be split apart.
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    if action == "down":
        sandbox_env()
        require(run_playbook(RESOURCES / "sandbox" / "down.yml"))
        require(run_playbook(RESOURCES / "sim-node" / "repo-down.yml"))
        return 0
    cluster_up()
    if action == "up":
        result = run_playbook(
            "site.yml", cmdline=site_cmdline(extra), extravars={"finetune_collect_dir": str(collect_dir())}
        )
        name = "site"
    elif action == "run":
        playbook = argv[2]
        result = run_playbook(
            playbook, cmdline=site_cmdline(extra), extravars={"finetune_collect_dir": str(collect_dir())}
        )
        name = Path(playbook).stem
    else:
        print(__doc__, file=sys.stderr)
        return 2
    print_report(result)
    print(f"figures: {write_report(name, result)}")
    require(result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
