import gzip
import json

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.instinct.finetune.plugins.filter.build import FilterModule as BuildFilters
from ansible_collections.instinct.finetune.plugins.filter.pystack import FilterModule
from ansible_collections.instinct.finetune.plugins.module_utils.rocminfo import parse_rocminfo
from tests.unit.conftest import FIXTURES

FILTERS = FilterModule().filters()
python_source = FILTERS["python_source"]
pip_requirements = FILTERS["pip_requirements"]
wheel_build_plan = FILTERS["wheel_build_plan"]
torch_problems = FILTERS["torch_problems"]
pytorch_rocm_arch = BuildFilters().filters()["pytorch_rocm_arch"]

LF_REPORT = json.loads((FIXTURES / "pip" / "llamafactory-0.9.5-report.json").read_text())


@pytest.mark.parametrize(
    ("requested", "distribution", "version", "os_python", "resolved"),
    [
        ("auto", "Ubuntu", "22.04", "3.10", "deadsnakes"),  # jammy's python3.11 is an rc
        ("auto", "Ubuntu", "24.04", "3.12", "os"),
        ("auto", "Debian", "12", "3.11", "os"),
        ("auto", "Ubuntu", "22.04", "", "deadsnakes"),
        ("path", "Ubuntu", "22.04", "3.10", "path"),
        ("deadsnakes", "Ubuntu", "24.04", "3.12", "deadsnakes"),
        ("os", "Debian", "12", "3.11", "os"),
    ],
)
def test_python_source(requested, distribution, version, os_python, resolved):
    assert python_source(requested, distribution, version, os_python, "3.11") == resolved


@pytest.mark.parametrize(
    ("requested", "distribution", "version", "os_python", "message"),
    [
        ("os", "Ubuntu", "22.04", "3.10", "older than 3.11; use instinct_python_source: deadsnakes"),
        ("deadsnakes", "Debian", "12", "3.11", "Ubuntu only, not Debian"),
        ("auto", "Debian", "11", "3.9", "set instinct_python_source: path"),
        ("conda", "Ubuntu", "22.04", "3.10", "'conda' is not a Python source"),
    ],
)
def test_python_source_refuses_with_the_fix(requested, distribution, version, os_python, message):
    with pytest.raises(AnsibleFilterError, match="python_source") as err:
        python_source(requested, distribution, version, os_python, "3.11")
    assert message in str(err.value)


def test_pip_requirements_of_llamafactory_without_the_missing_companions():
    reqs = pip_requirements(LF_REPORT, [], ["torchvision", "torchaudio"])
    names = [r.split("<")[0].split(">")[0].split("=")[0].split("!")[0] for r in reqs]
    assert "torchvision" not in names and "torchaudio" not in names
    # torch stays: the installed build satisfies it, under the constraints file
    assert "torch>=2.4.0" in reqs
    assert "transformers!=4.52.0,!=4.57.0,<=5.6.0,>=4.55.0" in reqs
    assert "peft<=0.18.1,>=0.18.0" in reqs
    assert len(reqs) == len(LF_REPORT["install"][0]["metadata"]["requires_dist"]) - 2


def test_pip_requirements_keeps_everything_when_nothing_is_missing():
    reqs = pip_requirements(LF_REPORT)
    assert "torchvision>=0.19.0" in reqs and "torchaudio>=2.4.0" in reqs


def test_pip_requirements_evaluates_markers_for_the_target_and_the_extras():
    report = {
        "environment": dict(LF_REPORT["environment"], python_version="3.11", sys_platform="linux"),
        "install": [
            {
                "metadata": {
                    "name": "demo",
                    "version": "1.0",
                    "provides_extra": ["deepspeed", "metrics"],
                    "requires_dist": [
                        "numpy",
                        "tomli; python_version < '3.11'",
                        "pywin32; sys_platform == 'win32'",
                        "deepspeed<=0.16.9,>=0.10.0; extra == 'deepspeed'",
                        "nltk; extra == 'metrics'",
                        "uvicorn[standard]>=0.20",
                    ],
                }
            }
        ],
    }
    assert pip_requirements(report, ["deepspeed"]) == ["numpy", "deepspeed<=0.16.9,>=0.10.0", "uvicorn[standard]>=0.20"]


