"""The GPU collector's systemd unit (roles/monitoring/templates/instinct-gpu-collector.service.j2),
rendered as the role renders it and read by systemd's own tools: ``systemd-analyze verify`` (every
directive known and well-formed: a misspelt one would be ignored with a warning, its protection gone)
and ``systemd-analyze security --offline`` (which protections systemd sees set). The collector runs as
root and reads folders the training account owns (issue 32, finding 4): it refuses links and foreign
files itself (node_tools/tests/unit/test_rank_files.py); the unit keeps what it could reach if that
ever failed to its own two folders, without home folders, the jobs' secrets or most capabilities."""

import json
import shlex
import shutil
import subprocess

import jinja2
import pytest

from tests.unit.conftest import ROOT

TEMPLATE = ROOT / "roles" / "monitoring" / "templates" / "instinct-gpu-collector.service.j2"
UNIT = "instinct-gpu-collector.service"
GLOB = "/var/lib/instinct-finetune/jobs/*/metrics/rank*.prom"
SYSTEMD_ANALYZE = shutil.which("systemd-analyze")
needs_systemd_analyze = pytest.mark.skipif(SYSTEMD_ANALYZE is None, reason="systemd-analyze is not installed here")


def render(tools_dir, **overrides):
    values = {
        "ansible_managed": "managed",
        "monitoring_collector_unit": "instinct-gpu-collector",
        "instinct_tools_dir": str(tools_dir),
        "monitoring_textfile_dir": "/var/lib/prometheus/node-exporter",
        "monitoring_collector_state_dir": "/var/lib/instinct-gpu-collector",
        "monitoring_expected_gpus": 8,
        "monitoring_amd_smi_path": "amd-smi",
        "monitoring_rocm_smi_path": "rocm-smi",
        "monitoring_gpu_tool_timeout": 20,
        "monitoring_finetune_metrics_glob": GLOB,
        "monitoring_gpu_exporter_active": "instinct",
        "instinct_user": "instinct",
        "instinct_jobs_conf_dir": "/etc/instinct-finetune/jobs",
        **overrides,
    }
    environment = jinja2.Environment(trim_blocks=True, keep_trailing_newline=True)  # noqa: S701 - a unit file
    return environment.from_string(TEMPLATE.read_text()).render(**values)


def directives(text):
    """{name: [values]} of the [Service] section, continuation lines joined as systemd joins them."""
    joined = text.replace("\\\n", " ")
    found = {}
    for line in joined.splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            name, value = line.split("=", 1)
            found.setdefault(name, []).append(value.strip())
    return found


@pytest.fixture
def unit(tmp_path):
    """The rendered unit in a folder of its own, with a stand-in for the collector it starts
    (systemd-analyze verify checks that ExecStart's program exists)."""
    tools = tmp_path / "tools"
    (tools / "bin").mkdir(parents=True)
    collector = tools / "bin" / "instinct-gpu-collector"
    collector.write_text("#!/bin/sh\n")
    collector.chmod(0o755)

    def write(**overrides):
        path = tmp_path / UNIT
        path.write_text(render(tools, **overrides))
        return path

    return write


def test_the_collector_is_told_the_training_account_and_the_ranks_files():
    argv = shlex.split(directives(render("/opt/instinct/tools"))["ExecStart"][0])
    assert argv[0] == "/opt/instinct/tools/bin/instinct-gpu-collector"
    options = dict(zip(argv[1::2], argv[2::2], strict=False))
    assert options["--training-user"] == "instinct"
    assert options["--finetune-glob"] == GLOB  # quoted: systemd does not expand the stars


def test_it_writes_only_its_two_folders_and_sees_no_home_nor_the_jobs_secrets():
    found = directives(render("/opt/instinct/tools"))
    assert found["ProtectSystem"] == ["strict"]
    assert found["ReadWritePaths"] == ["/var/lib/prometheus/node-exporter /var/lib/instinct-gpu-collector"]
    assert found["ProtectHome"] == ["yes"]
    assert "-/etc/instinct-finetune/jobs" in found["InaccessiblePaths"][0].split()
    # Ranks' files kept under a home folder stay readable there (not hidden), still not writable.
    under_home = directives(render("/opt/instinct/tools", monitoring_finetune_metrics_glob="/home/t/jobs/*/rank*.prom"))
    assert under_home["ProtectHome"] == ["read-only"]


@needs_systemd_analyze
def test_systemd_knows_every_directive_of_the_unit(unit):
    path = unit()
    done = subprocess.run(
        [SYSTEMD_ANALYZE, "verify", path.name], cwd=path.parent, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr


@needs_systemd_analyze
def test_systemd_sees_the_protections_set(unit):
    path = unit()
    done = subprocess.run(
        [SYSTEMD_ANALYZE, "security", "--offline=true", "--json=short", path.name],
        cwd=path.parent, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    seen = {check["json_field"]: check["set"] for check in json.loads(done.stdout)}
    for field in (
        "NoNewPrivileges", "ProtectSystem", "ProtectHome", "PrivateTmp", "ProtectKernelModules",
        "ProtectKernelLogs", "ProtectControlGroups", "RestrictSUIDSGID", "RestrictRealtime", "LockPersonality",
        "SystemCallArchitectures", "RestrictNamespaces_user", "RestrictNamespaces_mnt",
        "RestrictAddressFamilies_AF_INET_INET6", "RestrictAddressFamilies_AF_PACKET", "SystemCallFilter_mount",
        "SystemCallFilter_module", "CapabilityBoundingSet_CAP_SYS_MODULE", "CapabilityBoundingSet_CAP_SET_UID_GID_PCAP",
        "CapabilityBoundingSet_CAP_CHOWN_FSETID_SETFCAP", "CapabilityBoundingSet_CAP_NET_ADMIN",
    ):  # fmt: skip
        assert seen.get(field) is True, f"{field}: {seen.get(field)}"
