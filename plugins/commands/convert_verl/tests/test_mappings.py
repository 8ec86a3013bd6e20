"""The veRL → rft rules the issue found missing or wrong: policy-loss modes, LoRA,
Megatron configs, veRL's defaults (``use_dynamic_bsz`` and every other key), the GPU
layout of veRL's hybrid engine, the trainer, and the workflow / reward by data_source.
Every converted config here is validated (``load_config``) on the tiny model."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from rft.config.schema import RftConfig
from rft_plugin_convert_verl import convert_text, mapping
from rft_plugin_convert_verl.mapping import (
    DIRECT,
    FILLED_DEFAULTS,
    MEGATRON_DEFAULTS,
    VERL_DEFAULTS,
    VerlDefaults,
    flatten,
    verl_config_dir,
)

FORMS = Path(__file__).parent / "data" / "shell_forms"
A = "actor_rollout_ref.actor."
BASE = ("python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo "
        "data.train_files=$HOME/data/gsm8k/train.parquet "
        "data.val_files=$HOME/data/gsm8k/test.parquet actor_rollout_ref.rollout.n=4 "
        "actor_rollout_ref.rollout.name=vllm trainer.n_gpus_per_node=1 ")


def _convert(extra: str = "", base: str = BASE) -> Any:
    return convert_text(base + extra + "\n")


def _reasons(result: Any) -> dict[str, str]:
    return {entry.key: entry.reason for entry in result.report.not_converted}


def _script(name: str) -> Any:
    path = FORMS / name
    return convert_text(path.read_text(), path.name, str(path))


# ---------------------------------------------------------------------------------------
# policy loss modes
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode, loss, args", [
    ("vanilla", "ppo", {"clip_range": 0.2, "clip_range_low": 0.2, "clip_range_high": 0.28,
                        "clip_ratio_c": 3.0}),
    ("gspo", "gspo", {"clip_range": 0.2, "clip_range_low": 0.2, "clip_range_high": 0.28}),
    ("cispo", "cispo", {"clip_range_low": 0.2, "clip_range_high": 0.28}),
    ("sapo", "sapo", {"tau_pos": 1.0, "tau_neg": 1.05}),
])
def test_loss_mode_selects_the_policy_loss(mode: str, loss: str, args: dict[str, Any],
                                           validate_converted: Callable[..., Any]) -> None:
    result = _convert(f"{A}policy_loss.loss_mode={mode} {A}clip_ratio_high=0.28")
    algorithm = result.config["algorithm"]
    assert algorithm["policy_loss_fn"] == loss
    assert algorithm["policy_loss_fn_args"] == args
    assert "policy_loss" not in str(result.config["trainer"].get("trainer_config"))
    if loss in ("cispo", "sapo"):  # they read no clip_ratio / the clip ratios
        assert f"{A}clip_ratio_high" in _reasons(result) or mode == "cispo"
    (stage,) = validate_converted(result.yaml).stages
    assert stage.config.algorithm.policy_loss_fn == loss


@pytest.mark.parametrize("mode", ["geo_mean", "gpg", "clip_cov", "kl_cov"])
def test_loss_modes_rft_lacks_are_reported(mode: str,
                                           validate_converted: Callable[..., Any]) -> None:
    result = _convert(f"{A}policy_loss.loss_mode={mode} {A}policy_loss.clip_cov_ratio=0.0002")
    reasons = _reasons(result)
    assert reasons[f"{A}policy_loss.loss_mode"].startswith(
        f"rft has no policy loss for loss_mode '{mode}'")
    assert "a parameter of other veRL policy losses" in reasons[f"{A}policy_loss.clip_cov_ratio"]
    assert "policy_loss_fn" not in result.config["algorithm"]
    validate_converted(result.yaml)


def test_gspo_script(validate_converted: Callable[..., Any]) -> None:
    result = _script("gspo_4gpu.sh")
    algorithm = result.config["algorithm"]
    assert (algorithm["algorithm_type"], algorithm["policy_loss_fn"]) == ("grpo", "gspo")
    assert algorithm["policy_loss_fn_args"] == {"clip_range": 0.2, "clip_range_low": 0.0003,
                                                "clip_range_high": 0.0004}
    assert algorithm["loss_agg_mode"] == "seq-mean-token-mean"
    reasons = _reasons(result)
    assert reasons[f"{A}clip_ratio_c"] == ("not used by loss_mode=gspo (rft's gspo loss has "
                                           "no such parameter)")
    # 4 GPUs: colocate, 4 trainer ranks, each rank's rollout engine of tensor_parallel_size 1
    assert result.config["mode"] == "colocate"
    assert reasons["actor_rollout_ref.rollout.tensor_model_parallel_size"] == (
        "colocate mode runs one engine of tensor_parallel_size 1 per GPU")
    (stage,) = validate_converted(result.yaml).stages
    assert stage.config.trainer.ranks == 4


# ---------------------------------------------------------------------------------------
# LoRA
# ---------------------------------------------------------------------------------------


def test_lora_goes_to_model_lora_configs(validate_converted: Callable[..., Any]) -> None:
    result = _script("lora_2gpu.sh")
    assert result.config["model"]["lora_configs"] == [
        {"lora_rank": 64, "lora_alpha": 32, "target_modules": "all-linear"}]
    model = result.config["trainer"].get("trainer_config", {}).get("actor_rollout_ref", {}).get(
        "model", {})
    assert not {"lora_rank", "lora_alpha", "target_modules"} & set(model)
    assert any("rft trains the adapter" in n for n in result.report.notes)
    reasons = _reasons(result)
    assert "actor_rollout_ref.rollout.load_format" in reasons
    validate_converted(result.yaml)  # rft trains LoRA adapters: the conversion validates


def test_lora_defaults_and_inactive_settings() -> None:
    alpha = _convert("actor_rollout_ref.model.lora_rank=8").config["model"]["lora_configs"][0]
    assert alpha == {"lora_rank": 8, "lora_alpha": 16, "target_modules": "all-linear"}
    result = _convert("actor_rollout_ref.model.lora_alpha=32 "
                      "actor_rollout_ref.model.target_modules=[q_proj,v_proj]")
    assert "lora_configs" not in result.config.get("model", {})
    assert _reasons(result)["actor_rollout_ref.model.lora_alpha"] == (
        "inactive: actor_rollout_ref.model.lora_rank is 0")
    listed = _convert("actor_rollout_ref.model.lora_rank=8 "
                      "actor_rollout_ref.model.target_modules=[q_proj,v_proj]")
    assert listed.config["model"]["lora_configs"][0]["target_modules"] == "q_proj,v_proj"


# ---------------------------------------------------------------------------------------
# Megatron, --config-name and veRL's defaults
# ---------------------------------------------------------------------------------------


def test_megatron_config_name_is_read_and_its_strategy_reported(
        validate_converted: Callable[..., Any]) -> None:
    result = _script("megatron_config_name.sh")
    assert result.launch.config_name == "ppo_megatron_trainer.yaml"
    if verl_config_dir() is not None:
        assert result.conversion.defaults.origin == (
            "veRL's _generated_ppo_megatron_trainer.yaml")
    entry = next(e for e in result.report.not_converted if e.key == f"{A}strategy")
    assert entry.value.startswith("megatron (")
    assert "no 'megatron' backend" in entry.reason
    assert result.config["trainer"]["trainer_strategy"] == "fsdp"
    actor = result.config["trainer"]["trainer_config"]["actor_rollout_ref"]["actor"]
    assert actor["megatron"] == {"pipeline_model_parallel_size": 2,
                                 "tensor_model_parallel_size": 2}
    validate_converted(result.yaml)


@pytest.mark.parametrize("launch", ["model_engine=megatron", f"{A}strategy=megatron",
                                    "--config-name=ppo_megatron_trainer"])
def test_every_way_of_choosing_megatron_is_reported(launch: str) -> None:
    result = _convert(launch)
    assert f"{A}strategy" in _reasons(result)
    assert "model_engine" not in _reasons(result)


def test_defaults_without_verl_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mapping, "verl_config_dir", lambda: None)
    plain = VerlDefaults.for_launch(None, None, None)
    assert plain.values == VERL_DEFAULTS and plain.origin.startswith("built-in")
    megatron = VerlDefaults.for_launch("ppo_megatron_trainer", None, None)
    assert megatron.values[f"{A}strategy"] == "megatron"
    result = _convert("--config-name=ppo_megatron_trainer")
    assert f"{A}strategy" in _reasons(result)


def test_built_in_megatron_defaults_are_veRLs() -> None:
    folder = verl_config_dir()
    if folder is None:
        pytest.skip("verl is not installed")
    generated = flatten(yaml.safe_load(
        (folder / "_generated_ppo_megatron_trainer.yaml").read_text()))
    assert {key: generated[key] for key in MEGATRON_DEFAULTS} == MEGATRON_DEFAULTS


def test_use_dynamic_bsz_defaults_to_veRLs_false() -> None:
    assert _convert().config["trainer"]["use_dynamic_bsz"] is False
    result = _convert(f"{A}use_dynamic_bsz=True {A}ppo_max_token_len_per_gpu=8192")
    assert result.config["trainer"]["use_dynamic_bsz"] is True
    assert result.config["trainer"]["max_token_len_per_gpu"] == 8192
    assert result.sources["trainer.use_dynamic_bsz"] == f"{A}use_dynamic_bsz"
    assert _convert().sources["trainer.use_dynamic_bsz"] == f"{A}use_dynamic_bsz (veRL default False)"


def _rft_default(target: str) -> Any:
    node: Any = RftConfig()
    for part in target.split("."):
        if not dataclasses.is_dataclass(node):
            return "<free-form>"
        node = getattr(node, part)
    return node


DEFAULT_EXCEPTIONS = {
    "data.filter_overlong_prompts": "veRL's default false keeps overlong prompts (and "
    "truncation=error then fails on them); rft truncates them by default",
    M + "path" if (M := "actor_rollout_ref.model.") else "": "every launch sets the model",
    A + "ppo_max_token_len_per_gpu": "only read with use_dynamic_bsz (veRL default false)",
    A + "loss_agg_mode": "rft's None means token-mean, veRL's default",
    A + "grad_clip": "rft's None: validation fills 1.0, veRL's default",
    A + "optim.clip_grad": "rft's None: trainer.grad_clip, 1.0 unset, veRL's default",
    A + "optim.optimizer": "AdamW → adam (the transform)",
    "actor_rollout_ref.rollout.name": "mandatory in veRL (???)",
    "actor_rollout_ref.rollout.max_num_batched_tokens": "rft leaves it to vLLM",
    "actor_rollout_ref.rollout.max_num_seqs": "rft leaves it to vLLM",
    "actor_rollout_ref.rollout.top_p": "1 == 1.0",
    "trainer.project_name": "a name", "trainer.experiment_name": "a name",
    "trainer.default_local_dir": "checkpoints/<project>/<name>: rft's ./checkpoints layout",
    "trainer.save_freq": "-1 → 0 (the transform): save at the end, rft's default",
    "trainer.test_freq": "-1 is reported when set, noted when not",
    "trainer.resume_mode": "auto → true (the transform), rft's default",
    "trainer.critic_warmup": "kept in trainer_config",
    "critic.model.path": "rft's None means model.model_path",
}
"""DIRECT keys whose veRL default is not rft's default, and why that is fine."""


