"""What the fabric role writes to rccl.env: the role's own template rendered with the settings the
rccl_env filter orders, from the role's defaults (AMD's MI300X settings and their archs), read back
as systemd and the launcher read it, and as a shell sources it (the fabric and health checks, an
operator by hand): values quoted, so that fabric_env's values run nothing (issue 32); fabric_env's
names and line breaks refused by the role's own check (tasks/validate.yml)."""

import json
import subprocess
import sys

import jinja2
import yaml
from ansible.plugins.filter.core import FilterModule as CoreFilters

from ansible_collections.instinct.finetune.plugins.module_utils.jobspec import parse_env_file
from ansible_collections.instinct.finetune.plugins.module_utils.rccl_env import rccl_env_settings
from tests.unit.conftest import ROOT, role_step_playbook, run_local_play

ROLE = ROOT / "roles" / "fabric"
DEFAULTS = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
EIGHT_RAILS = [f"mlx5_{n}:1" for n in (0, 1, 2, 3, 4, 5, 8, 9)]
AMD = {
    "TORCH_NCCL_HIGH_PRIORITY",
    "GPU_MAX_HW_QUEUES",
    "HSA_NO_SCRATCH_RECLAIM",
    "RCCL_MSCCL_ENABLE",
    "NCCL_MIN_NCHANNELS",
    "HIP_FORCE_DEV_KERNARG",
}


def arch_settings(**overrides):
    """vars/main.yml's fabric_arch_settings with the defaults' values (as Ansible templates them)."""
    values = dict(DEFAULTS, **overrides)
    table = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())["fabric_arch_settings"]
    env = jinja2.Environment()  # noqa: S701 - settings, not HTML
    return [
        dict(entry, value=env.from_string(entry["value"]).render(values), archs=values["fabric_amd_settings_archs"])
        for entry in table
    ]


def rdma_settings(**overrides):
    """vars/main.yml's fabric_rdma_settings with the defaults' values."""
    values = dict(DEFAULTS, **overrides)
    table = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())["fabric_rdma_settings"]
    env = jinja2.Environment()  # noqa: S701 - settings, not HTML
    return [dict(entry, value=env.from_string(entry["value"]).render(values)) for entry in table]


def render(gfx_archs, hcas, gid_index="", extra=None, **overrides):
    node = {
        "ifname": "ens50f0",
        "reason": "matched cidr 10.10.0.0/16",
        "nccl_debug": DEFAULTS["fabric_nccl_debug"],
        "hcas": hcas,
        "gid_index": gid_index,
        "gfx_archs": gfx_archs,
        "arch_settings": arch_settings(**overrides),
        "rdma_settings": rdma_settings(**overrides),
        "dmabuf_by_driver": dict(DEFAULTS["fabric_nccl_dmabuf_enable"], **overrides.get("dmabuf", {})),
        "alloc_conf": DEFAULTS["fabric_hip_alloc_conf"],
        "master_addr": "10.10.0.11",
        "master_port": 29500,
        "extra": extra or {},
    }
    # An env file, not HTML: nothing to escape. Ansible's quote filter, which the template quotes values with.
    env = jinja2.Environment(trim_blocks=True, keep_trailing_newline=True)  # noqa: S701
    env.filters["quote"] = CoreFilters().filters()["quote"]
    template = env.from_string((ROLE / "templates" / "rccl.env.j2").read_text())
    text = template.render(
        fabric_env_settings=rccl_env_settings(node),
        inventory_hostname="node1",
        ansible_managed="managed",
        fabric_profile_path="/etc/profile.d/instinct-rccl.sh",
    )
    return text, parse_env_file(text)


