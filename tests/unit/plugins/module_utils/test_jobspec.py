"""A fine-tune job as LLaMA-Factory and DeepSpeed files (module_utils/jobspec.py), through the
finetune filters as the role calls them.

The default job is the finetune role's own: roles/finetune/defaults/main.yml, prefix stripped, put
together the way roles/finetune/vars/main.yml builds ``finetune_job``. The sandbox recordings are
from a real run (tests/fixtures/finetune/SOURCES.md).
"""

import copy
import json
import math
import re

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.instinct.finetune.plugins.filter.evaluate import FilterModule as EvaluateFilters
from ansible_collections.instinct.finetune.plugins.filter.finetune import FilterModule
from ansible_collections.instinct.finetune.plugins.module_utils import jobspec, jobstate
from tests.unit.conftest import ROOT

ROLE = ROOT / "roles" / "finetune"
DEFAULTS = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text(encoding="utf-8"))
ROLE_VARS = yaml.safe_load((ROLE / "vars" / "main.yml").read_text(encoding="utf-8"))
TEMPLATE = re.compile(r"^\{\{ finetune_(\w+) \}\}$")
RUNBOOK = "docs/runbooks/finetune-job.md"

FILTERS = FilterModule().filters()
job_files = FILTERS["finetune_job_files"]
eval_args = FILTERS["finetune_eval_args"]
dataset_info = FILTERS["finetune_dataset_info"]
job_problems = FILTERS["finetune_job_problems"]
perplexity = FILTERS["perplexity"]
env_file = FILTERS["env_file"]

# The settings of the field report that the ZeRO-3 file must carry, with the role's default batch
# sizes (2 per GPU, 4 accumulation steps).
FIELD_REPORT_ZERO3 = {
    "bf16": {"enabled": True},
    "zero_optimization": {
        "stage": 3,
        "offload_optimizer": {"device": "cpu", "pin_memory": True},
        "overlap_comm": True,
        "contiguous_gradients": True,
    },
    "train_micro_batch_size_per_gpu": 2,
    "gradient_accumulation_steps": 4,
}

JOB_DIR = "/var/lib/instinct-finetune/jobs/tiny-sft"
CONF_DIR = "/etc/instinct-finetune/jobs/tiny-sft"
MODEL = "/var/lib/instinct-finetune/models/tiny-llama"


def role_job(**settings):
    """``finetune_job`` as the role passes it: each entry of vars/main.yml's ``finetune_job`` is
    ``{{ finetune_<name> }}``, filled from the role defaults (``settings`` play the job file)."""
    values = {name.removeprefix("finetune_"): value for name, value in DEFAULTS.items()}
    values.update(job_name="tiny-sft", dataset_name="tiny_instruct", model_on_node=MODEL)
    unknown = set(settings) - set(ROLE_VARS["finetune_job"])
    assert not unknown, f"not a setting the role passes: {unknown}"
    job = {}
    for key, template in ROLE_VARS["finetune_job"].items():
        source = TEMPLATE.match(template).group(1)
        job[key] = copy.deepcopy(settings.get(key, values[source]))
    return job


def node(device="rocm", **overrides):
    """What the role tells the filters of one node (stage.yml and the evaluate role)."""
    values = {
        "device": device,
        "model": MODEL,
        "dataset_dir": f"{JOB_DIR}/data",
        "output_dir": f"{JOB_DIR}/output",
        "eval_dir": f"{JOB_DIR}/eval",
        "strategy_file": f"{CONF_DIR}/ds_config.json",
        "shared_output": False,
    }
    values.update(overrides)
    return values


def test_the_role_passes_each_default_under_its_own_name():
    # The fixture above is only the role's job if vars/main.yml maps name to finetune_<name>.
    for key, template in ROLE_VARS["finetune_job"].items():
        match = TEMPLATE.match(template)
        assert match, f"finetune_job.{key} is {template!r}"
        if key == "model":
            assert match.group(1) == "model_on_node"
        else:
            assert match.group(1) == key
            assert f"finetune_{key}" in DEFAULTS, f"finetune_{key} has no default"


# --- DeepSpeed ZeRO-3 ------------------------------------------------------------------------