def test_every_direct_key_has_veRLs_default_or_is_filled() -> None:
    """For each one-to-one rule, veRL's default equals rft's default for the target, or
    the converter writes veRL's default (FILLED_DEFAULTS), or an exception says why not —
    so a launch that leaves a key out converts to veRL's behaviour."""
    folder = verl_config_dir()
    if folder is None:
        pytest.skip("verl is not installed")
    defaults = VerlDefaults.for_launch(None, None, None)
    differing = {}
    for rule in DIRECT:
        if rule.verl in FILLED_DEFAULTS or rule.verl in DEFAULT_EXCEPTIONS:
            continue
        verl = defaults.get(rule.verl, lambda key: defaults.get(key, lambda _: None))
        ours = _rft_default(rule.rft[0])
        if verl != ours:
            differing[rule.verl] = (verl, ours)
    assert differing == {}
    assert set(DEFAULT_EXCEPTIONS) <= {rule.verl for rule in DIRECT}


def test_filled_defaults_are_written_with_their_source() -> None:
    config = _convert(base="python3 -m verl.trainer.main_ppo ").config
    assert config["model"]["max_prompt_tokens"] == config["model"]["max_response_tokens"] == 512
    assert config["buffer"]["total_epochs"] == 30
    assert config["explorer"]["rollout_model"]["gpu_memory_utilization"] == 0.5
    assert config["cluster"] == {"node_num": 1, "gpu_per_node": 8}
    assert config["monitor"]["monitor_type"] == "wandb"  # logger [console, wandb]
    assert config["buffer"]["explorer_input"]["tasksets"][0]["path"] == "~/data/rlhf/gsm8k"
    steps = _convert("trainer.total_training_steps=10").config
    # 10 veRL steps of veRL's default 1024 prompts = 40 rft steps of 256
    assert steps["buffer"]["total_steps"] == 40 and "total_epochs" not in steps["buffer"]


