from ansible_collections.instinct.finetune.plugins.filter.summary import node_summary

HOSTVARS = {
    "mi300x-01": {
        "ansible_facts": {"distribution": "Ubuntu", "distribution_version": "22.04"},
        "rocm_release_info": {"version": "7.0.2"},
        "rocm_gfx_archs": ["gfx942"],
        "rocm_gpu_count": 8,
        "preflight_pci_gpu_count": 8,
    },
    # A node where the play stopped after preflight.
    "mi300x-02": {"ansible_facts": {"distribution": "Ubuntu", "distribution_version": "22.04"}},
}


def test_one_aligned_row_per_node_with_dashes_for_stages_that_did_not_run():
    lines = node_summary(HOSTVARS, ["mi300x-01", "mi300x-02"])
    assert lines[0].split(" | ") == ["node     ", "OS          ", "ROCm ", "gfx   ", "GPUs", "PCI GPUs"]
    assert set(lines[1]) <= {"-", "+"}
    assert [cell.strip() for cell in lines[2].split("|")] == [
        "mi300x-01", "Ubuntu 22.04", "7.0.2", "gfx942", "8", "8",
    ]  # fmt: skip
    assert [cell.strip() for cell in lines[3].split("|")] == ["mi300x-02", "Ubuntu 22.04", "-", "-", "-", "-"]
    assert len({len(line.rstrip()) for line in lines[:2]}) == 1