# What the role adds to the field report (issue 16): clipping as the Trainer's max_grad_norm (DeepSpeed's
# own default is none, and under DeepSpeed the Trainer does not clip), and the gathered 16-bit weights
# on save that LLaMA-Factory's ZeRO-3 examples set (without them full fine-tuning saves no weights).
# And what it leaves out by default (issue 30): the optimizer offload, which LLaMA-Factory's ZeRO-3
# example (ds_z3_config.json, for LoRA and full alike) leaves out too and the field report turns on
# "only if memory is still tight"; finetune_deepspeed_offload_optimizer: true gives the report's.
ROLE_ZERO3 = copy.deepcopy(FIELD_REPORT_ZERO3)
del ROLE_ZERO3["zero_optimization"]["offload_optimizer"]
ROLE_ZERO3["gradient_clipping"] = 1.0
ROLE_ZERO3["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] = True


def test_default_job_renders_the_field_report_zero3_settings_plus_clipping_and_gathered_weights():
    job = role_job()
    rendered = jobspec.deepspeed_zero3_config(job, jobspec.use_bf16(job, "rocm"))
    assert rendered == ROLE_ZERO3
    # The field report's own settings are all there, unchanged.
    assert {k: v for k, v in rendered.items() if k in FIELD_REPORT_ZERO3 and k != "zero_optimization"} == {
        k: v for k, v in FIELD_REPORT_ZERO3.items() if k != "zero_optimization"
    }
    for key, value in FIELD_REPORT_ZERO3["zero_optimization"].items():
        if key != "offload_optimizer":
            assert rendered["zero_optimization"][key] == value
    assert "offload_optimizer" not in rendered["zero_optimization"]
    offloaded = jobspec.deepspeed_zero3_config(role_job(deepspeed_offload_optimizer=True), True)
    assert (
        offloaded["zero_optimization"]["offload_optimizer"]
        == FIELD_REPORT_ZERO3["zero_optimization"]["offload_optimizer"]
    )
    files = job_files(job, node("rocm"))
    assert files["deepspeed"] == ROLE_ZERO3
    assert files["train"]["max_grad_norm"] == files["deepspeed"]["gradient_clipping"] == 1.0
    assert files["train"]["deepspeed"] == f"{CONF_DIR}/ds_config.json"
    assert files["train"]["bf16"] is True
    assert "fsdp" not in files["train"]
    # The Trainer refuses a DeepSpeed file whose batch sizes differ from its own arguments.
    assert files["train"]["per_device_train_batch_size"] == files["deepspeed"]["train_micro_batch_size_per_gpu"]
    assert files["train"]["gradient_accumulation_steps"] == files["deepspeed"]["gradient_accumulation_steps"]


def test_bf16_auto_is_off_on_a_cpu_node_in_both_files():
    files = job_files(role_job(), node("cpu"))
    assert files["train"]["bf16"] is False
    assert files["deepspeed"]["bf16"] == {"enabled": False}
    assert files["deepspeed"]["zero_optimization"] == ROLE_ZERO3["zero_optimization"]


@pytest.mark.parametrize(("setting", "device", "enabled"), [(False, "rocm", False), ("true", "cpu", True)])
def test_bf16_given_explicitly_wins_over_the_device(setting, device, enabled):
    files = job_files(role_job(bf16=setting), node(device))
    assert files["train"]["bf16"] is enabled
    assert files["deepspeed"]["bf16"] == {"enabled": enabled}


def test_the_batch_sizes_of_the_job_reach_the_deepspeed_file():
    files = job_files(role_job(per_device_train_batch_size=8, gradient_accumulation_steps=16), node())
    assert files["deepspeed"]["train_micro_batch_size_per_gpu"] == 8
    assert files["deepspeed"]["gradient_accumulation_steps"] == 16
    assert files["train"]["per_device_train_batch_size"] == 8
    assert files["train"]["gradient_accumulation_steps"] == 16


def test_optimizer_offload_is_off_by_default_and_both_offloads_can_be_switched_on():
    zero = job_files(role_job(), node())["deepspeed"]["zero_optimization"]
    assert zero == {
        "stage": 3,
        "overlap_comm": True,
        "contiguous_gradients": True,
        "stage3_gather_16bit_weights_on_model_save": True,
    }
    zero = job_files(role_job(deepspeed_offload_param=True), node())["deepspeed"]["zero_optimization"]
    assert zero["offload_param"] == {"device": "cpu", "pin_memory": True}
    assert "offload_optimizer" not in zero
    zero = job_files(role_job(deepspeed_offload_optimizer=True), node())["deepspeed"]["zero_optimization"]
    assert zero["offload_optimizer"] == {"device": "cpu", "pin_memory": True}


def test_deepspeed_extra_merges_deeply():
    extra = {
        "zero_optimization": {"offload_optimizer": {"pin_memory": False}, "stage3_max_live_parameters": 1000000000},
        "steps_per_print": 50,
    }
    job = role_job(deepspeed_offload_optimizer=True, deepspeed_extra=extra)
    config = job_files(job, node())["deepspeed"]
    assert config == {
        "bf16": {"enabled": True},
        "zero_optimization": {
            "stage": 3,
            "offload_optimizer": {"device": "cpu", "pin_memory": False},
            "overlap_comm": True,
            "contiguous_gradients": True,
            "stage3_gather_16bit_weights_on_model_save": True,
            "stage3_max_live_parameters": 1000000000,
        },
        "train_micro_batch_size_per_gpu": 2,
        "gradient_accumulation_steps": 4,
        "gradient_clipping": 1.0,
        "steps_per_print": 50,
    }
    assert job["deepspeed_extra"] == extra  # the job's own settings are left as they were


# --- FSDP, DDP, devices ------------------------------------------------------------------------


def test_fsdp_renders_full_shard_auto_wrap_and_no_deepspeed():
    files = job_files(role_job(strategy="fsdp"), node())
    assert files["train"]["fsdp"] == "full_shard auto_wrap"
    assert "deepspeed" not in files["train"]
    assert files["deepspeed"] is None
    # LLaMA-Factory's FSDP settings (examples/accelerate/fsdp_config.yaml) in transformers' names.
    assert files["train"]["fsdp_config"] == {
        "backward_prefetch": "backward_pre",
        "forward_prefetch": False,
        "cpu_ram_efficient_loading": True,
        "sync_module_states": True,
        "use_orig_params": True,
    }
    config = {"transformer_layer_cls_to_wrap": ["LlamaDecoderLayer"], "backward_prefetch": "backward_post"}
    rendered = job_files(role_job(strategy="fsdp", fsdp_config=config), node())["train"]["fsdp_config"]
    assert rendered["transformer_layer_cls_to_wrap"] == ["LlamaDecoderLayer"]
    assert rendered["backward_prefetch"] == "backward_post"
    assert rendered["cpu_ram_efficient_loading"] is True


def test_ddp_renders_neither_deepspeed_nor_fsdp():
    files = job_files(role_job(strategy="ddp"), node())
    assert files["deepspeed"] is None
    assert not {"deepspeed", "fsdp", "fsdp_config"} & set(files["train"])


@pytest.mark.parametrize("strategy", ["deepspeed_zero3", "fsdp", "ddp"])
def test_a_cpu_node_uses_gloo_and_a_rocm_node_the_default_backend(strategy):
    assert job_files(role_job(strategy=strategy), node("cpu"))["train"]["ddp_backend"] == "gloo"
    assert "ddp_backend" not in job_files(role_job(strategy=strategy), node("rocm"))["train"]


# --- The training YAML -------------------------------------------------------------------------


def test_default_training_settings():
    train = job_files(role_job(), node())["train"]
    assert train["disable_gradient_checkpointing"] is False  # checkpointing on
    assert train["plot_loss"] is True
    assert train["save_on_each_node"] is True  # no shared file system: every node keeps a whole checkpoint
    assert train["save_only_model"] is False  # resuming needs the optimizer state
    assert train["report_to"] == "none"
    assert train["model_name_or_path"] == MODEL
    assert train["output_dir"] == f"{JOB_DIR}/output"
    assert train["dataset"] == "tiny_instruct"
    assert train["dataset_dir"] == f"{JOB_DIR}/data"
    assert train["learning_rate"] == 1.0e-4
    assert train["num_train_epochs"] == 3.0
    assert "max_steps" not in train  # 0: train by epochs
    assert train["val_size"] == 0.1
    assert train["eval_strategy"] == "steps"
    assert train["eval_steps"] == 50
    assert train["per_device_eval_batch_size"] == 1


def test_gradient_checkpointing_can_be_switched_off():
    assert job_files(role_job(gradient_checkpointing=False), node())["train"]["disable_gradient_checkpointing"] is True


def test_no_validation_split_means_no_evaluation_settings():
    train = job_files(role_job(val_size=0), node())["train"]
    assert not {"val_size", "eval_strategy", "eval_steps", "per_device_eval_batch_size"} & set(train)


def test_a_shared_output_folder_is_saved_by_rank_0_only():
    assert job_files(role_job(), node(shared_output=True))["train"]["save_on_each_node"] is False


def test_lora_settings_only_for_lora():
    train = job_files(role_job(), node())["train"]
    assert (train["finetuning_type"], train["lora_rank"], train["lora_alpha"], train["lora_target"]) == (
        "lora",
        8,
        16,
        "all",
    )
    for finetuning_type in ("full", "freeze"):
        train = job_files(role_job(finetuning_type=finetuning_type), node())["train"]
        assert train["finetuning_type"] == finetuning_type
        assert not [key for key in train if key.startswith("lora_")]


def test_max_steps_and_extra_args():
    train = job_files(role_job(max_steps=40, extra_args={"dataloader_num_workers": 0, "seed": 7}), node())["train"]
    assert train["max_steps"] == 40
    assert train["dataloader_num_workers"] == 0
    assert train["seed"] == 7  # extra_args are merged last


@pytest.mark.parametrize(("text", "value"), [("false", False), ("no", False), ("true", True), ("yes", True)])
def test_switches_given_as_text_mean_what_they_say(text, value):
    # `ansible-playbook -e finetune_plot_loss=false` hands the role the string "false": the role's
    # argument spec accepts it as a bool but does not convert it, so it reaches the filters as text.
    as_text = job_files(
        role_job(
            gradient_checkpointing=text, plot_loss=text, deepspeed_offload_optimizer=text, deepspeed_offload_param=text
        ),
        node(shared_output=text),
    )
    assert as_text["train"]["disable_gradient_checkpointing"] is (not value)
    assert as_text["train"]["plot_loss"] is value
    assert as_text["train"]["save_on_each_node"] is (not value)
    assert ("offload_optimizer" in as_text["deepspeed"]["zero_optimization"]) is value
    assert ("offload_param" in as_text["deepspeed"]["zero_optimization"]) is value
    as_bool = job_files(
        role_job(
            gradient_checkpointing=value,
            plot_loss=value,
            deepspeed_offload_optimizer=value,
            deepspeed_offload_param=value,
        ),
        node(shared_output=value),
    )
    assert as_text == as_bool
    job = dict(role_job(), trust_remote_code=text)
    assert job_files(job, node())["train"]["trust_remote_code"] is value


# The train.yaml that the role rendered for node1 in the recorded sandbox run, in the file's order.
SANDBOX_TRAIN_YAML = {
    "model_name_or_path": "/var/lib/instinct-finetune/models/model",
    "trust_remote_code": False,
    "stage": "sft",
    "do_train": True,
    "finetuning_type": "full",
    "dataset": "tiny_instruct",
    "dataset_dir": "/var/lib/instinct-finetune/jobs/sandbox-tiny/data",
    "template": "default",
    "cutoff_len": 128,
    "preprocessing_num_workers": 1,
    "output_dir": "/var/lib/instinct-finetune/jobs/sandbox-tiny/output",
    "logging_steps": 2,
    "save_steps": 10,
    "save_total_limit": 3,
    "save_only_model": False,
    "save_on_each_node": True,
    "plot_loss": True,
    "report_to": "none",
    # Added after that run (the progress export's tokens/s); left out of the fingerprint.
    "include_num_input_tokens_seen": "non_padding",
    "per_device_train_batch_size": 4,
    "gradient_accumulation_steps": 1,
    "learning_rate": 0.002,
    "num_train_epochs": 3.0,
    "lr_scheduler_type": "cosine",
    # warmup_ratio in that run; transformers 5 deprecates it for warmup_steps (a fraction below 1
    # means the same), and the fingerprint below reads it under its old name.
    "warmup_steps": 0.05,
    # Added after that run (issue 16): the clipping it already had as the Trainer's default, now
    # written out because ZeRO-3 needs the same number in ds_config.json.
    "max_grad_norm": 1.0,
    "bf16": False,
    "disable_gradient_checkpointing": False,
    # 180000000 (LLaMA-Factory's examples) in that run; finite since issue 17 (an hour) so that a
    # hung peer raises. Left out of the fingerprint: it changes when a rank gives up, not what trains.
    "ddp_timeout": 3600,
    "seed": 42,
    "max_steps": 40,
    "val_size": 0.1,
    "per_device_eval_batch_size": 1,
    "eval_strategy": "steps",
    "eval_steps": 20,
    "ddp_backend": "gloo",
    "dataloader_num_workers": 0,
}
# The fingerprint that run's eval.json recorded for the job: max_grad_norm at the Trainer's default,
# now written out, trains as before and leaves it unchanged (a finished job stays finished).
SANDBOX_FINGERPRINT = "14cec2609bbd0aa6"


def sandbox_job():
    settings = yaml.safe_load((ROOT / "jobs" / "sandbox-tiny.yml").read_text(encoding="utf-8"))
    settings = {name.removeprefix("finetune_"): value for name, value in settings.items()}
    job = role_job(**{name: value for name, value in settings.items() if name in ROLE_VARS["finetune_job"]})
    job["model"] = "/var/lib/instinct-finetune/models/model"  # finetune_model_on_node of its model_src
    return job


def recorded_ddp_job():
    """The sandbox job as it was when the recorded run (tests/fixtures/finetune) trained: plain DDP,
    full fine-tuning at 2e-3. Since issue 16 the sandbox trains the default way (ZeRO-3, LoRA)."""
    return {**sandbox_job(), "strategy": "ddp", "finetuning_type": "full", "learning_rate": 2.0e-3}


def sandbox_node():
    return {
        "device": "cpu",
        "model": "/var/lib/instinct-finetune/models/model",
        "dataset_dir": "/var/lib/instinct-finetune/jobs/sandbox-tiny/data",
        "output_dir": "/var/lib/instinct-finetune/jobs/sandbox-tiny/output",
        "eval_dir": "/var/lib/instinct-finetune/jobs/sandbox-tiny/eval",
        "strategy_file": "/etc/instinct-finetune/jobs/sandbox-tiny/ds_config.json",
        "shared_output": False,
    }


def test_the_sandbox_job_renders_the_train_yaml_and_fingerprint_of_the_recorded_run():
    files = job_files(recorded_ddp_job(), sandbox_node())
    assert files["train"] == SANDBOX_TRAIN_YAML
    assert list(files["train"]) == list(SANDBOX_TRAIN_YAML)  # to_nice_yaml(sort_keys=false) keeps this order
    assert files["deepspeed"] is None
    # A different fingerprint would make a re-run of the finished job "finished with other settings".
    assert files["fingerprint"] == SANDBOX_FINGERPRINT


# --- The evaluation YAML -----------------------------------------------------------------------


def test_eval_args_score_the_lora_adapter_on_the_held_out_split():
    job = role_job()
    args = eval_args(job, node())
    train = job_files(job, node())["train"]
    assert args["do_train"] is False
    assert args["do_eval"] is True
    for key in ("dataset", "dataset_dir", "val_size", "seed", "template", "cutoff_len", "stage", "finetuning_type"):
        assert args[key] == train[key], key
    assert args["adapter_name_or_path"] == f"{JOB_DIR}/output"
    assert args["model_name_or_path"] == MODEL  # the base model under the adapter
    assert args["output_dir"] == f"{JOB_DIR}/eval"
    assert args["bf16"] is True
    assert not {"deepspeed", "fsdp", "save_steps", "learning_rate"} & set(args)


@pytest.mark.parametrize("finetuning_type", ["full", "freeze"])
def test_eval_args_of_full_weights_load_the_trained_model_itself(finetuning_type):
    job = role_job(finetuning_type=finetuning_type, val_size=0.05, seed=7)
    args = eval_args(job, node("cpu"))
    assert args["model_name_or_path"] == f"{JOB_DIR}/output"
    assert "adapter_name_or_path" not in args
    assert (args["val_size"], args["seed"], args["bf16"]) == (0.05, 7, False)


def test_eval_args_of_the_sandbox_job_match_its_recorded_evaluation():
    # The recorded eval.json names dataset tiny_instruct, val_size 0.1, seed 42.
    args = eval_args(recorded_ddp_job(), sandbox_node())
    assert (args["dataset"], args["val_size"], args["seed"]) == ("tiny_instruct", 0.1, 42)
    assert args["model_name_or_path"] == "/var/lib/instinct-finetune/jobs/sandbox-tiny/output"


# --- dataset_info.json -------------------------------------------------------------------------


def test_dataset_info_registers_the_file_under_the_dataset_name():
    assert dataset_info(role_job(), "tiny-instruct.json") == {
        "tiny_instruct": {"file_name": "tiny-instruct.json", "formatting": "alpaca"}
    }
    columns = {"messages": "conversations"}
    assert dataset_info(role_job(dataset_format="sharegpt", dataset_columns=columns), "chats.jsonl") == {
        "tiny_instruct": {"file_name": "chats.jsonl", "formatting": "sharegpt", "columns": columns}
    }


# --- job_problems ------------------------------------------------------------------------------


def test_the_default_job_has_no_problem():
    assert job_problems(role_job(), "node1") == []
    assert job_problems(sandbox_job(), "node1") == []


@pytest.mark.parametrize(
    ("setting", "value", "shown"),
    [
        ("strategy", "zero2", "'zero2'"),
        ("finetuning_type", "qlora", "'qlora'"),
        ("per_device_train_batch_size", 0, "0"),
        ("gradient_accumulation_steps", 0, "0"),
        ("cutoff_len", 2.5, "2.5"),
        ("save_steps", True, "True"),
        ("learning_rate", 0, "0"),
        ("learning_rate", -1.0e-4, "-0.0001"),
        ("learning_rate", "abc", "'abc'"),
        ("num_train_epochs", 0, "0"),
        ("job_name", "My Job", "'My Job'"),
        ("dataset_name", "", "''"),
        ("model", "", "''"),
        ("val_size", 1.5, "1.5"),
        ("eval_steps", 0, "0"),
        ("dataset_format", "csv", "'csv'"),
    ],
)
def test_each_problem_names_the_host_the_setting_the_value_and_the_runbook(setting, value, shown):
    problems = job_problems(role_job(**{setting: value}), "node1")
    assert len(problems) == 1, problems
    message = problems[0]
    assert message.startswith(f"node1: finetune_{setting} is {shown}:"), message
    assert message.endswith(f"See {RUNBOOK}")


def test_missing_settings_are_problems_too():
    job = role_job()
    del job["model"]
    del job["dataset_name"]
    problems = job_problems(job, "node2")
    assert problems == [
        f"node2: finetune_dataset_name is None: name the dataset (the key in dataset_info.json). See {RUNBOOK}",
        f"node2: finetune_model is None: set a path on the nodes, a hub id, or finetune_model_src. See {RUNBOOK}",
    ]


def test_a_job_bounded_by_steps_needs_no_epochs_and_without_split_no_eval_steps():
    assert job_problems(role_job(num_train_epochs=0, max_steps=40), "node1") == []
    assert job_problems(role_job(val_size=0, eval_steps=0), "node1") == []


def test_problems_without_a_host_have_no_prefix():
    assert job_problems(role_job(strategy="zero2"))[0].startswith("finetune_strategy is 'zero2':")


# --- fingerprint, perplexity, env files --------------------------------------------------------


def test_fingerprint_is_stable_for_equal_input():
    first = job_files(role_job(), node())["fingerprint"]
    assert re.fullmatch(r"[0-9a-f]{16}", first)
    assert job_files(role_job(), node())["fingerprint"] == first
    reordered = dict(reversed(list(role_job().items())))
    assert job_files(reordered, node())["fingerprint"] == first
    assert jobspec.fingerprint({"a": 1, "b": [1, 2]}, None) == jobspec.fingerprint({"b": [1, 2], "a": 1}, None)


def test_clipping_at_the_trainers_default_keeps_a_ddp_jobs_fingerprint_and_other_clipping_changes_it():
    ddp = role_job(strategy="ddp")
    default = job_files(ddp, node())["fingerprint"]
    assert job_files({**ddp, "max_grad_norm": "1.0"}, node())["fingerprint"] == default
    assert job_files({**ddp, "max_grad_norm": 0.5}, node())["fingerprint"] != default


# One change of each setting of the job that trains differently.
FINGERPRINTED_CHANGES = [
    ("dataset_name", "other_data"),
    ("stage", "pt"),
    ("template", "llama3"),
    ("finetuning_type", "full"),
    ("lora_rank", 16),
    ("lora_target", "q_proj,v_proj"),
    ("cutoff_len", 2048),
    ("per_device_train_batch_size", 4),
    ("gradient_accumulation_steps", 8),
    ("learning_rate", 2.0e-4),
    ("num_train_epochs", 1.0),
    ("max_steps", 100),
    ("lr_scheduler_type", "linear"),
    ("warmup_ratio", 0.0),
    ("gradient_checkpointing", False),
    ("bf16", False),
    ("plot_loss", False),
    ("val_size", 0.2),
    ("eval_steps", 25),
    ("per_device_eval_batch_size", 2),
    ("logging_steps", 5),
    ("save_steps", 50),
    ("save_total_limit", 1),
    ("seed", 7),
    ("extra_args", {"dataloader_num_workers": 0}),
    ("strategy", "fsdp"),
    ("strategy", "ddp"),
    ("deepspeed_offload_optimizer", True),
    ("deepspeed_offload_param", True),
    ("deepspeed_extra", {"steps_per_print": 50}),
    ("max_grad_norm", 0.5),
    ("max_grad_norm", 0),
    ("deepspeed_gather_16bit_weights", False),
]


@pytest.mark.parametrize(("setting", "value"), FINGERPRINTED_CHANGES)
def test_fingerprint_changes_with_any_setting(setting, value):
    assert (
        job_files(role_job(**{setting: value}), node())["fingerprint"] != job_files(role_job(), node())["fingerprint"]
    )


@pytest.mark.parametrize(
    "change",
    [{"model": "meta-llama/Llama-3.2-1B"}, {"device": "cpu"}, {"shared_output": True}, {"output_dir": "/data/out"}],
)
def test_fingerprint_changes_with_the_node(change):
    assert job_files(role_job(), node(**change))["fingerprint"] != job_files(role_job(), node())["fingerprint"]


# The settings the job's launch history keeps (issue 32): what the fingerprint is a hash of, flat, so
# that a refused or forced resume names what changed.


def test_the_recorded_settings_name_what_changed_the_fingerprint():
    base = job_files(role_job(), node())["settings"]
    changed = job_files(role_job(learning_rate=2.0e-4, lora_rank=16), node(model="meta-llama/Llama-3.2-1B"))
    assert jobstate.settings_differences(base, changed["settings"]) == [
        ("learning_rate", 0.0001, 0.0002),
        ("lora_alpha", 16, 32),  # LoRA's alpha follows the rank (2 x rank) unless set
        ("lora_rank", 8, 16),
        ("model_name_or_path", MODEL, "meta-llama/Llama-3.2-1B"),
    ]
    zero3 = job_files(role_job(deepspeed_offload_optimizer=True), node())["settings"]
    assert jobstate.settings_differences(base, zero3) == [
        ("ds_config.zero_optimization.offload_optimizer.device", None, "cpu"),
        ("ds_config.zero_optimization.offload_optimizer.pin_memory", None, True),
    ]


@pytest.mark.parametrize(("setting", "value"), FINGERPRINTED_CHANGES)
def test_the_recorded_settings_change_with_any_setting_that_changes_the_fingerprint(setting, value):
    assert job_files(role_job(**{setting: value}), node())["settings"] != job_files(role_job(), node())["settings"]


@pytest.mark.parametrize("change", [{"count_tokens": False}, {"ddp_timeout_minutes": 5}, {"max_grad_norm": "1.0"}])
def test_what_leaves_the_fingerprint_alone_leaves_the_recorded_settings_alone(change):
    job = role_job(strategy="ddp")
    assert job_files({**job, **change}, node())["fingerprint"] == job_files(job, node())["fingerprint"]
    assert job_files({**job, **change}, node())["settings"] == job_files(job, node())["settings"]


def test_perplexity():
    assert perplexity(2.0) == pytest.approx(math.exp(2))
    assert perplexity("2.0") == pytest.approx(math.exp(2))
    assert perplexity(0) == 1.0
    # The recorded sandbox evaluation: eval_loss 4.533164024353027, perplexity 93.0525162237074.
    assert perplexity(4.533164024353027) == 93.0525162237074
    assert perplexity(1000) == math.inf


@pytest.mark.parametrize("loss", ["nan", None, "", "abc", "inf", float("nan"), True])
def test_no_perplexity_without_a_finite_loss(loss):
    assert perplexity(loss) is None


def test_env_file_reads_the_rccl_environment():
    text = (
        "# Ansible managed\n"
        "# RCCL/NCCL and Gloo settings for node1; read by the launch of every training\n"
        "# Interface chosen by fabric_iface: matched cidr 10.10.0.0/16.\n"
        "NCCL_SOCKET_IFNAME=ens50f0\n"
        "GLOO_SOCKET_IFNAME=ens50f0\n"
        "NCCL_DEBUG=WARN\n"
        "\n"
        "HSA_FORCE_FINE_GRAIN_PCIE=1\n"
        "PYTORCH_HIP_ALLOC_CONF=expandable_segments:True\n"
        "MASTER_ADDR=10.10.0.11\n"
        "MASTER_PORT=29500\n"
        'HF_HOME="/var/lib/instinct-finetune/hf-home"\n'
        "  TORCH_NCCL_ASYNC_ERROR_HANDLING = 1  \n"
        "EXTRA=a=b\n"
        "not a setting\n"
    )
    assert env_file(text) == {
        "NCCL_SOCKET_IFNAME": "ens50f0",
        "GLOO_SOCKET_IFNAME": "ens50f0",
        "NCCL_DEBUG": "WARN",
        "HSA_FORCE_FINE_GRAIN_PCIE": "1",
        "PYTORCH_HIP_ALLOC_CONF": "expandable_segments:True",
        "MASTER_ADDR": "10.10.0.11",
        "MASTER_PORT": "29500",
        "HF_HOME": "/var/lib/instinct-finetune/hf-home",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
        "EXTRA": "a=b",
    }
    # A node without the file: validate.yml slurps nothing and reads MASTER_ADDR | default('').
    assert env_file("") == {}
    assert env_file(None) == {}


# --- the filters -------------------------------------------------------------------------------


def test_a_setting_that_is_not_a_number_fails_as_a_filter_error():
    with pytest.raises(AnsibleFilterError, match="job_files"):
        job_files(role_job(per_device_train_batch_size="two"), node())


def test_every_finetune_and_evaluate_filter_has_its_documentation():
    for name in [*FILTERS, *EvaluateFilters().filters()]:
        doc = ROOT / "plugins" / "filter" / f"{name}.yml"
        assert doc.is_file(), f"{name} has no {doc.relative_to(ROOT)}"
        text = yaml.safe_load(doc.read_text(encoding="utf-8"))
        assert text["DOCUMENTATION"]["name"] == name


def test_counting_tokens_changes_the_train_yaml_but_not_the_fingerprint():
    counted = job_files(recorded_ddp_job(), sandbox_node())
    uncounted = job_files({**recorded_ddp_job(), "count_tokens": "false"}, sandbox_node())
    # Real tokens, not the padding of each batch (transformers 5's "non_padding"; True means "all").
    assert counted["train"]["include_num_input_tokens_seen"] == "non_padding"
    assert uncounted["train"]["include_num_input_tokens_seen"] == "no"
    assert counted["fingerprint"] == uncounted["fingerprint"] == SANDBOX_FINGERPRINT


# --- Settings that cannot work together (issue 16) ---------------------------------------------

device_problems = FILTERS["finetune_device_problems"]


@pytest.mark.parametrize(
    ("settings", "starts", "says"),
    [
        # A batch size given again in extra_args would disagree with ds_config.json.
        (
            {"extra_args": {"per_device_train_batch_size": 8}},
            "finetune_extra_args is {'per_device_train_batch_size': 8}:",
            "set finetune_per_device_train_batch_size instead",
        ),
        ({"extra_args": {"deepspeed": "/etc/my-ds.json"}}, "finetune_extra_args is {'deepspeed':", "finetune_strategy"),
        ({"extra_args": {"output_dir": "/data/out"}}, "finetune_extra_args is {'output_dir':", "finetune_job_name"),
        # Evaluation asked for without a validation split.
        (
            {"val_size": 0, "extra_args": {"eval_strategy": "steps"}},
            "finetune_val_size is 0:",
            "asks for evaluation (eval_strategy), which needs a validation split",
        ),
        # transformers refuses a DeepSpeed value that differs from the Trainer's.
        (
            {"deepspeed_extra": {"gradient_accumulation_steps": 8}},
            "finetune_deepspeed_extra is {'gradient_accumulation_steps': 8}:",
            "the Trainer's gradient_accumulation_steps is 4,",
        ),
        (
            {"deepspeed_extra": {"gradient_clipping": 0.3}},
            "finetune_deepspeed_extra is {'gradient_clipping': 0.3}:",
            "set finetune_max_grad_norm instead",
        ),
        # A combination that cannot save weights.
        (
            {"finetuning_type": "full", "deepspeed_gather_16bit_weights": False},
            "finetune_deepspeed_gather_16bit_weights is False:",
            "no model.safetensors",
        ),
        (
            {
                "finetuning_type": "full",
                "deepspeed_extra": {"zero_optimization": {"stage3_gather_16bit_weights_on_model_save": "false"}},
            },
            "finetune_deepspeed_gather_16bit_weights is 'false':",
            "no model.safetensors",
        ),
        # FSDP without shared storage could not resume on the other nodes.
        ({"strategy": "fsdp"}, "finetune_strategy is 'fsdp':", "set finetune_shared_output: true"),
        ({"max_grad_norm": -1}, "finetune_max_grad_norm is -1:", "at least 0"),
        ({"lora_rank": 0}, "finetune_lora_rank is 0:", "at least 1"),
        ({"extra_args": ["bf16"]}, "finetune_extra_args is ['bf16']:", "give a mapping"),
    ],
)
def test_settings_that_cannot_work_together_are_refused_before_launch(settings, starts, says):
    problems = job_problems(role_job(**settings), "node1")
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"node1: {starts}"), problems[0]
    assert says in problems[0]
    assert problems[0].endswith(f"See {RUNBOOK}")