def test_pip_requirements_names_an_unknown_extra():
    with pytest.raises(AnsibleFilterError, match=r"has no extra.*metrics.*offers: none"):
        pip_requirements(LF_REPORT, ["metrics"])


def test_pip_requirements_needs_one_package():
    with pytest.raises(AnsibleFilterError, match="exactly one package"):
        pip_requirements({"install": []})


def _archs(fixture):
    return parse_rocminfo((FIXTURES / "rocminfo" / fixture).read_text())["rocm_gfx_archs"]


def test_wheel_build_plan_for_a_mixed_cluster_from_recorded_rocminfo():
    mi300x = pytorch_rocm_arch(_archs("mi300x-8gpu.txt"))
    mi100 = pytorch_rocm_arch(_archs("mi100-plus-igpu.txt"))
    hosts = ["a1", "b1", "a2", "b2"]
    plan = wheel_build_plan(hosts, {"a1": mi300x, "a2": mi300x, "b1": mi100, "b2": mi100})
    assert mi300x == "gfx942"
    assert plan["gfx942"] == {"builder": "a1", "hosts": ["a1", "a2"], "archs": "gfx942"}
    assert plan[mi100.replace(";", "-")]["builder"] == "b1"
    assert plan[mi100.replace(";", "-")]["hosts"] == ["b1", "b2"]
    assert len(plan) == 2


def test_wheel_build_plan_keys_are_path_safe_and_one_set_builds_once():
    plan = wheel_build_plan(["n1", "n2"], {"n1": "gfx90a;gfx942", "n2": "gfx90a;gfx942"})
    assert plan == {"gfx90a-gfx942": {"builder": "n1", "hosts": ["n1", "n2"], "archs": "gfx90a;gfx942"}}


def test_wheel_build_plan_needs_every_host():
    with pytest.raises(AnsibleFilterError, match="no arch set known for host n2"):
        wheel_build_plan(["n1", "n2"], {"n1": "gfx942"})


ROCM_PROBE = {
    "version": "2.10.0+rocm7.0",
    "hip": "7.0.51831",
    "cuda": None,
    "available": True,
    "device_count": 8,
    "arch_list": ["gfx900", "gfx906", "gfx908", "gfx90a", "gfx942", "gfx1030", "gfx1100"],
}


def test_torch_problems_none_for_a_matching_rocm_build():
    assert torch_problems(ROCM_PROBE, ["gfx942"], 8) == []


def test_torch_problems_for_a_build_without_the_nodes_arch():
    probe = dict(ROCM_PROBE, arch_list=["gfx90a"])
    assert torch_problems(probe, ["gfx942"], 8) == ["torch has no kernels for gfx942 (built for gfx90a)"]


def test_torch_problems_for_a_cuda_or_cpu_build_on_a_gpu_node():
    probe = {"version": "2.13.0+cpu", "hip": None, "cuda": None, "device_count": 0, "arch_list": []}
    problems = torch_problems(probe, ["gfx942"], 8)
    assert problems[0].startswith("torch 2.13.0+cpu is not a ROCm build")
    assert "torch sees 0 GPU(s), rocminfo reports 8" in problems
    assert "torch has no kernels for gfx942 (built for nothing)" in problems


def test_torch_problems_without_gpu():
    probe = {"version": "2.13.0+cpu", "hip": None, "device_count": 0, "arch_list": []}
    assert torch_problems(probe, [], 0, True) == []
    assert torch_problems(probe, [], 0, False) == ["the node has no GPU and allow_no_gpu is false"]


def test_torch_problems_accepts_feature_suffixes_in_the_arch_list():
    probe = dict(ROCM_PROBE, arch_list=["gfx942:sramecc+:xnack-"], device_count=1)
    assert torch_problems(probe, ["gfx942"], 1) == []


wheel_transfers = FILTERS["wheel_transfers"]


