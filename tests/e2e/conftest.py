"""The sandbox cluster, brought up once per session: site.yml from bare containers with the sandbox
job (jobs/sandbox-tiny.yml). Every e2e module reads the same converged cluster."""

import json
import os
import subprocess
import sys
import time

import pytest
from cluster import LF_SETS, NODES, ROOT, VENV, AlertReceiver, Hub, node, sandbox

# A developer iterating on the e2e suite may keep the cluster of an earlier run (it then starts from
# converged nodes, and the check on new nodes is not shown). CI never sets it.
KEEP = os.environ.get("INSTINCT_E2E_KEEP_CLUSTER", "") == "1"


@pytest.fixture(scope="session")
def site(tmp_path_factory):
    # Containers kept from an earlier run of the suite (a CI machine keeps its Docker store between
    # runs) are removed, so that the run starts on bare nodes, as a real first site.yml does.
    if not KEEP:
        sandbox.require(sandbox.run_playbook(sandbox.RESOURCES / "sandbox" / "down.yml"))
    sandbox.cluster_up()
    # Before the first run, site.yml in check mode predicts without failing. New nodes (always in CI)
    # have no account, venv, ROCm or env file yet: the stages that need them say so and end there.
    # On the first node: the nodes are the same new containers, and the converged check of both
    # (test_sandbox.py, while the fault job trains) is the one that reads across nodes.
    fresh = all(node(host, "test", "-e", f"{VENV}/bin/python", check=False).returncode != 0 for host in NODES)
    check = sandbox.run_playbook(
        "site.yml",
        cmdline=sandbox.site_cmdline(["--check", "--diff", "--limit", NODES[0]]),
        extravars={"finetune_collect_dir": str(sandbox.collect_dir())},
        quiet=True,
    )
    sandbox.write_report("site-check-fresh", check)
    # Whatever the age of the image or of a cluster kept from an earlier run, site.yml starts on apt
    # lists that are empty and new (the state that made issue 15's "No package matching"); the check
    # above refreshed them (apt_index does in check mode: they are a cache).
    sandbox.empty_apt_lists()
    # And every node but the first lacks DeepSpeed's wheel, so that the run always shows it moving
    # node to node (built by node1 on new nodes, or served from its earlier build).
    for host in NODES[1:]:
        node(host, "rm", "-rf", "/opt/instinct/wheels/deepspeed")
    # And on a kept cluster, LLaMA-Factory and two of its dependencies are gone from every node, with
    # every node's copy of its dependency set, so that node1 fetches the set again and serves it (on
    # new nodes nothing is installed yet and the whole set travels).
    for host in NODES:
        node(host, "rm", "-rf", LF_SETS)
        node(host, "sh", "-c", f"test ! -x {VENV}/bin/pip || sudo -H -u instinct-build {VENV}/bin/pip uninstall -y -q "
             "llamafactory fire termcolor", check=False)  # fmt: skip
    # Files the run leaves on the controller are those newer than this (test_sandbox_nodes.py).
    marker = tmp_path_factory.mktemp("site") / "before-site-yml"
    marker.touch()
    time.sleep(1)
    result = sandbox.run_playbook(
        "site.yml", cmdline=sandbox.site_cmdline(), extravars={"finetune_collect_dir": str(sandbox.collect_dir())}
    )
    result.started_marker = marker
    result.fresh_check, result.fresh_nodes = check, fresh
    sandbox.write_report("site", result)
    sandbox.print_report(result)
    return result


@pytest.fixture(scope="session")
def converged(site):
    """The cluster after a site.yml that succeeded: tests that read its state need that first."""
    assert site.rc == 0, site.failures
    return site


@pytest.fixture(scope="session")
def hub(site):
    """Cuts the first GET of the model's weights once, so that the first node to fetch them must
    resume; serves until the session ends."""
    assets = os.environ["INSTINCT_SANDBOX_ASSETS"]  # set by the site fixture's cluster_up
    command = [sys.executable, str(ROOT / "tests" / "fixtures" / "hub" / "standin_hub.py"), "--bind",
               os.environ.get("SIM_GATEWAY", "172.29.10.1"), "--port", str(Hub.PORT),
               "--repo", f"{Hub.REPO}={assets}/model", "--cut", "model.safetensors=300000"]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    started = json.loads(process.stdout.readline())
    yield Hub(process, started)
    process.terminate()
    process.wait(timeout=30)


@pytest.fixture(scope="session")
def alert_receiver():
    """The webhook the sandbox's Alertmanager posts to, from the first test that asks for it."""
    receiver = AlertReceiver()
    yield receiver
    receiver.close()