def test_the_combinations_that_do_work_pass():
    assert job_problems(role_job(strategy="fsdp", shared_output=True), "node1") == []
    assert job_problems(role_job(finetuning_type="full"), "node1") == []
    # LoRA saves its adapter without gathered weights; "auto" is left to the Trainer.
    assert job_problems(role_job(deepspeed_gather_16bit_weights=False), "node1") == []
    assert (
        job_problems(role_job(deepspeed_extra={"gradient_clipping": "auto", "gradient_accumulation_steps": 4}), "n")
        == []
    )
    assert job_problems(role_job(extra_args={"eval_strategy": "steps"}), "node1") == []
    assert job_problems(role_job(val_size=0, extra_args={"do_eval": False}), "node1") == []
    # Under ddp there is no ds_config.json to disagree with.
    assert job_problems(role_job(strategy="ddp", deepspeed_extra={"gradient_accumulation_steps": 8}), "n") == []


def test_fsdp_is_refused_on_a_cpu_node_and_not_on_a_gpu_node():
    job = role_job(strategy="fsdp", shared_output=True)
    (problem,) = device_problems(job, "cpu", 2, "node1")
    assert problem.startswith("node1: finetune_strategy is 'fsdp', but this node has no GPU (device cpu)")
    assert "Use ddp or deepspeed_zero3 on CPU nodes" in problem
    assert problem.endswith(f"See {RUNBOOK}")
    assert device_problems(job, "rocm", 16, "node1") == []
    assert device_problems(role_job(), "cpu", 2, "node1") == []


