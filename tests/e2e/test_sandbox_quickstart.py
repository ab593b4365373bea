"""README.md's "Real-cluster quick start", run as written up to and including its preflight line,
against the converged sandbox nodes over SSH, the way an operator runs it against a real cluster.

The nodes get what a real node has before the quick start: sshd (installed where the image lacks
it, with a host key of its own) and the example inventory's sudo-capable account, whose
authorized key is a throwaway one made here. The lines then run in one shell, in a temporary HOME
and in a copy of the checkout whose inventories/ is a copy too (so inventories/production is made
fresh), with these stand-ins only:

- the `git clone ... && cd ...` line: the copy is the clone, and the lines run in it;
- `$EDITOR`: a program that does the operator's edits: the example's management addresses become
  the sandbox nodes' (the names stay the example's), fabric_cidr the sandbox's, and the sandbox's
  disk and memory floors are added (containers share one machine: inventories/sandbox/group_vars);
- ssh reads `~` from the account's passwd entry, not from HOME: the run is given
  ANSIBLE_SSH_COMMON_ARGS="-F $HOME/.ssh/config", whose config names the temporary HOME's
  known_hosts and key and nothing else (no machine-wide ssh settings either). No other ANSIBLE_*
  variable reaches the run, so host key checking is what ansible.cfg says.

Preflight must pass on both nodes; the same preflight line with an empty known_hosts, and with
known_hosts holding other keys for the nodes' addresses, must be refused at the connection.
"""

import json
import os
import re
import shlex
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest
import yaml
from cluster import NODES, ROOT, node

README = ROOT / "README.md"
EXAMPLE = ROOT / "inventories" / "example"
SANDBOX_VARS = ROOT / "inventories" / "sandbox" / "group_vars" / "all.yml"
HEADING = "## Real-cluster quick start"
# The sandbox's management network (molecule/resources/sandbox/up.yml): the address Ansible reaches.
MGMT_NETWORK = "instinct-sandbox-1-mgmt"
SUDOERS = "/etc/sudoers.d/90-instinct-quickstart-test"
# The shell stops at the first line that fails and names it.
STRICT = "set -e -o pipefail; trap 'echo \"quickstart: this line failed: $BASH_COMMAND\" >&2' ERR"
# What an operator sets in group_vars for the sandbox's containers, taken from its own inventory.
SANDBOX_SETTINGS = ("preflight_min_free_disk_gb", "preflight_min_memory_gb")

# The operator's edits, done by a program that $EDITOR names: for each file it is given, replace
# each text (which must be there exactly once) and append a block.
EDITOR = r"""
import json, os, sys
edits = json.loads(open(os.environ["QUICKSTART_EDITS"]).read())
for path in sys.argv[1:]:
    (key,) = [k for k in edits if path.endswith(k)] or sys.exit(f"editor: no edits for {path}")
    text = open(path).read()
    for old, new in edits[key]["replace"]:
        if text.count(old) != 1:
            sys.exit(f"editor: {path} holds {old!r} {text.count(old)} times, not once")
        text = text.replace(old, new)
    open(path, "w").write(text + edits[key].get("append", ""))
"""


def quickstart_block(readme=README):
    """The lines of the first ```sh block under the quick start's heading."""
    text = readme.read_text()
    assert HEADING in text, f"README.md has no {HEADING!r}"
    match = re.search(r"^```sh\n(.*?)^```", text.split(HEADING, 1)[1], re.M | re.S)
    assert match, f"no ```sh block under {HEADING!r}"
    return match.group(1).splitlines()


def steps_to_preflight(lines):
    """(the lines to run, the preflight line): every line after the clone, through preflight's."""
    assert lines[0].startswith("git clone ") and lines[0].endswith("&& cd instinct.finetune"), lines[0]
    (last,) = [i for i, line in enumerate(lines) if "playbooks/preflight.yml" in line and not line.startswith("#")]
    return lines[1 : last + 1], lines[last]


def example_inventory():
    """The example's hosts in order as (name, ansible_host), its account, and its group variables."""
    hosts = yaml.safe_load((EXAMPLE / "hosts.yml").read_text())["all"]
    nodes = hosts["children"]["instinct_nodes"]["hosts"]
    group_vars = yaml.safe_load((EXAMPLE / "group_vars" / "all.yml").read_text())
    return [(name, v["ansible_host"]) for name, v in nodes.items()], hosts["vars"]["ansible_user"], group_vars


def management_address(host):
    inspect = ["docker", "inspect", "-f", "{{json .NetworkSettings.Networks}}", host]
    networks = json.loads(subprocess.run(inspect, capture_output=True, text=True, check=True).stdout)
    return networks[MGMT_NETWORK]["IPAddress"]


def host_key(host):
    """The node's own ed25519 host key, as known_hosts holds it (type and base64)."""
    return " ".join(node(host, "cat", "/etc/ssh/ssh_host_ed25519_key.pub").stdout.split()[:2])


