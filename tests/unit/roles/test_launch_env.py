"""The finetune role's launch environment (templates/launch.env.j2), rendered as the role renders it
with the threads per rank the role works out from the node's processor facts (tasks/probe.yml), and
read back as systemd's EnvironmentFile= reads it (the env_file filter)."""

import jinja2
import pytest
from ansible.errors import AnsibleFilterError
from ansible.plugins.filter.core import FilterModule as CoreFilters

from ansible_collections.instinct.finetune.plugins.filter.finetune import FilterModule
from tests.unit.conftest import ROOT

FILTERS = FilterModule().filters()
omp_threads = FILTERS["finetune_omp_threads"]
env_file = FILTERS["env_file"]
TEMPLATE = ROOT / "roles" / "finetune" / "templates" / "launch.env.j2"

# An MI300X node: two 96-core EPYC sockets with SMT, 384 CPUs, the launch unrestricted.
MI300X_NODE = {
    "processor_count": 2,
    "processor_cores": 96,
    "processor_threads_per_core": 2,
    "processor_vcpus": 384,
    "processor_nproc": 384,
}


def render(facts, ranks, override="", device="rocm"):
    env = jinja2.Environment(trim_blocks=True, keep_trailing_newline=True)  # noqa: S701
    # Ansible's quote filter, which the template quotes its values with.
    env.filters["quote"] = CoreFilters().filters()["quote"]
    template = env.from_string(TEMPLATE.read_text())
    text = template.render(
        ansible_managed="managed",
        finetune_node_rank=0,
        finetune_job_name="tiny-sft",
        instinct_rccl_env_file="/etc/instinct-finetune/rccl.env",
        finetune_ranks=["node1", "node2"],
        finetune_nproc=ranks,
        finetune_omp=omp_threads(facts, ranks, override, "node1"),
        instinct_venv="/opt/instinct/venv",
        finetune_hf_home="/var/lib/instinct-finetune/hf",
        finetune_hf_endpoint="https://huggingface.co",
        finetune_progress_metrics=False,
        finetune_device=device,
    )
    return text, env_file(text)


def test_eight_ranks_on_a_192_core_node_get_24_threads_each():
    text, env = render(MI300X_NODE, 8)
    assert env["NPROC_PER_NODE"] == "8"
    # Set, so torchrun leaves it as it is instead of giving each of the 8 ranks one thread.
    assert env["OMP_NUM_THREADS"] == "24"
    assert "192 physical cores / 8 ranks" in text


def test_one_rank_gets_every_physical_core_and_hyper_threads_are_not_counted():
    assert render(MI300X_NODE, 1)[1]["OMP_NUM_THREADS"] == "192"
    assert render(dict(MI300X_NODE, processor_threads_per_core=1, processor_vcpus=192, processor_nproc=192), 8)[1][
        "OMP_NUM_THREADS"
    ] == "24"  # fmt: skip


def test_a_launch_restricted_to_fewer_cpus_shares_those():
    # A container's cpuset or a Slurm allocation of 32 CPUs (16 cores with SMT) on the same node.
    restricted = dict(MI300X_NODE, processor_nproc=32)
    assert render(restricted, 8)[1]["OMP_NUM_THREADS"] == "2"
    # Fewer cores than ranks: one thread each, never zero.
    assert render(dict(MI300X_NODE, processor_nproc=4), 8)[1]["OMP_NUM_THREADS"] == "1"


def test_a_cpu_node_whose_cpuinfo_names_no_socket_counts_each_cpu_as_a_core():
    # What Ansible's facts say of a 2-CPU VM whose /proc/cpuinfo has no "physical id" or "cpu cores":
    # one socket per CPU, one core each.
    facts = {
        "processor_count": 2, "processor_cores": 1, "processor_threads_per_core": 1, "processor_vcpus": 2,
        "processor_nproc": 2,
    }  # fmt: skip
    assert render(facts, 1, device="cpu")[1]["OMP_NUM_THREADS"] == "2"
    # Only the number of CPUs, nothing about cores: those CPUs.
    assert render({"processor_vcpus": 4}, 2, device="cpu")[1]["OMP_NUM_THREADS"] == "2"


def test_the_override_is_taken_as_it_is():
    text, env = render(MI300X_NODE, 8, override="12")
    assert env["OMP_NUM_THREADS"] == "12"
    assert "finetune_omp_num_threads" in text
    assert render(MI300X_NODE, 8, override=16)[1]["OMP_NUM_THREADS"] == "16"


@pytest.mark.parametrize("override", ["0", "-4", "auto", 2.5, True])
def test_a_bad_override_is_refused_naming_host_value_fix_and_runbook(override):
    with pytest.raises(AnsibleFilterError) as raised:
        render(MI300X_NODE, 8, override=override)
    message = str(raised.value)
    assert "node1: finetune_omp_num_threads is" in message and repr(override) in message
    assert "positive whole number" in message and "docs/runbooks/finetune-job.md" in message


def test_facts_without_any_cpu_count_are_refused_naming_the_override():
    with pytest.raises(AnsibleFilterError, match=r"node1: .*set finetune_omp_num_threads"):
        render({}, 8)
