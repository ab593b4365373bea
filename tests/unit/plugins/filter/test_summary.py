from ansible_collections.instinct.finetune.plugins.filter.summary import node_summary

HOSTVARS = {
    "mi300x-01": {
        "ansible_facts": {"distribution": "Ubuntu", "distribution_version": "22.04"},
        # The stability role's verdict of the job's window (issue 34).
        "stability_verdict": "pass",
        "rocm_release_info": {"version": "7.0.2"},
        "rocm_gfx_archs": ["gfx942"],
        "rocm_gpu_count": 8,
        "preflight_pci_gpu_count": 8,
        # Tuned by preflight_apply_tuning and rebooted into the new kernel command line.
        "preflight_tuning": {
            "cmdline_missing": [],
            "numa_balancing": "0",
            "c2": "off",
            "applied": True,
            "reboot_allowed": True,
        },
        "pytorch_probe": {"version": "2.10.0+rocm7.0"},
        "deepspeed_report": {"deepspeed_version": "0.16.9", "installed_ops": ["cpu_adam", "fused_adam"]},
        "llama_factory_installed_version": "0.9.5",
        "llama_factory_left_out": [],
        "fabric_ifname": "ens50f0",
        "fabric_address": "10.10.0.11",
        "monitoring_gpu_exporter_active": "instinct",
        "monitoring_gpu_state": {"up": True, "stale": False, "source": "amd-smi", "gpus": 8, "expected": 8},
        "finetune_result": {"job": "llama3-lora", "state": "succeeded", "steps": 120, "total_steps": 120},
        "finetune_context": {"job": {"strategy": "deepspeed_zero3", "finetuning_type": "lora"}},
        "evaluate_result": {"perplexity": 5.43219, "base_perplexity": 9.1, "improvement": 0.403056},
    },
    # A CPU node whose torch source had no torchvision/torchaudio.
    "cpu-01": {
        "ansible_facts": {"distribution": "Ubuntu", "distribution_version": "22.04"},
        # No GPU on the PCI bus: the MI300X host tuning is not asked of it.
        "preflight_pci_gpu_count": 0,
        "preflight_tuning": {
            "cmdline_missing": ["iommu=pt"],
            "numa_balancing": "1",
            "c2": "on",
            "applied": False,
            "reboot_allowed": False,
        },
        "pytorch_probe": {"version": "2.13.0+cpu"},
        "deepspeed_report": {"deepspeed_version": "0.16.9", "installed_ops": ["cpu_adam"]},
        "llama_factory_installed_version": "0.9.5",
        "llama_factory_left_out": ["torchvision", "torchaudio"],
        # No tool could read the GPUs: the collector serves its last good sample.
        "monitoring_gpu_exporter_active": "instinct",
        "monitoring_gpu_state": {"up": False, "stale": True, "source": "rocm-smi", "gpus": 8, "expected": 8},
    },
    # A node where the play stopped after preflight, which found none of the MI300X host tuning.
    "mi300x-02": {
        "ansible_facts": {"distribution": "Ubuntu", "distribution_version": "22.04"},
        "preflight_pci_gpu_count": "8",
        "preflight_tuning": {
            "cmdline_missing": ["iommu=pt", "pci=realloc=off"],
            "numa_balancing": "1",
            "c2": "on",
            "applied": False,
            "reboot_allowed": False,
        },
    },
}


def test_one_aligned_row_per_node_with_dashes_for_stages_that_did_not_run():
    lines = node_summary(HOSTVARS, ["mi300x-01", "mi300x-02", "cpu-01"])
    assert [cell.strip() for cell in lines[0].split(" | ")] == [
        "node", "OS", "ROCm", "gfx", "GPUs", "PCI GPUs", "host tuning", "torch", "DeepSpeed", "LLaMA-Factory",
        "fabric NIC", "GPU metrics", "job", "strategy", "perplexity", "base ppl", "vs base", "stability",
    ]  # fmt: skip
    assert set(lines[1]) <= {"-", "+"}
    assert [cell.strip() for cell in lines[2].split("|")] == [
        "mi300x-01", "Ubuntu 22.04", "7.0.2", "gfx942", "8", "8", "ok", "2.10.0+rocm7.0", "0.16.9 (2 ops)", "0.9.5",
        "ens50f0 10.10.0.11", "amd-smi 8/8", "llama3-lora succeeded 120/120", "deepspeed_zero3 lora", "5.432",
        "9.100", "+40.3%", "pass",
    ]  # fmt: skip
    assert [cell.strip() for cell in lines[3].split("|")] == (
        ["mi300x-02", "Ubuntu 22.04", "-", "-", "-", "8", "4 missing"] + ["-"] * 11
    )
    assert [cell.strip() for cell in lines[4].split("|")][5:] == [
        "0", "-",
        "2.13.0+cpu", "0.16.9 (1 ops)", "0.9.5 (no torchvision/torchaudio)", "-", "stale", "-", "-", "-", "-", "-",
        "-",
    ]  # fmt: skip
    bars = [i for i, c in enumerate(lines[0]) if c == "|"]
    assert bars == [i for i, c in enumerate(lines[1]) if c == "+"]
    assert all([i for i, c in enumerate(line) if c == "|"] == bars for line in lines[2:])