def _found(*files):
    """What ansible.builtin.find returns with get_checksum and checksum_algorithm sha256."""
    return [{"path": f"/opt/instinct/wheels/deepspeed/0.16.9/cpu/{name}", "checksum": sha} for name, sha in files]


def _record(*files):
    """A SHA256SUMS file as sha256sum writes it when the build ends."""
    return "".join(f"{sha}  {name}\n" for name, sha in files)


def test_wheel_transfers_fetch_only_what_a_peer_lacks_or_holds_with_another_checksum():
    builder = _found(("deepspeed-0.16.9-py3-none-any.whl", "aa" * 32), ("BUILD-INFO.json", "bb" * 32))
    record = _record(("deepspeed-0.16.9-py3-none-any.whl", "aa" * 32))
    peers = {
        "node2": [],  # a new node: fetches the wheel
        "node3": _found(("deepspeed-0.16.9-py3-none-any.whl", "aa" * 32)),  # has it: fetches nothing
        "node4": _found(("deepspeed-0.16.9-py3-none-any.whl", "cc" * 32)),  # a stale copy: fetches again
    }
    plan = wheel_transfers(builder, peers, "deepspeed-", record)
    assert plan["files"] == [{"name": "deepspeed-0.16.9-py3-none-any.whl", "sha256": "aa" * 32}]
    assert plan["fetch"] == {"node2": ["deepspeed-0.16.9-py3-none-any.whl"], "node3": [],
                             "node4": ["deepspeed-0.16.9-py3-none-any.whl"]}  # fmt: skip
    assert plan["transfers"] == 2


def test_wheel_transfers_on_a_converged_arch_set_serve_nothing():
    builder = _found(("torch-2.10.0-py3-none-any.whl", "aa" * 32))
    record = _record(("torch-2.10.0-py3-none-any.whl", "aa" * 32))
    assert wheel_transfers(builder, {"node2": builder}, "torch-", record)["transfers"] == 0
    alone = wheel_transfers(builder, {}, "torch-", record)  # an arch set of one node
    assert alone["fetch"] == {} and alone["transfers"] == 0


def test_wheel_transfers_share_only_what_was_recorded_when_the_wheels_were_made():
    """Issue 32: a wheel put into the builder's folder after the build is neither served nor
    installed (the record is the list), and a recorded wheel swapped since is refused by its sha256."""
    record = _record(("deepspeed-0.16.9-py3-none-any.whl", "aa" * 32))
    planted = _found(
        ("deepspeed-0.16.9-py3-none-any.whl", "aa" * 32), ("deepspeed-0.16.9+evil-py3-none-any.whl", "ee" * 32)
    )
    plan = wheel_transfers(planted, {"node2": []}, "deepspeed-", record)
    assert [f["name"] for f in plan["files"]] == ["deepspeed-0.16.9-py3-none-any.whl"]
    assert plan["fetch"] == {"node2": ["deepspeed-0.16.9-py3-none-any.whl"]}
    swapped = _found(("deepspeed-0.16.9-py3-none-any.whl", "ee" * 32))
    with pytest.raises(
        AnsibleFilterError, match=r"deepspeed-0\.16\.9-py3-none-any\.whl has sha256 e{64}, not the a{64} recorded"
    ):
        wheel_transfers(swapped, {"node2": []}, "deepspeed-", record)
    with pytest.raises(AnsibleFilterError, match=r"deepspeed-0\.16\.9-py3-none-any\.whl is recorded but missing"):
        wheel_transfers([], {"node2": []}, "deepspeed-", record)


def test_wheel_transfers_refuse_a_builder_without_a_record_or_a_listing_without_checksums():
    with pytest.raises(AnsibleFilterError, match="no sha256 was recorded"):
        wheel_transfers(_found(("torch-2.10.0-py3-none-any.whl", "aa" * 32)), {"node2": []}, "torch-")
    with pytest.raises(AnsibleFilterError, match=r"torch-2\.10\.0-py3-none-any\.whl has sha256 unknown"):
        wheel_transfers([{"path": "/w/torch-2.10.0-py3-none-any.whl"}], {"node2": []}, "torch-",
                        _record(("torch-2.10.0-py3-none-any.whl", "aa" * 32)))  # fmt: skip
    with pytest.raises(AnsibleFilterError, match="line 1 of the sha256 record"):
        wheel_transfers([], {}, "", "not-a-sum  ../../etc/passwd\n")