def test_a_deepspeed_train_batch_size_must_be_the_world_times_micro_times_accumulation():
    job = role_job(deepspeed_extra={"train_batch_size": 64})
    assert device_problems(job, "rocm", 8, "node1") == []  # 8 x 2 x 4
    (problem,) = device_problems(job, "rocm", 16, "node1")
    assert "train_batch_size 64, but 16 ranks x 2 per device x 4 accumulation steps make 128" in problem
    assert device_problems(role_job(deepspeed_extra={"train_batch_size": "auto"}), "rocm", 16, "n") == []


# --- The base model's evaluation and the judgement (issue 16) ----------------------------------


def test_the_evaluation_carries_the_settings_that_choose_the_rows_and_the_labels():
    extra = {
        "max_samples": 500,
        "train_on_prompt": True,
        "mask_history": True,
        "packing": False,
        "dataloader_num_workers": 0,
    }
    args = eval_args(role_job(extra_args=extra), node())
    assert {key: args[key] for key in ("max_samples", "train_on_prompt", "mask_history", "packing")} == {
        "max_samples": 500,
        "train_on_prompt": True,
        "mask_history": True,
        "packing": False,
    }
    assert "dataloader_num_workers" not in args  # a speed setting, not one of the split or the labels


def test_the_base_model_is_scored_on_the_same_rows_without_the_adapter():
    job = role_job(extra_args={"max_samples": 500})
    tuned = eval_args(job, node())
    base = jobspec.eval_args(job, node(base_eval_dir="/var/lib/instinct-finetune/base-eval/k"), base=True)
    assert base["model_name_or_path"] == MODEL
    assert "adapter_name_or_path" not in base
    assert base["output_dir"] == "/var/lib/instinct-finetune/base-eval/k"
    same = {k: v for k, v in tuned.items() if k not in ("adapter_name_or_path", "output_dir")}
    assert {k: v for k, v in base.items() if k != "output_dir"} == same