def test_an_eight_rail_mi300x_node_gets_every_hca_and_amds_settings():
    text, env = render(["gfx942"], EIGHT_RAILS, gid_index=3)
    # "=": exact names, so that mlx5_1 does not take mlx5_10 to mlx5_19 as well.
    assert env["NCCL_IB_HCA"] == "=" + ",".join(EIGHT_RAILS)
    assert env["NCCL_IB_GID_INDEX"] == "3"
    assert "NCCL_IB_DISABLE" not in env
    assert {name: env[name] for name in AMD} == {
        "TORCH_NCCL_HIGH_PRIORITY": "1",
        "GPU_MAX_HW_QUEUES": "2",
        "HSA_NO_SCRATCH_RECLAIM": "1",
        "RCCL_MSCCL_ENABLE": "0",
        "NCCL_MIN_NCHANNELS": "112",
        "HIP_FORCE_DEV_KERNARG": "1",
    }
    # "=": this interface only (RCCL matches prefixes otherwise); Gloo takes the name itself.
    assert env["NCCL_SOCKET_IFNAME"] == "=ens50f0"
    assert env["GLOO_SOCKET_IFNAME"] == "ens50f0"
    # Rail-optimised: rings stay on their rail; ConnectX ports get DMA-BUF as cvs sets it.
    assert env["NCCL_CROSS_NIC"] == "0"
    assert env["NCCL_DMABUF_ENABLE"] == "1"
    # Every AMD setting says where it comes from, on the line above it.
    lines = text.splitlines()
    for name in AMD:
        above = lines[lines.index(f"{name}={env[name]}") - 1]
        assert above.startswith("# for gfx942: ") and len(above) > 30, above


def test_a_cpu_node_gets_none_of_them():
    _text, env = render([], [])
    assert not AMD & set(env)
    assert "NCCL_IB_HCA" not in env and "NCCL_IB_GID_INDEX" not in env
    # No RDMA port: nothing of the RDMA-only settings.
    assert "NCCL_CROSS_NIC" not in env and "NCCL_DMABUF_ENABLE" not in env
    # And RCCL is told so: without it, it would open any RDMA device it finds by itself.
    assert env["NCCL_IB_DISABLE"] == "1"
    assert env["GLOO_SOCKET_IFNAME"] == "ens50f0" and env["MASTER_ADDR"] == "10.10.0.11"


def test_another_arch_gets_none_and_an_empty_value_leaves_one_out():
    _text, env = render(["gfx90a"], ["mlx5_0:1"])
    assert not AMD & set(env)
    _text, env = render(["gfx942"], [], fabric_gpu_max_hw_queues="")
    assert "GPU_MAX_HW_QUEUES" not in env and "TORCH_NCCL_HIGH_PRIORITY" in env
    settings = [dict(s, value=None) if s["name"] == "RCCL_MSCCL_ENABLE" else s for s in arch_settings()]
    names = [s["name"] for s in rccl_env_settings(
        {"ifname": "e", "master_addr": "a", "master_port": 1, "gfx_archs": ["gfx942"], "arch_settings": settings}
    )]  # fmt: skip
    assert "RCCL_MSCCL_ENABLE" not in names and "GPU_MAX_HW_QUEUES" in names


def test_the_users_own_variables_win_with_one_line_per_name():
    text, env = render(["gfx942"], [], extra={"HSA_NO_SCRATCH_RECLAIM": "0", "NCCL_DEBUG": "INFO"})
    assert env["HSA_NO_SCRATCH_RECLAIM"] == "0" and env["NCCL_DEBUG"] == "INFO"
    names = [line.split("=", 1)[0] for line in text.splitlines() if line and not line.startswith("#")]
    assert len(names) == len(set(names))


def test_dma_buf_follows_the_ports_driver_as_cvs_sets_it():
    pollara = [f"ionic_{n}:1" for n in range(8)]
    thor2 = [f"bnxt_re{n}:1" for n in range(8)]
    assert render(["gfx942"], pollara)[1]["NCCL_DMABUF_ENABLE"] == "0"
    assert render(["gfx942"], thor2)[1]["NCCL_DMABUF_ENABLE"] == "1"
    # A driver without a value, or ports of drivers that disagree: RCCL's own default.
    assert "NCCL_DMABUF_ENABLE" not in render(["gfx942"], ["qedr0:1"])[1]
    assert "NCCL_DMABUF_ENABLE" not in render(["gfx942"], ["mlx5_0:1", "ionic_0:1"])[1]
    # An operator's value for a driver wins.
    assert render(["gfx942"], pollara, dmabuf={"ionic": "1"})[1]["NCCL_DMABUF_ENABLE"] == "1"