wheel_serve_plan = FILTERS["wheel_serve_plan"]


def test_wheel_serve_plan_gives_each_peer_that_fetches_its_own_list_and_secret():
    transfers = {"files": [], "fetch": {"node3": [], "node2": ["a.whl", "b.whl"], "node4": ["a.whl"]}, "transfers": 3}
    tokens = {"node2": "2" * 43, "node3": "3" * 43, "node4": "4" * 43}
    assert wheel_serve_plan(transfers, tokens) == {
        "node2": {"token": "2" * 43, "files": ["a.whl", "b.whl"]},
        "node4": {"token": "4" * 43, "files": ["a.whl"]},
    }
    # A converged arch set: nothing to serve, so no server starts.
    assert wheel_serve_plan({"fetch": {"node2": []}}, {}) == {}


def test_wheel_serve_plan_never_serves_a_peer_without_a_secret():
    with pytest.raises(AnsibleFilterError, match=r"at least 24 characters for node2, which fetches a\.whl$"):
        wheel_serve_plan({"fetch": {"node2": ["a.whl"]}}, {"node2": "short"})
    with pytest.raises(AnsibleFilterError, match="for node2"):
        wheel_serve_plan({"fetch": {"node2": ["a.whl"]}}, {})


pip_report_pins = FILTERS["pip_report_pins"]
DEPS_REPORT = json.loads(gzip.decompress((FIXTURES / "pip" / "llamafactory-0.9.5-deps-report.json.gz").read_bytes()))


def test_pip_report_pins_pin_every_distribution_the_dry_run_would_install():
    pins = pip_report_pins(DEPS_REPORT)
    assert len(pins) == len(DEPS_REPORT["install"]) == 97
    wanted = {(i["metadata"]["name"], i["metadata"]["version"]) for i in DEPS_REPORT["install"]}
    assert {tuple(pin.split("==")) for pin in pins} == wanted
    assert "transformers==" + next(v for n, v in wanted if n == "transformers") in pins
    # One order for every node that reads the same report: by pip's name, whatever the report's order.
    shuffled = dict(DEPS_REPORT, install=list(reversed(DEPS_REPORT["install"])))
    assert pip_report_pins(shuffled) == pins
    assert pins.index("PyYAML==" + dict(wanted)["PyYAML"]) > pins.index("pydub==" + dict(wanted)["pydub"])


def test_pip_report_pins_leave_out_what_is_excluded_by_pips_name_rules():
    pins = pip_report_pins(DEPS_REPORT, ["MARKUPSAFE", "pyyaml", "hf_transfer"])
    assert len(pins) == 94
    assert not any(pin.lower().startswith(("markupsafe==", "pyyaml==", "hf_transfer==")) for pin in pins)


def test_pip_report_pins_keep_a_direct_reference_as_its_url():
    entry = next(i for i in LF_REPORT["install"] if i["metadata"]["name"] == "llamafactory")
    git = dict(entry, is_direct=True, download_info={
        "url": "https://github.com/hiyouga/LLaMA-Factory.git",
        "vcs_info": {"vcs": "git", "commit_id": "0123456789abcdef0123456789abcdef01234567"},
    })  # fmt: skip
    assert pip_report_pins({"install": [git]}) == [
        "llamafactory @ git+https://github.com/hiyouga/LLaMA-Factory.git@0123456789abcdef0123456789abcdef01234567"
    ]
    archive = dict(entry, is_direct=True)
    assert pip_report_pins({"install": [archive]}) == [f"llamafactory @ {entry['download_info']['url']}"]


def test_pip_report_pins_refuse_an_entry_without_a_version():
    broken = {"install": [{"metadata": {"name": "peft"}, "download_info": {"url": "https://x/peft.whl"}}]}
    with pytest.raises(AnsibleFilterError, match="without a name or version"):
        pip_report_pins(broken)