def test_step_counts_are_scaled_to_rft_steps() -> None:
    """A veRL step trains on data.train_batch_size prompts in train/mini mini-batches and
    advances the learning-rate schedule once; rft's step is one mini-batch."""
    result = _convert("data.train_batch_size=512 actor_rollout_ref.actor.ppo_mini_batch_size=128 "
                      "trainer.test_freq=5 trainer.save_freq=10 trainer.total_training_steps=100 "
                      f"{A}optim.lr_warmup_steps=3")
    config = result.config
    assert config["synchronizer"]["sync_interval"] == 4
    assert config["explorer"]["eval_interval"] == 20
    assert config["trainer"]["save_interval"] == 40
    assert config["buffer"]["total_steps"] == config["trainer"]["total_steps"] == 400
    assert config["algorithm"]["optimizer"]["lr_warmup_steps"] == 12
    assert result.sources["explorer.eval_interval"] == (
        "trainer.test_freq × sync_interval = 5×4 (a veRL step is sync_interval rft steps)")
    unscaled = _convert("trainer.save_freq=-1 " + f"{A}optim.lr_warmup_steps=-1").config
    assert unscaled["trainer"]["save_interval"] == 0
    assert unscaled["algorithm"]["optimizer"]["lr_warmup_steps"] == -1


