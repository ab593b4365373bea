"""The sandbox cluster, brought up once per session: site.yml from bare containers with the sandbox
job (jobs/sandbox-tiny.yml). Every e2e module reads the same converged cluster."""

import pytest
from cluster import sandbox


@pytest.fixture(scope="session")
def site():
    # Whatever the age of the image or of a cluster kept from an earlier run, site.yml starts on apt
    # lists that are empty and new (the state that made issue 15's "No package matching").
    sandbox.cluster_up(fresh_apt=True)
    result = sandbox.run_playbook(
        "site.yml", cmdline=sandbox.site_cmdline(), extravars={"finetune_collect_dir": str(sandbox.collect_dir())}
    )
    sandbox.write_report("site", result)
    sandbox.print_report(result)
    return result


@pytest.fixture(scope="session")
def converged(site):
    """The cluster after a site.yml that succeeded: tests that read its state need that first."""
    assert site.rc == 0, site.failures
    return site
