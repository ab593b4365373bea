"""Which verbs stack a node has and whether the distribution's is installed (issue 29, "RDMA user
space"): read from real `dpkg -l` lines (tests/fixtures/dpkg/SOURCES.md: MLNX_OFED 23.10, Ubuntu's
rdma-core 39 with and without its tools). No listing with Broadcom's or AMD's user library was found;
those cases are decided on structured inputs, which is what the decision takes."""

import json

from ansible_collections.instinct.finetune.plugins.module_utils.rdma_userspace import (
    installed_packages,
    userspace_plan,
    vendor_stacks,
)
from tests.unit.conftest import FIXTURES, run_module

DPKG = FIXTURES / "dpkg"
CONNECTX = [{"device": "mlx5_0", "vendor": "0x15b3"}, {"device": "mlx5_1", "vendor": "0x15b3"}]
POLLARA = [{"device": f"ionic_{n}", "vendor": "0x1dd8"} for n in range(8)]
THOR = [{"device": f"bnxt_re{n}", "vendor": "0x14e4"} for n in range(8)]


def packages(name):
    return installed_packages((DPKG / name).read_text())


def test_mlnx_ofed_is_a_vendor_stack_and_the_distribution_stack_is_left_alone():
    found = packages("dpkg-l_mlnx-ofed-23.10_ubuntu22.04_daocloud-docs.txt")
    assert len(found) == 48 and found["libibverbs1"] == "2307mlnx47-1.2310119"  # ":amd64" dropped
    (stack,) = vendor_stacks(found, ofed_info="/usr/bin/ofed_info")
    assert (stack["vendor"], stack["name"]) == ("nvidia", "NVIDIA DOCA/MLNX_OFED")
    assert stack["evidence"][:2] == [
        "ofed_info at /usr/bin/ofed_info",
        "package ibverbs-providers 2307mlnx47-1.2310119 (a vendor build of rdma-core)",
    ]
    assert "package mlnx-ofed-kernel-utils 23.10.OFED.23.10.1.1.9.1-1" in stack["evidence"]
    # Without ofed_info on PATH the packages alone show it.
    assert vendor_stacks(found)[0]["vendor"] == "nvidia"
    plan = userspace_plan(found, [stack], CONNECTX)
    assert plan["install_distribution_stack"] is False and plan["missing"] == []
    assert plan["reason"].startswith("a vendor verbs stack is present (NVIDIA DOCA/MLNX_OFED: ofed_info at ")
    assert plan["reason"].endswith("it is left as it is")


def test_the_distribution_stack_without_its_tools_gets_them():
    found = packages("dpkg-l_ubuntu22.04-rdma-core-39_no-utils_baige-doc.txt")
    # Header lines and "dpkg-query: no packages found matching perftest" are not packages.
    assert found == {"ibverbs-providers": "39.0-1", "libibumad3": "39.0-1", "libibverbs1": "39.0-1",
                     "libnl-3-200": "3.5.0-0.1", "libnl-route-3-200": "3.5.0-0.1", "librdmacm1": "39.0-1"}  # fmt: skip
    assert vendor_stacks(found) == []
    assert userspace_plan(found, [], CONNECTX) == {
        "install_distribution_stack": True,
        "missing": ["rdma-core", "ibverbs-utils"],
        "reason": "no vendor verbs stack; the distribution's lacks rdma-core, ibverbs-utils",
        "notes": [],
    }


def test_the_whole_distribution_stack_needs_nothing():
    found = packages("dpkg-l_ubuntu22.04-rdma-core-39_grep_connectx5.txt")
    assert found == {"ibverbs-providers": "39.0-1", "ibverbs-utils": "39.0-1", "libibverbs-dev": "39.0-1",
                     "libibverbs1": "39.0-1", "rdma-core": "39.0-1"}  # fmt: skip
    plan = userspace_plan(found, vendor_stacks(found), CONNECTX)
    assert (plan["install_distribution_stack"], plan["missing"]) == (False, [])
    assert plan["reason"] == "the distribution's verbs stack is installed"


def test_a_node_without_rdma_devices_or_dpkg_installs_nothing():
    found = packages("dpkg-l_ubuntu22.04-rdma-core-39_no-utils_baige-doc.txt")
    plan = userspace_plan(found, [], [])
    assert plan["install_distribution_stack"] is False and plan["missing"] == ["rdma-core", "ibverbs-utils"]
    assert plan["reason"] == "the node has no RDMA device, so it needs no verbs stack"
    assert userspace_plan({}, [], CONNECTX, dpkg=False)["install_distribution_stack"] is False


def test_broadcoms_library_from_its_package_or_built_into_usr_local_is_a_vendor_stack():
    # Structured: Broadcom's apt package, and the files Primus's rebuild leaves in /usr/local/lib.
    (by_package,) = vendor_stacks({"bnxt-rocelib": "235.2.86.0-1", "libibverbs1": "39.0-1"})
    assert by_package == {"vendor": "broadcom", "name": "Broadcom bnxt_re (libbnxt_re)",
                          "evidence": ["package bnxt-rocelib 235.2.86.0-1"]}  # fmt: skip
    (by_file,) = vendor_stacks({}, vendor_files=["/usr/local/lib/libbnxt_re-rdmav34.so", "/usr/local/lib/libfoo.so"])
    assert by_file["evidence"] == ["/usr/local/lib/libbnxt_re-rdmav34.so (Broadcom's libbnxt_re)"]
    plan = userspace_plan({}, [by_file], THOR)
    assert plan["install_distribution_stack"] is False
    assert plan["missing"] == ["rdma-core", "ibverbs-providers", "libibverbs1", "ibverbs-utils"]
    assert plan["reason"].startswith("a vendor verbs stack is present (Broadcom bnxt_re (libbnxt_re): /usr/local/lib/")


def test_pollara_with_amds_library_is_left_alone_and_without_it_is_told_what_it_needs():
    (amd,) = vendor_stacks({"libionic1": "54.0-185", "ionic-common": "54.0-185"})
    assert amd["vendor"] == "amd" and amd["evidence"] == ["package ionic-common 54.0-185", "package libionic1 54.0-185"]
    assert userspace_plan({"libionic1": "54.0-185"}, [amd], POLLARA)["notes"] == []
    plan = userspace_plan({}, [], POLLARA)
    assert plan["install_distribution_stack"] is True
    (note,) = plan["notes"]
    assert note.startswith("AMD Pensando devices (ionic_0, ionic_1, ") and "AMD's libionic1" in note


def test_the_module_reads_the_node_and_changes_nothing(tmp_path):
    # A class folder with one Broadcom device and Broadcom's library in a vendor folder, both built here.
    (tmp_path / "ib" / "bnxt_re0" / "device").mkdir(parents=True)
    (tmp_path / "ib" / "bnxt_re0" / "device" / "vendor").write_text("0x14e4\n")
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "libbnxt_re-rdmav34.so").write_text("")
    args = {"class_dir": str(tmp_path / "ib"), "vendor_library_dirs": [str(tmp_path / "lib")]}
    rc, result = run_module("rdma_userspace", json.dumps(args), extra=["--check"])
    assert rc == 0, result
    assert result["changed"] is False and result["install_distribution_stack"] is False
    assert result["rdma_devices"] == [{"device": "bnxt_re0", "vendor": "0x14e4"}]
    assert [stack["vendor"] for stack in result["vendor_stacks"]][-1] == "broadcom"