# ---------------------------------------------------------------------------------------
# GPUs, mode and trainer
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("nodes, gpus, tp, mode, engines, engine_tp", [
    (1, 1, None, "colocate", 1, 1),
    (1, 2, 1, "colocate", 1, 1),
    (1, 4, 2, "colocate", 1, 1),
    (1, 8, None, None, 1, 2),  # veRL's default TP 2
    (1, 8, 1, None, 2, 1),
    (2, 8, 2, None, 2, 2),
    (1, 8, 8, "colocate", 1, 1),  # one engine of TP 8 would take every GPU
])
def test_hybrid_engine_gpu_layout(nodes: int, gpus: int, tp: int | None, mode: str | None,
                                  engines: int, engine_tp: int,
                                  validate_converted: Callable[..., Any]) -> None:
    launch = (f"trainer.nnodes={nodes} trainer.n_gpus_per_node={gpus} "
              + (f"actor_rollout_ref.rollout.tensor_model_parallel_size={tp}" if tp else ""))
    base = BASE.replace("trainer.n_gpus_per_node=1 ", "")
    result = _convert(launch, base=base)
    config = result.config
    assert config.get("mode") == mode
    rollout = config["explorer"]["rollout_model"]
    assert (rollout["engine_num"], rollout["tensor_parallel_size"]) == (engines, engine_tp)
    total = nodes * gpus
    if mode == "colocate":
        assert config["synchronizer"]["sync_method"] == "memory"
        ranks = f"{total} trainer rank{'s' if total > 1 else ''}"
        assert any(n.startswith("GPUs: veRL's hybrid engine time-shares") and
                   f"rft's colocate mode does the same: {ranks} (trainer.ranks" in n
                   for n in result.report.notes), result.report.notes
    else:
        assert any(n.startswith(f"GPU split: explorer {engines * engine_tp} of "
                                f"{total} GPUs") for n in result.report.notes)
    (stage,) = validate_converted(result.yaml).stages
    assert stage.config.mode == (mode or "both")
    if mode == "colocate":  # the hybrid engine on N GPUs: N ranks, an engine in each
        assert stage.config.trainer.ranks == total


def test_the_trainer_is_rfts_native_one_when_nothing_needs_verl() -> None:
    result = _convert()
    assert result.config["trainer"]["trainer_type"] == "torch"
    assert ("trainer: torch — the launch needs nothing only veRL's workers provide"
            in result.report.notes)