def test_the_base_evaluation_is_cached_per_model_dataset_and_split():
    job = role_job()
    base = jobspec.eval_args(job, node(base_eval_dir="/a"), base=True)
    key = jobspec.base_eval_key(base, "3f786850e387550fdab836ed7e6dc881de23001b")
    # Where it writes, which job asks (its own copy of the data, its fine-tuning type) does not
    # matter; the data's content, the split and the model do.
    other_node = node(base_eval_dir="/b", dataset_dir="/var/lib/instinct-finetune/jobs/other/data")
    other_job = jobspec.eval_args(
        role_job(job_name="other", learning_rate=0.5, finetuning_type="full", strategy="ddp"), other_node, base=True
    )
    assert other_job["dataset_dir"] != base["dataset_dir"]
    assert jobspec.base_eval_key(other_job, "3f786850e387550fdab836ed7e6dc881de23001b") == key
    assert jobspec.base_eval_key(base, "0000000000000000000000000000000000000000") != key
    for change in ({"val_size": 0.2}, {"seed": 7}, {"extra_args": {"max_samples": 10}}, {"cutoff_len": 256}):
        changed = jobspec.eval_args(role_job(**change), node(base_eval_dir="/a"), base=True)
        assert jobspec.base_eval_key(changed, "3f786850e387550fdab836ed7e6dc881de23001b") != key, change