def test_no_login_shell_export_is_written_any_more():
    tasks = (ROLE / "tasks" / "environment.yml").read_text()
    assert not (ROLE / "templates" / "instinct-rccl.sh.j2").exists()
    assert "state: absent" in tasks.split("Remove the login-shell export", 1)[1].split("- name:", 1)[0]


def sourced(text, tmp_path):
    """The environment a POSIX shell has after ``set -a; . rccl.env; set +a``."""
    env_file = tmp_path / "rccl.env"
    env_file.write_text(text)
    script = 'set -a; . "$1"; set +a; exec "$2" -c "import json, os; print(json.dumps(dict(os.environ)))"'
    shell = subprocess.run(["/bin/sh", "-c", script, "sh", str(env_file), sys.executable],
                           capture_output=True, text=True, check=True, env={"PATH": "/usr/bin:/bin"})  # fmt: skip
    return json.loads(shell.stdout)


def test_a_shell_that_sources_the_file_sets_fabric_envs_values_and_runs_nothing(tmp_path):
    canary = tmp_path / "ran"
    hostile = {
        "NCCL_ALGO": f"Ring $(touch {canary})",
        "NCCL_TOPO_FILE": f"/etc/topo files/`touch {canary}`.xml",
        "UCX_NET_DEVICES": "it's; touch " + str(canary),
        "NCCL_P2P_LEVEL": 'a "b" \\c',
    }
    text, env = render(["gfx942"], EIGHT_RAILS, gid_index=3, extra=hostile)
    read = sourced(text, tmp_path)
    assert {name: read[name] for name in hostile} == hostile
    assert not canary.exists()
    # The collection's own reader of the file (diagnose, the rccl-tests gate) reads what the shell
    # reads (review of issue 32: it stripped one pair of quotes, so it's came back as it'"'"'s).
    assert {name: env[name] for name in hostile} == hostile
    # The settings of a node, quoted only where they need it, read the same.
    assert read["NCCL_IB_HCA"] == "=" + ",".join(EIGHT_RAILS) and read["MASTER_ADDR"] == "10.10.0.11"
    assert "NCCL_IB_HCA==mlx5_0:1," in text and "PYTORCH_HIP_ALLOC_CONF=max_split_size_mb:512" in text


VALIDATE = role_step_playbook("fabric", "validate.yml", "Check the fabric settings")


def validate(tmp_path, fabric_env):
    playbook = tmp_path / "validate.yml"
    playbook.write_text(VALIDATE)
    return run_local_play(playbook, {"fabric_env": fabric_env})


def test_fabric_env_names_that_are_not_variables_and_values_with_line_breaks_are_refused(tmp_path):
    proc = validate(tmp_path, {"NCCL_DEBUG_SUBSYS": "INIT,NET", "X;id": "1", "2FAST": "1",
                               "NCCL_ALGO": "Ring\nrm -rf /"})  # fmt: skip
    assert proc.returncode != 0
    assert (
        'node1: fabric_env has the names "X;id", "2FAST", which are not environment variable names (letters, '
        "digits and _, not first a digit); gives NCCL_ALGO a value with a line break or another control "
        "character. Fix or remove the entry. See docs/runbooks/fabric-iface.md"
    ) in " ".join(proc.stdout.split())
    # A name with a trailing line break is not a name either.
    assert validate(tmp_path, {"NCCL_ALGO\n": "Ring"}).returncode != 0


def test_fabric_env_of_plain_variables_passes_whatever_their_values(tmp_path):
    proc = validate(tmp_path, {"NCCL_ALGO": "Ring $(x) 'y'", "NCCL_MIN_NCHANNELS": 32, "_X": ""})
    assert proc.returncode == 0, proc.stdout[-3000:]