def test_passthrough_settings_the_torch_trainer_ignores_are_listed() -> None:
    result = convert_text(BASE + f"{A}ppo_epochs=2 {A}fsdp_config.fsdp_size=4 "
                          "actor_rollout_ref.model.use_remove_padding=True "
                          "trainer.critic_warmup=3\n", trainer="torch")
    note = next(n for n in result.report.notes if n.startswith("trainer.trainer_config keeps"))
    assert f"{A}fsdp_config.fsdp_size" in note and "use_remove_padding" in note
    assert "trainer.critic_warmup" in note
    assert f"{A}ppo_epochs" not in note  # read by the torch trainer


# ---------------------------------------------------------------------------------------
# workflow and reward
# ---------------------------------------------------------------------------------------


def test_workflow_and_reward_follow_the_data_source(
        validate_converted: Callable[..., Any]) -> None:
    result = _convert(base=BASE.replace(
        "data.train_files=$HOME/data/gsm8k/train.parquet",
        "data.train_files=\"['$HOME/data/gsm8k/train.parquet','$HOME/data/math/train.parquet']\""))
    inputs = result.config["buffer"]["explorer_input"]
    assert inputs["default_workflow_type"] == "verl_workflow"
    gsm8k, math = inputs["tasksets"]
    assert gsm8k["default_reward_fn_type"] == "gsm8k_reward"
    assert "default_reward_fn_type" not in math  # veRL's own scorer, by the row's data_source
    assert gsm8k["format"] == {"prompt_type": "messages", "messages_key": "prompt",
                               "response_key": "reward_model"}
    assert inputs["eval_tasksets"][0]["rollout_args"] == {"temperature": 0.0}
    note = next(n for n in result.report.notes if n.startswith("reward:"))
    assert "gsm8k_reward" in note and "default_compute_score" in note
    (stage,) = validate_converted(result.yaml).stages
    tasksets = stage.config.buffer.explorer_input.tasksets
    assert [t.default_workflow_type for t in tasksets] == ["verl_workflow"] * 2


@pytest.mark.parametrize("prefix", ["custom_reward_function", "reward.custom_reward_function"])
def test_custom_reward_function_goes_to_the_workflow(
        prefix: str, validate_converted: Callable[..., Any]) -> None:
    result = _convert(f"{prefix}.path=/opt/reward.py {prefix}.name=score_it "
                      "data.prompt_key=question")
    taskset = result.config["buffer"]["explorer_input"]["tasksets"][0]
    assert taskset["workflow_args"] == {"custom_reward_path": "/opt/reward.py",
                                        "custom_reward_name": "score_it"}
    assert "default_reward_fn_type" not in taskset
    assert taskset["format"]["messages_key"] == "question"
    assert not [k for k in _reasons(result) if "custom_reward_function" in k]
    validate_converted(result.yaml)


def test_custom_reward_script(validate_converted: Callable[..., Any]) -> None:
    result = _script("custom_reward.sh")
    taskset = result.config["buffer"]["explorer_input"]["tasksets"][0]
    assert taskset["workflow_args"] == {
        "custom_reward_path": "${oc.env:HOME}/rewards/my_reward.py",
        "custom_reward_name": "compute_score", "reward_kwargs": {"format_score": 0.1}}
    validate_converted(result.yaml)


@pytest.mark.parametrize("key", ["reward_model.enable", "reward.reward_model.enable"])
def test_an_enabled_reward_model_is_reported(key: str) -> None:
    result = _convert(f"{key}=True reward_model.model.path=/rm")
    reasons = _reasons(result)
    assert "rft does not serve reward models for scoring" in reasons[key]
    assert "reward_model.model.path" in reasons
    assert "auxiliary_models" not in result.config.get("explorer", {})


def test_greedy_or_sampled_validation() -> None:
    sampled = _convert("actor_rollout_ref.rollout.val_kwargs.do_sample=True "
                       "actor_rollout_ref.rollout.val_kwargs.temperature=0.6 "
                       "actor_rollout_ref.rollout.val_kwargs.n=4")
    evaluation = sampled.config["buffer"]["explorer_input"]["eval_tasksets"][0]
    assert (evaluation["rollout_args"], evaluation["repeat_times"]) == ({"temperature": 0.6}, 4)


def test_table_rules_point_into_the_schema() -> None:
    hints = typing.get_type_hints(RftConfig)
    for rule in DIRECT:
        assert rule.rft[0].split(".")[0] in hints, rule