def test_the_judgement_compares_the_perplexities():
    judged = jobspec.eval_judgement(math.log(20.0), math.log(80.0))
    assert judged["perplexity"] == pytest.approx(20.0)
    assert judged["base_perplexity"] == pytest.approx(80.0)
    assert judged["ratio"] == pytest.approx(0.25)
    assert judged["improvement"] == pytest.approx(0.75)
    assert judged["better"] is True
    worse = jobspec.eval_judgement(math.log(90.0), math.log(80.0))
    assert worse["better"] is False and worse["ratio"] == pytest.approx(1.125)
    assert jobspec.eval_judgement(math.log(80.0), math.log(80.0))["better"] is False  # equal is not better
    assert jobspec.eval_judgement("nan", math.log(80.0)) == {
        "perplexity": None, "base_perplexity": pytest.approx(80.0), "ratio": None, "improvement": None, "better": False,
    }  # fmt: skip


def test_the_definition_says_how_the_loss_is_averaged_and_over_which_tokens():
    text = jobspec.PERPLEXITY_DEFINITION
    for words in ("exp(eval_loss)", "weighted by its number of samples", "label tokens", "train_on_prompt", "padding"):
        assert words in text


def test_the_sandbox_job_trains_the_default_way():
    """make sandbox runs what users run: ZeRO-3 with the optimizer offloaded to CPU, and LoRA."""
    files = job_files(sandbox_job(), sandbox_node())
    assert files["train"]["finetuning_type"] == "lora"
    assert files["train"]["deepspeed"] == "/etc/instinct-finetune/jobs/sandbox-tiny/ds_config.json"
    assert files["deepspeed"]["zero_optimization"]["offload_optimizer"] == {"device": "cpu", "pin_memory": True}
    assert files["deepspeed"]["zero_optimization"]["stage"] == 3
    assert files["train"]["ddp_backend"] == "gloo"
    # transformers 5's name for the warm-up fraction (warmup_ratio is deprecated there).
    assert files["train"]["warmup_steps"] == 0.05 and "warmup_ratio" not in files["train"]
    assert job_problems(sandbox_job(), "node1") == []
    assert device_problems(sandbox_job(), "cpu", 2, "node1") == []