def start_sshd(host):
    """sshd on the node as a real node has it: installed from Ubuntu's archive where the image lacks it."""
    if node(host, "test", "-x", "/usr/sbin/sshd", check=False).returncode != 0:
        install = "DEBIAN_FRONTEND=noninteractive apt-get install -y -q openssh-server"
        node(host, "sh", "-c", f"{install} || {{ apt-get update -q && {install}; }}")
    node(host, "systemctl", "enable", "--now", "ssh")


def authorize(host, user, public_key):
    """The example's account on the node, sudo without a password, with the throwaway key.
    Returns whether the account was made here (then the test removes it)."""
    made = node(host, "id", "-u", user, check=False).returncode != 0
    if made:
        node(host, "useradd", "--create-home", "--shell", "/bin/bash", user)
    home = node(host, "getent", "passwd", user).stdout.split(":")[5]
    script = (
        f"install -d -m 700 -o {user} -g {user} {home}/.ssh && "
        f"printf '%s\\n' {shlex.quote(public_key)} > {home}/.ssh/authorized_keys && "
        f"chown {user}:{user} {home}/.ssh/authorized_keys && chmod 600 {home}/.ssh/authorized_keys && "
        f"printf '%s\\n' {shlex.quote(f'{user} ALL=(ALL) NOPASSWD:ALL')} > {SUDOERS} && chmod 440 {SUDOERS} && "
        f"visudo -cf {SUDOERS}"
    )
    node(host, "sh", "-c", script)
    return made


def make_home(path, key, known_hosts=""):
    """A HOME with the throwaway key, an ssh config naming only this HOME's files, and known_hosts."""
    ssh = path / ".ssh"
    ssh.mkdir(parents=True, mode=0o700)
    shutil.copy(key, ssh / "id_ed25519")
    (ssh / "id_ed25519").chmod(0o600)
    (ssh / "config").write_text(
        f"UserKnownHostsFile {ssh}/known_hosts\nGlobalKnownHostsFile /dev/null\n"
        f"IdentityFile {ssh}/id_ed25519\nIdentitiesOnly yes\n"
    )
    (ssh / "known_hosts").write_text(known_hosts)
    return path


def checkout_copy(path):
    """The checkout as the clone: inventories/ copied (without any production inventory of this
    checkout), everything else linked."""
    path.mkdir()
    for entry in ROOT.iterdir():
        if entry.name not in ("inventories", ".git"):
            (path / entry.name).symlink_to(entry)
    top = str(ROOT / "inventories")
    shutil.copytree(top, path / "inventories", ignore=lambda folder, _names: ["production"] if folder == top else [])
    return path


def run_lines(lines, workdir, home, extra_env=None):
    """The lines in one bash, stopping at the first that fails, with no controlling terminal (ssh
    cannot ask), and nothing of this process's Ansible settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(HOME=str(home), ANSIBLE_SSH_COMMON_ARGS=f"-F {home}/.ssh/config", **(extra_env or {}))
    script = "\n".join([STRICT, *lines, ""])
    run = {"cwd": workdir, "env": env, "capture_output": True, "text": True, "start_new_session": True}
    return subprocess.run(["bash", "-c", script], check=False, timeout=600, **run)


def operator_edits(ssh_cluster):
    """What the operator writes into the copied example: each example address becomes its sandbox
    node's, fabric_cidr the sandbox's, and the sandbox's disk and memory floors are added."""
    sandbox_vars = yaml.safe_load(SANDBOX_VARS.read_text())
    addresses = ssh_cluster["addresses"]
    example_cidr = ssh_cluster["group_vars"]["fabric_cidr"]
    floors = "".join(f"{name}: {sandbox_vars[name]}\n" for name in SANDBOX_SETTINGS)
    return {
        "hosts.yml": {
            "replace": [
                [f"ansible_host: {old}", f"ansible_host: {addresses[name]}"] for name, old in ssh_cluster["hosts"]
            ]
        },
        "group_vars/all.yml": {
            "replace": [[f"fabric_cidr: {example_cidr}", f"fabric_cidr: {sandbox_vars['fabric_cidr']}"]],
            "append": f"\n# The sandbox's containers share one machine's disk and memory.\n{floors}",
        },
    }


def recap(output):
    """PLAY RECAP's counts by host."""
    return {
        m.group(1): {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m.group(2))}
        for m in re.finditer(r"^(\S+)\s+: (ok=.*)$", output, re.M)
    }


@pytest.fixture(scope="module")
def ssh_cluster(converged, tmp_path_factory):
    """The sandbox nodes as the example's hosts, reachable over SSH with a throwaway key."""
    hosts, user, group_vars = example_inventory()
    if len(NODES) < len(hosts):
        pytest.skip(f"the example inventory names {len(hosts)} nodes; the sandbox has {len(NODES)}")
    nodes = NODES[: len(hosts)]
    keys = tmp_path_factory.mktemp("quickstart-key")
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "quickstart-test", "-f", keys / "id"], check=True
    )
    with ThreadPoolExecutor(len(nodes)) as pool:
        list(pool.map(start_sshd, nodes))
    # Nodes started from one image share its host keys; a real node has its own.
    if len({host_key(host) for host in nodes}) < len(nodes):
        for host in nodes:
            node(host, "sh", "-c", "rm -f /etc/ssh/ssh_host_* && ssh-keygen -A && systemctl restart ssh")
    made = [host for host in nodes if authorize(host, user, (keys / "id.pub").read_text().strip())]
    addresses = {name: management_address(host) for (name, _address), host in zip(hosts, nodes, strict=True)}
    yield {"hosts": hosts, "nodes": nodes, "addresses": addresses, "key": keys / "id", "group_vars": group_vars}
    for host in nodes:
        node(host, "rm", "-f", SUDOERS)
        if host in made:
            node(host, "userdel", "--force", "--remove", user, check=False)


