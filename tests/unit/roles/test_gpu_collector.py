"""The monitoring role's instinct-gpu-collector, run as the node's timer runs it, with amd-smi and
rocm-smi stood in for by scripts that print the real recordings (or fail)."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SMI = ROOT / "tests" / "fixtures" / "smi"
COLLECTOR = ROOT / "roles" / "monitoring" / "files" / "instinct-gpu-collector"
MODULE_UTILS = ROOT / "plugins" / "module_utils"
PACKAGE = ("ansible_collections", "instinct", "finetune", "plugins", "module_utils")


@pytest.fixture
def node(tmp_path):
    """The collector installed as the role installs it (script + lib/ansible_collections/...)."""
    home = tmp_path / "gpu-collector"
    lib = home / "lib"
    folder = lib
    for part in PACKAGE:
        folder = folder / part
        folder.mkdir(parents=True)
        (folder / "__init__.py").write_text("")
    for module in ("_probe.py", "rocm_smi.py", "gpu_metrics.py"):
        shutil.copy(MODULE_UTILS / module, folder / module)
    shutil.copy(COLLECTOR, home / "instinct-gpu-collector")
    for name in ("textfile", "state", "bin", "jobs/a/metrics"):
        (tmp_path / name).mkdir(parents=True)
    return tmp_path


def tool(node, name, script):
    path = node / "bin" / name
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)
    return path


def recorded_rocm_smi(node):
    """rocm-smi printing the 8x MI300X recordings for the two plain views, failing otherwise."""
    return tool(
        node,
        "rocm-smi",
        f"if [ $# -eq 0 ]; then cat {SMI / 'rocmsmi-concise-8gpu.txt'}; exit 0; fi\n"
        f'if [ "$*" = "-u --showmeminfo vram" ]; then cat {SMI / "rocmsmi-use-meminfo-vram-8gpu.txt"}; exit 0; fi\n'
        'echo "rocm-smi: unrecognized arguments" >&2; exit 2\n',
    )


def run(node, rocm_smi, amd_smi, *extra):
    done = subprocess.run(
        [
            sys.executable,
            str(node / "gpu-collector" / "instinct-gpu-collector"),
            "--textfile-dir",
            str(node / "textfile"),
            "--state-dir",
            str(node / "state"),
            "--expected-gpus",
            "8",
            "--amd-smi",
            str(amd_smi),
            "--rocm-smi",
            str(rocm_smi),
            "--timeout",
            "5",
            "--finetune-glob",
            str(node / "jobs" / "*" / "metrics" / "rank*.prom"),
            *extra,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stderr, (node / "textfile" / "instinct_gpu.prom").read_text()


def value(text, line_start):
    (match,) = re.findall(rf"^{re.escape(line_start)} (\S+)$", text, re.M)
    return float(match)


def test_a_failing_amd_smi_falls_back_to_rocm_smi_then_to_the_last_good_sample(node):
    amd_smi = tool(node, "amd-smi", 'echo "AMDSMI_STATUS_NOT_INIT: driver not initialized" >&2; exit 1\n')
    rocm_smi = recorded_rocm_smi(node)

    log, text = run(node, rocm_smi, amd_smi)
    assert value(text, "instinct_gpu_collector_up") == 1
    assert value(text, "instinct_gpu_collector_stale") == 0
    assert value(text, "instinct_gpu_count") == 8
    assert value(text, 'instinct_gpu_temperature_celsius{gpu="6",sensor="junction"}') == 45
    assert 'instinct_gpu_collector_source_info{tool="rocm-smi"} 1' in text
    # Why amd-smi was passed over is logged once...
    assert "AMDSMI_STATUS_NOT_INIT" in log
    log, text = run(node, rocm_smi, amd_smi)
    assert log == ""  # ...not on every tick.

    good_at = value(text, "instinct_gpu_collector_last_success_timestamp_seconds")
    broken = tool(
        node, "rocm-smi-broken", 'echo "ERROR:root:Driver not initialized (amdgpu not found in modules)" >&2; exit 1\n'
    )
    log, text = run(node, broken, amd_smi)
    assert value(text, "instinct_gpu_collector_up") == 0
    assert value(text, "instinct_gpu_collector_stale") == 1
    assert value(text, "instinct_gpu_collector_last_success_timestamp_seconds") == good_at
    assert value(text, 'instinct_gpu_power_watts{gpu="4"}') == 160
    assert "no tool could read the GPUs (keeping the last good sample, marked stale)" in log
    assert "amdgpu not found in modules" in log

    log, text = run(node, rocm_smi, amd_smi)
    assert value(text, "instinct_gpu_collector_stale") == 0
    assert value(text, "instinct_gpu_collector_last_success_timestamp_seconds") > good_at


def test_without_any_tool_and_no_past_sample_only_the_collector_state_is_written(node):
    log, text = run(node, node / "bin" / "no-rocm-smi", node / "bin" / "no-amd-smi")
    assert "no good sample yet" in log and "is not installed" in log
    assert value(text, "instinct_gpu_collector_up") == 0
    assert value(text, "instinct_gpu_expected_count") == 8
    assert "instinct_gpu_temperature_celsius" not in text


def test_the_ranks_progress_files_are_merged_and_removed_with_them(node):
    rocm_smi = recorded_rocm_smi(node)
    metrics = node / "jobs" / "a" / "metrics"
    for rank in (0, 1):
        (metrics / f"rank{rank}.prom").write_text(
            "# HELP instinct_finetune_step Optimizer steps done (global step).\n"
            "# TYPE instinct_finetune_step gauge\n"
            f'instinct_finetune_step{{finetune_job="a",rank="{rank}",local_rank="0",node_rank="{rank}"}} 9\n'
        )
    run(node, rocm_smi, node / "bin" / "no-amd-smi")
    merged = (node / "textfile" / "instinct_finetune.prom").read_text()
    assert merged.count("# TYPE instinct_finetune_step gauge") == 1
    assert merged.count("instinct_finetune_step{") == 2
    for path in metrics.iterdir():
        path.unlink()
    run(node, rocm_smi, node / "bin" / "no-amd-smi")
    assert not (node / "textfile" / "instinct_finetune.prom").exists()


def test_with_amds_exporter_serving_the_gpus_only_the_expected_count_is_written(node):
    rocm_smi = recorded_rocm_smi(node)
    run(node, rocm_smi, node / "bin" / "no-amd-smi")
    log, text = run(node, rocm_smi, node / "bin" / "no-amd-smi", "--skip-gpus")
    assert log == ""
    assert [line for line in text.splitlines() if not line.startswith("#")] == ["instinct_gpu_expected_count 8"]