# The sandbox's fault job as its evaluation left it (artifacts/sandbox/sandbox-fault/.../eval.json of a
# `make test` run): the shape the parity check reads on both sides.
FAULT_EVAL = {
    "job": "sandbox-fault", "dataset": "tiny_instruct", "val_size": 0.1, "seed": 42, "finetuning_type": "full",
    "strategy": "deepspeed_zero3", "eval_samples": None, "eval_loss": 3.9155502319335938,
    "base_eval_loss": 6.518788814544678,
}  # fmt: skip


def test_parity_with_the_same_job_elsewhere_within_the_tolerance():
    """Issue 34: the same job on another platform (another strategy too: FSDP there, ZeRO-3 here) whose
    loss differs by 0.5 % agrees at the default 1 %; at 0.1 % it does not, with both numbers."""
    other = dict(FAULT_EVAL, strategy="fsdp", eval_loss=FAULT_EVAL["eval_loss"] * 1.005, job="fault-on-h100")
    parity = jobspec.eval_parity(FAULT_EVAL, other)
    assert parity["comparable"] is True and parity["within"] is True and parity["problems"] == []
    assert parity["relative_loss_delta"] == pytest.approx(0.005 / 1.005)
    assert parity["loss_delta"] == pytest.approx(-FAULT_EVAL["eval_loss"] * 0.005)
    assert parity["perplexity"] == pytest.approx(math.exp(FAULT_EVAL["eval_loss"]))
    assert parity["perplexity_delta"] == pytest.approx(math.exp(FAULT_EVAL["eval_loss"]) - math.exp(other["eval_loss"]))
    assert parity["base_relative_loss_delta"] == 0.0 and parity["reference_job"] == "fault-on-h100"
    assert parity["tolerance"] == 0.01 and "2^-8" in parity["tolerance_source"]
    strict = jobspec.eval_parity(FAULT_EVAL, other, 0.001)
    assert strict["comparable"] is True and strict["within"] is False
    assert jobspec.eval_parity(FAULT_EVAL, FAULT_EVAL, 0)["within"] is True  # itself, bit for bit


