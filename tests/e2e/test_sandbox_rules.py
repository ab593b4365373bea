"""One rule for nodes that fail (issue 17): in site.yml a node that fails any stage stops every node
before anything else happens, and the run says which node failed in which stage."""

import pytest
from cluster import NODES, ROOT, sandbox


@pytest.fixture(scope="module")
def preflight_fails(converged):
    return sandbox.run_playbook(
        ROOT / "tests" / "e2e" / "playbooks" / "preflight-fails-on-node2.yml",
        cmdline=sandbox.site_cmdline(),
        extravars={"finetune_collect_dir": str(sandbox.collect_dir())},
        quiet=True,
    )


def test_a_node_that_fails_preflight_stops_the_run_on_every_node(preflight_fails):
    assert preflight_fails.rc != 0
    assert preflight_fails.failed_hosts() == [NODES[1]]
    (failure,) = preflight_fails.failures
    assert failure["host"] == NODES[1] and "100000" in str(failure["msg"]), failure
    # The stage is named: the run ended in the preflight play, and no later stage started.
    plays = [play["play"] for play in preflight_fails.plays]
    assert plays[-1] == "Check every node before anything is installed", plays
    # node1 stopped with it, unchanged: nothing was installed or launched on part of the cluster.
    assert preflight_fails.changed == {}
    assert preflight_fails.ran("Launch one LLaMA-Factory process per node") == []