@pytest.fixture(scope="module")
def quickstart(ssh_cluster, tmp_path_factory):
    """The README's lines through preflight, in a fresh HOME and a copy of the checkout."""
    lines, _preflight = steps_to_preflight(quickstart_block())
    work = tmp_path_factory.mktemp("quickstart")
    workdir, home = checkout_copy(work / "instinct.finetune"), make_home(work / "home", ssh_cluster["key"])
    (work / "edits.json").write_text(json.dumps(operator_edits(ssh_cluster)))
    (work / "editor.py").write_text(EDITOR)
    editor = {"EDITOR": f"python3 {work / 'editor.py'}", "QUICKSTART_EDITS": str(work / "edits.json")}
    result = run_lines(lines, workdir, home, editor)
    result.workdir, result.home = workdir, home
    return result


def test_the_quick_start_reaches_both_nodes_over_ssh_and_preflight_passes(quickstart, ssh_cluster):
    output = quickstart.stdout + quickstart.stderr
    assert quickstart.returncode == 0, output[-6000:]
    counts = recap(quickstart.stdout)
    assert sorted(counts) == sorted(name for name, _address in ssh_cluster["hosts"]), output[-6000:]
    for name, count in counts.items():
        assert count["ok"] > 0 and count["failed"] == 0 and count["unreachable"] == 0, (name, count)
    # The inventory it ran against, as Ansible reads it: the example's names at the sandbox's
    # addresses, a monitoring host (Prometheus), and sudo for every host of every group.
    listing = ["source scripts/env.sh", "ansible-inventory -i inventories/production --list"]
    listed = run_lines(listing, quickstart.workdir, quickstart.home)
    assert listed.returncode == 0, listed.stderr
    inventory = json.loads(listed.stdout)
    hostvars = inventory["_meta"]["hostvars"]
    assert {name: hostvars[name]["ansible_host"] for name in inventory["instinct_nodes"]["hosts"]} == ssh_cluster[
        "addresses"
    ]
    assert inventory["monitoring"]["hosts"], inventory
    assert all(v.get("ansible_become") is True and v.get("ansible_user") for v in hostvars.values()), hostvars


def test_the_keyscan_wrote_each_nodes_own_key_under_the_address_ansible_connects_to(quickstart, ssh_cluster):
    assert quickstart.returncode == 0, quickstart.stderr[-3000:]
    known_hosts = quickstart.home / ".ssh" / "known_hosts"
    for (name, _address), host in zip(ssh_cluster["hosts"], ssh_cluster["nodes"], strict=True):
        address = ssh_cluster["addresses"][name]
        found = subprocess.run(
            ["ssh-keygen", "-F", address, "-f", known_hosts], capture_output=True, text=True, check=False
        )
        entries = [" ".join(line.split()[1:3]) for line in found.stdout.splitlines() if not line.startswith("#")]
        assert host_key(host) in entries, (name, address, found.stdout)
        # Hashed (-H), and not under the inventory name: ssh looks the address up.
        assert address not in known_hosts.read_text()
        assert subprocess.run(
            ["ssh-keygen", "-F", name, "-f", known_hosts], capture_output=True, check=False
        ).returncode


@pytest.mark.parametrize("known", ["empty", "other keys"])
def test_preflight_is_refused_when_known_hosts_does_not_hold_the_nodes_keys(quickstart, ssh_cluster, tmp_path, known):
    assert quickstart.returncode == 0, quickstart.stderr[-3000:]
    _lines, preflight = steps_to_preflight(quickstart_block())
    text = ""
    if known == "other keys":  # as after a node was reinstalled, or another machine took its address
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", tmp_path / "other"], check=True)
        other = " ".join((tmp_path / "other.pub").read_text().split()[:2])
        text = "".join(f"{address} {other}\n" for address in ssh_cluster["addresses"].values())
    # A HOME of its own: no SSH connection of the run above is reused.
    home = make_home(tmp_path / "home", ssh_cluster["key"], text)
    result = run_lines(["source scripts/env.sh", preflight], quickstart.workdir, home)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-6000:]
    assert "Host key verification failed" in output, output[-6000:]
    if known == "other keys":
        assert "REMOTE HOST IDENTIFICATION HAS CHANGED" in output, output[-6000:]
    counts = recap(result.stdout)
    assert sorted(counts) == sorted(name for name, _address in ssh_cluster["hosts"]), output[-6000:]
    assert all(count["unreachable"] == 1 for count in counts.values()), counts