def test_parity_refuses_evaluations_of_other_rows_or_another_base_model():
    for change, problem in (
        ({"seed": 7}, "seed is 42 here and 7 in the reference"),
        ({"val_size": 0.2}, "val_size is 0.1 here and 0.2 in the reference"),
        ({"dataset": "alpaca"}, "dataset is 'tiny_instruct' here and 'alpaca' in the reference"),
        ({"finetuning_type": "lora"}, "finetuning_type is 'full' here and 'lora' in the reference"),
        ({"base_eval_loss": 6.9}, "the base model's eval loss differs by 5.52% (6.518788814544678 here, 6.9 in"),
        ({"eval_loss": "nan"}, "the reference holds no finite eval_loss ('nan')"),
    ):
        parity = jobspec.eval_parity(FAULT_EVAL, dict(FAULT_EVAL, **change))
        assert parity["comparable"] is False and parity["within"] is False, change
        assert any(p.startswith(problem) for p in parity["problems"]), parity["problems"]
    # A reference that says nothing of its rows proves nothing (review of issue 34).
    bare = jobspec.eval_parity(FAULT_EVAL, {"eval_loss": FAULT_EVAL["eval_loss"]})
    assert bare["comparable"] is False and bare["within"] is False
    assert (
        "seed is not recorded in the reference, so the two cannot be shown to score the same rows" in bare["problems"]
    )
    assert bare["problems"][-1].startswith("the base model's eval loss is not recorded on both sides")
    assert (
        jobspec.eval_parity(FAULT_EVAL, "not a mapping")["problems"][0]
        == "the reference holds no finite eval_loss (None)"
    )
    with pytest.raises(ValueError, match=r"evaluate_reference_tolerance is -0\.1"):
        jobspec.eval_parity(FAULT_EVAL, FAULT_EVAL, -0.1)


def test_a_reference_that_is_not_an_evaluation_is_named_before_anything_runs():
    assert jobspec.eval_reference_problems(json.dumps(FAULT_EVAL)) == []
    assert jobspec.eval_reference_problems("{not json")[0].startswith("it is not JSON (")
    assert jobspec.eval_reference_problems("[1, 2]") == ["it holds list, not an evaluation's mapping"]
    assert jobspec.eval_reference_problems('{"perplexity": 3}') == [
        "it holds no finite eval_loss (None): it is not an eval.json of this role"
    ]
