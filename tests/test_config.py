"""Config loading, overrides, interpolation, derivations and stage expansion.

These tests exercise the validation machinery itself, so they register a small test
plugin (``StandInPlugin``) with ``test_*`` names instead of depending on the algorithm,
workflow, engine and trainer distributions; the real plugins are covered by the corpus
and by their own tests.
"""

from __future__ import annotations

import re
from dataclasses import FrozenInstanceError, dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from rft import hookimpl
from rft.algorithm import AlgorithmPreset
from rft.config import build_stages, deep_merge, load_config
from rft.config.convert import to_dataclass
from rft.config.load import load_plain
from rft.errors import ConfigError
from rft.plugins import PluginRegistry


@dataclass
class WorkflowArgs:
    turns: int = 1
    """Number of turns."""


class StandInWorkflow:
    Args = WorkflowArgs


class StandInPlugin:
    """Registers the names the configs below select (stand-ins for real plugins)."""

    @hookimpl
    def register_algorithms(self) -> dict[str, Any]:
        return {
            "test_algo": AlgorithmPreset(advantage_fn="test_adv", repeat_times=4,
                                         min_repeat_times=2, sample_strategy="test_sampler",
                                         kl_loss_fn="test_kl"),
            "test_pairs": AlgorithmPreset(fixed_repeat_times=2, train_only=True,
                                          sample_strategy="test_sampler"),
        }

    @hookimpl
    def register_advantage_fns(self) -> dict[str, Any]:
        return {"test_adv": object()}

    @hookimpl
    def register_policy_loss_fns(self) -> dict[str, Any]:
        return {"test_loss": object()}

    @hookimpl
    def register_kl_fns(self) -> dict[str, Any]:
        return {"test_kl": object()}

    @hookimpl
    def register_entropy_loss_fns(self) -> dict[str, Any]:
        return {"test_entropy": object()}

    @hookimpl
    def register_sample_strategies(self) -> dict[str, Any]:
        return {"test_sampler": object()}

    @hookimpl
    def register_workflows(self) -> dict[str, Any]:
        return {"test_workflow": StandInWorkflow, "test_eval_workflow": object()}

    @hookimpl
    def register_reward_fns(self) -> dict[str, Any]:
        return {"test_reward": object()}

    @hookimpl
    def register_engines(self) -> dict[str, Any]:
        return {"test_engine": object()}

    @hookimpl
    def register_trainers(self) -> dict[str, Any]:
        return {"test_trainer": object()}


@pytest.fixture(scope="module")
def registry() -> PluginRegistry:
    return PluginRegistry.create(extra_plugins=[StandInPlugin()])


@pytest.fixture
def base(tmp_path) -> dict[str, Any]:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"q": "1+1", "a": "2"}\n')
    return {
        "project": "proj",
        "name": "exp",
        "mode": "both",
        "checkpoint_root_dir": str(tmp_path / "ck"),
        "algorithm": {"algorithm_type": "test_algo", "policy_loss_fn": "test_loss",
                      "entropy_loss_fn": "test_entropy"},
        "model": {"model_path": str(tmp_path), "max_prompt_tokens": 100,
                  "max_response_tokens": 50},
        # a cluster of 8-GPU nodes (validation compares gpu_per_node with this machine
        # only when the run would start its own Ray cluster here)
        "cluster": {"node_num": 1, "gpu_per_node": 8, "ray_address": "10.0.0.1:6379"},
        "buffer": {
            "batch_size": 8,
            "explorer_input": {
                "default_workflow_type": "test_workflow",
                "default_eval_workflow_type": "test_eval_workflow",
                "default_reward_fn_type": "test_reward",
                "taskset": {"name": "train", "path": str(tasks)},
                "eval_tasksets": [{"name": "eval", "path": str(tasks)}],
            },
        },
        "explorer": {"rollout_model": {"engine_type": "test_engine", "engine_num": 2,
                                       "tensor_parallel_size": 2}},
        "synchronizer": {"sync_interval": 1},
        "trainer": {"trainer_type": "test_trainer"},
        "monitor": {"monitor_type": "jsonl"},
    }


def single(plain: dict[str, Any], registry: PluginRegistry):
    stage = build_stages(plain, registry).stages[0]
    return stage.config, stage.plan


def test_derivations(base, registry, tmp_path):
    config, plan = single(base, registry)
    assert config.algorithm.repeat_times == 4  # from the preset
    assert config.buffer.train_batch_size == 32  # batch_size × repeat_times
    assert config.model.max_model_len == 150  # prompt + response
    assert config.model.critic_model_path == config.model.model_path
    assert config.checkpoint_job_dir == str(tmp_path / "ck" / "proj" / "exp")
    assert config.ray_namespace == "proj/exp"
    taskset = config.buffer.explorer_input.taskset
    evalset = config.buffer.explorer_input.eval_tasksets[0]
    assert (taskset.repeat_times, evalset.repeat_times) == (4, 1)
    assert taskset.default_workflow_type == "test_workflow"
    assert evalset.default_workflow_type == "test_eval_workflow"
    assert evalset.default_reward_fn_type == "test_reward"
    assert config.trainer.total_steps is None
    assert (config.cluster.explorer_gpu_num, config.cluster.trainer_gpu_num) == (4, 4)
    assert config.buffer.trainer_input.experience_buffer.name == "experience_buffer"
    assert plan.loss.advantage.name == "test_adv"
    assert plan.loss.kl_loss.name == "test_kl"


def test_a_derived_config_is_frozen(base, registry):
    """Derivation returns new values: assigning to a field of the derived config (a
    section's, or a list item's) raises; a changed config is a new one
    (:func:`dataclasses.replace`)."""
    config, plan = single(base, registry)
    with pytest.raises(FrozenInstanceError):
        setattr(config, "mode", "train")  # noqa: B010 (what `config.mode = ...` does)
    with pytest.raises(FrozenInstanceError):
        setattr(config.cluster, "gpu_per_node", 4)  # noqa: B010
    with pytest.raises(FrozenInstanceError):
        setattr(config.buffer.explorer_input.eval_tasksets[0], "repeat_times", 2)  # noqa: B010
    assert (config.mode, config.cluster.gpu_per_node) == ("both", 8)
    assert plan.config is config


def test_user_values_win_over_the_preset(base, registry):
    base["algorithm"]["repeat_times"] = 3
    base["buffer"]["train_batch_size"] = 10
    config, _ = single(base, registry)
    assert config.algorithm.repeat_times == 3
    assert config.buffer.train_batch_size == 10


def test_fixed_repeat_times(base, registry):
    base["algorithm"]["algorithm_type"] = "test_pairs"
    config, _ = single(base, registry)
    assert config.algorithm.repeat_times == 2
    base["algorithm"]["repeat_times"] = 3  # the guide: "automatically set to 2" (DPO)
    loaded = build_stages(base, registry)
    assert loaded.stages[0].config.algorithm.repeat_times == 2
    assert loaded.warnings == ["algorithm.repeat_times: test_pairs uses repeat_times=2; 3 is "
                               "replaced"]


def test_response_tokens_derived_from_model_len(base, registry):
    base["model"] = {"model_path": base["model"]["model_path"], "max_model_len": 120,
                     "max_prompt_tokens": 100}
    config, _ = single(base, registry)
    assert config.model.max_response_tokens == 20


def test_workflow_args_are_checked_and_built(base, registry):
    base["buffer"]["explorer_input"]["taskset"]["workflow_args"] = {"turns": 3}
    _, plan = single(base, registry)
    built = plan.tasksets[0].workflow.args
    assert built == WorkflowArgs(turns=3)


def test_new_experiment_gets_a_timestamped_name(base, registry):
    base["continue_from_checkpoint"] = False
    config, _ = single(base, registry)
    assert re.fullmatch(r"exp_\d{8}-\d{6}", config.name)
    assert config.checkpoint_job_dir.endswith(config.name)


def test_gpu_split_errors(base, registry):
    base["explorer"]["rollout_model"]["engine_num"] = 4  # 4 × TP 2 = all 8 GPUs
    with pytest.raises(ConfigError, match="no GPU left for the trainer: cluster has 8, "
                                          "explorer uses 8, auxiliary models 0"):
        single(base, registry)
    base["mode"] = "explore"
    base["synchronizer"]["sync_method"] = "checkpoint"
    base["explorer"]["auxiliary_models"] = [{"model_path": "judge", "engine_num": 1}]
    with pytest.raises(ConfigError, match=r"explorer needs 8 GPUs \(\+1 auxiliary\) but the "
                                          r"cluster has 8"):
        single(base, registry)


def test_eval_interval_rounded_to_sync_interval(base, registry):
    base["synchronizer"]["sync_interval"] = 4
    base["explorer"]["eval_interval"] = 10
    loaded = build_stages(base, registry)
    assert loaded.stages[0].config.explorer.eval_interval == 8
    assert loaded.warnings == ["explorer.eval_interval: 10 is not a multiple of "
                               "synchronizer.sync_interval (4); using 8"]


def test_all_problems_are_reported_at_once(base, registry):
    base["buffer"]["batch_size"] = 0
    base["model"]["min_response_tokens"] = 99
    base["trainer"]["trainer_type"] = "nope"
    base["unknown_section"] = 1
    with pytest.raises(ConfigError) as caught:
        build_stages(base, registry)
    # conversion problems and every check's, in one pass
    assert caught.value.problems == [
        "unknown_section: unknown key at the top level; known keys: "
        + ", ".join(_top_level_keys()),
        "model.min_response_tokens: must be less than max_response_tokens (50), got 99",
        "buffer.batch_size: must be > 0, got 0",
        "trainer.trainer_type: unknown trainer 'nope'; registered: test_trainer, torch, verl",
    ]


def _top_level_keys() -> list[str]:
    from dataclasses import fields

    from rft.config.schema import RftConfig

    return [f.name for f in fields(RftConfig)]


def test_stages_inherit_and_override(base, registry):
    base["stages"] = [
        {"stage_name": "warmup", "algorithm": {"algorithm_type": "test_pairs"},
         "buffer": {"batch_size": 2}},
        {"stage_name": "rl"},
    ]
    loaded = build_stages(base, registry)
    warmup, rl = loaded.stages
    assert (warmup.name, rl.name) == ("warmup", "rl")
    assert warmup.config.name == "exp_warmup" and rl.config.name == "exp_rl"
    assert warmup.config.algorithm.algorithm_type == "test_pairs"
    assert warmup.config.buffer.batch_size == 2
    assert warmup.config.buffer.explorer_input.taskset.name == "train"  # inherited
    assert rl.config.algorithm.algorithm_type == "test_algo"
    assert rl.config.buffer.batch_size == 8


def test_sync_method_defaults_fit_each_stage_mode(base, registry):
    """The guide's stages flow (a `train` warm-up, then RFT) with no synchronizer written:
    each stage gets its mode's default; a stage may set its own synchronizer."""
    base["synchronizer"] = {"sync_interval": 1}
    base["stages"] = [{"stage_name": "warmup", "mode": "train",
                       "algorithm": {"algorithm_type": "test_pairs"}},
                      {"stage_name": "rl", "mode": "both"},
                      {"stage_name": "rl_memory", "mode": "both",
                       "synchronizer": {"sync_method": "memory", "sync_interval": 2}}]
    warmup, rl, rl_memory = build_stages(base, registry).stages
    assert warmup.config.synchronizer.sync_method == "checkpoint"
    assert rl.config.synchronizer.sync_method == "nccl"
    assert (rl_memory.config.synchronizer.sync_method,
            rl_memory.config.synchronizer.sync_interval) == ("memory", 2)


def test_a_sync_method_the_user_wrote_is_checked_against_the_mode(base, registry):
    base["mode"] = "train"
    base["synchronizer"] = {"sync_method": "nccl"}
    with pytest.raises(ConfigError) as caught:
        build_stages(base, registry)
    assert "synchronizer.sync_method: 'nccl' does not work in mode 'train'; use 'checkpoint'" \
        in caught.value.problems


def test_stage_problems_carry_the_stage_key(base, registry):
    base["stages"] = [{"stage_name": "a", "buffer": {"batch_size": -2}}]
    with pytest.raises(ConfigError) as caught:
        build_stages(base, registry)
    assert caught.value.problems == ["stages[0].buffer.batch_size: must be > 0, got -2"]


def test_yaml_file_with_interpolation_env_default_and_overrides(base, registry, tmp_path,
                                                                monkeypatch):
    base["model"]["critic_model_path"] = "${model.model_path}"
    base["project"] = "${oc.env:RFT_TEST_PROJECT,fallback}"
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(base))
    monkeypatch.delenv("RFT_TEST_PROJECT", raising=False)
    config = load_config(path, ["buffer.batch_size=2", "algorithm.optimizer.lr=1e-4"],
                         registry).stages[0].config
    assert config.project == "fallback"
    assert config.model.critic_model_path == base["model"]["model_path"]
    assert config.buffer.batch_size == 2
    assert config.algorithm.optimizer.lr == pytest.approx(1e-4)
    monkeypatch.setenv("RFT_TEST_PROJECT", "from_env")
    assert load_config(path, (), registry).config.project == "from_env"


def test_scientific_notation_without_dot_is_a_float(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("algorithm:\n  optimizer:\n    lr: 1e-6\n")
    assert load_plain(path)["algorithm"]["optimizer"]["lr"] == pytest.approx(1e-6)


def test_converter_keeps_defaults_for_invalid_values():
    from rft.config.schema import BufferConfig

    problems: list[str] = []
    built = to_dataclass(BufferConfig, {"batch_size": "x", "total_epochs": 3}, "buffer",
                         problems)
    assert problems == ["buffer.batch_size: expected an integer, got 'x'"]
    assert (built.batch_size, built.total_epochs) == (1, 3)


def test_deep_merge_does_not_touch_its_inputs():
    base = {"a": {"b": 1, "c": [1]}}
    merged = deep_merge(base, {"a": {"b": 2}})
    assert merged == {"a": {"b": 2, "c": [1]}} and base == {"a": {"b": 1, "c": [1]}}


def test_reference_configs_convert_without_problems():
    from rft.config.schema import RftConfig

    folder = Path(__file__).parent / "data" / "reference_configs"
    for path in sorted(folder.glob("*.yaml")):
        plain = yaml.safe_load(path.read_text())
        plain.pop("stages", None)
        problems: list[str] = []
        to_dataclass(RftConfig, plain, "", problems)
        assert problems == [], path.name


def test_overrides_follow_list_indices(base, registry, tmp_path):
    base["stages"] = [{"stage_name": "a"}, {"stage_name": "b", "buffer": {"batch_size": 2}}]
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(base))
    loaded = load_config(path, ["stages.1.buffer.batch_size=6", "algorithm.optimizer.lr=1e-4",
                                "buffer.explorer_input.eval_tasksets.0.repeat_times=3"],
                         registry)
    a, b = loaded.stages
    assert (a.config.buffer.batch_size, b.config.buffer.batch_size) == (8, 6)
    assert a.config.algorithm.optimizer.lr == pytest.approx(1e-4)
    assert a.config.buffer.explorer_input.eval_tasksets[0].repeat_times == 3
    with pytest.raises(ConfigError, match=r"override 'stages.5.buffer.batch_size=1': "):
        load_config(path, ["stages.5.buffer.batch_size=1"], registry)


def test_openai_endpoint_parsers_are_plugins(base, registry):
    from rft.builtin.reply_parsers import hermes_tool_calls, qwen3_reasoning
    from rft.engines.reply_parsing import reply_parser_of

    model = base["explorer"]["rollout_model"]
    model.update(enable_openai_api=True, enable_auto_tool_choice=True,
                 tool_call_parser="hermes", reasoning_parser="qwen3")
    _, plan = single(base, registry)
    parser = reply_parser_of(plan.rollout_model, True)
    assert parser.tool_calls is hermes_tool_calls and parser.reasoning is qwen3_reasoning
    assert parser.auto_tool_choice
    model.update(tool_call_parser="nope", reasoning_parser="r2")
    with pytest.raises(ConfigError) as caught:
        single(base, registry)
    assert caught.value.problems == [
        "explorer.rollout_model.tool_call_parser: unknown tool-call parser 'nope'; "
        "registered: hermes",
        "explorer.rollout_model.reasoning_parser: unknown reasoning parser 'r2'; "
        "registered: deepseek_r1, qwen3"]
    model.update(tool_call_parser=None, reasoning_parser=None)
    with pytest.raises(ConfigError, match=r"explorer.rollout_model.enable_auto_tool_choice: "
                                          r"needs tool_call_parser"):
        single(base, registry)
    model.update(enable_openai_api=False, enable_auto_tool_choice=False,
                 reasoning_parser="qwen3")
    assert build_stages(base, registry).warnings == [
        "explorer.rollout_model.reasoning_parser: has no effect without enable_openai_api "
        "(the parsers serve the OpenAI endpoint)"]


# ---- Trinity-RFT's config forms ------------------------------------------------------


def test_env_defaults_arrive_as_strings_and_are_read_as_the_field_type(base, registry,
                                                                     tmp_path, monkeypatch):
    """``${oc.env:NODE_NUM,2}`` resolves to the string '2' (and an env var is a string)."""
    base["cluster"] = {"node_num": "${oc.env:RFT_TEST_NODES,1}",
                       "gpu_per_node": "${oc.env:RFT_TEST_GPUS,8}",
                       "ray_address": base["cluster"]["ray_address"]}
    base["explorer"]["rollout_model"]["enable_history"] = "${oc.env:RFT_TEST_HISTORY,false}"
    monkeypatch.delenv("RFT_TEST_NODES", raising=False)
    monkeypatch.setenv("RFT_TEST_GPUS", "8")
    path = tmp_path / "env.yaml"
    path.write_text(yaml.safe_dump(base))
    config = load_config(path, registry=registry).stages[0].config
    assert (config.cluster.node_num, config.cluster.gpu_per_node) == (1, 8)
    assert config.explorer.rollout_model.enable_history is False
    base["cluster"]["node_num"] = "two"
    with pytest.raises(ConfigError) as caught:
        build_stages(base, registry)
    assert "cluster.node_num: expected an integer, got 'two'" in caught.value.problems


def test_data_selector_is_the_current_name_of_task_selector(base, registry):
    taskset = base["buffer"]["explorer_input"]["taskset"]
    taskset["data_selector"] = {"selector_type": "shuffle", "seed": 7}
    _, plan = single(base, registry)
    assert plan.tasksets[0].config.task_selector.seed == 7
    taskset["task_selector"] = {"selector_type": "shuffle", "seed": 8}
    with pytest.raises(ConfigError) as caught:
        single(base, registry)
    assert caught.value.problems == [
        "buffer.explorer_input.taskset.data_selector: set either data_selector or "
        "task_selector (its older name), not both"]


def test_an_eval_taskset_may_share_the_training_taskset_name(base, registry):
    base["buffer"]["explorer_input"]["eval_tasksets"][0]["name"] = "train"
    _, plan = single(base, registry)
    assert [t.config.name for t in plan.tasksets + plan.eval_tasksets] == ["train", "train"]
    base["buffer"]["explorer_input"]["tasksets"] = [{"name": "train", "path": "x"}]
    with pytest.raises(ConfigError) as caught:
        single(base, registry)
    assert "buffer.explorer_input.tasksets[0].name: 'train' is already used by " \
           "buffer.explorer_input.taskset" in caught.value.problems


def test_workflows_and_rewards_by_import_path(base, registry, tmp_path, monkeypatch):
    package = tmp_path / "my_examples"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "flows.py").write_text(
        "from rft.workflow import Workflow\n\n"
        "class EchoWorkflow(Workflow):\n    def run(self):\n        return []\n\n"
        "def exact(response, truth, args=None):\n    return {'accuracy': float(response == truth)}\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    explorer_input = base["buffer"]["explorer_input"]
    explorer_input["taskset"]["default_workflow_type"] = "my_examples.flows.EchoWorkflow"
    explorer_input["taskset"]["default_reward_fn_type"] = "my_examples.flows.exact"
    _, plan = single(base, registry)
    assert plan.tasksets[0].workflow.implementation.__name__ == "EchoWorkflow"
    assert plan.tasksets[0].reward.implementation.__name__ == "exact"
    explorer_input["taskset"]["default_workflow_type"] = "my_examples.flows.Missing"
    explorer_input["taskset"]["default_reward_fn_type"] = "my_examples.nope.exact"
    with pytest.raises(ConfigError) as caught:
        single(base, registry)
    assert caught.value.problems == [
        "buffer.explorer_input.taskset.default_workflow_type: cannot use "
        "'my_examples.flows.Missing' as a workflow: module 'my_examples.flows' has no "
        "attribute 'Missing'",
        "buffer.explorer_input.taskset.default_reward_fn_type: cannot use "
        "'my_examples.nope.exact' as a reward function: importing 'my_examples.nope' failed: "
        "ModuleNotFoundError: No module named 'my_examples.nope'"]


def test_an_empty_section_means_its_defaults_and_an_optional_null_stays_null() -> None:
    """YAML reads ``algorithm:`` followed only by comments as null (the guide's skeleton):
    a section, list or mapping that is null takes its defaults; an ``Optional`` field
    keeps its null meaning (``replay_buffer: null`` disables reuse); a null scalar is
    still a problem."""
    from rft.config.schema import ExperienceBufferConfig, RftConfig

    problems: list[str] = []
    config = to_dataclass(RftConfig, {"algorithm": None, "stages": None, "monitor": None},
                          "", problems)
    assert problems == []
    assert config.algorithm == RftConfig().algorithm and config.stages == []
    buffer = to_dataclass(ExperienceBufferConfig, {"replay_buffer": None}, "buf", problems)
    assert problems == [] and buffer.replay_buffer is None
    to_dataclass(ExperienceBufferConfig, {"capacity": None}, "buf", problems)
    assert problems == ["buf.capacity: expected an integer, got null"]


def test_verl_interpolations_in_trainer_config_resolve_within_the_block(tmp_path: Path) -> None:
    """The guide's veRL block refers to its own keys (``${actor_rollout_ref.actor.…}``);
    inline under ``trainer.trainer_config`` they resolve with the block as the root when
    the config's root has no such key; a key neither has is still one line."""
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"model": {"model_path": "m"}, "trainer": {"trainer_config": {
        "actor_rollout_ref": {"actor": {"use_dynamic_bsz": True},
                              "ref": {"log_prob_use_dynamic_bsz":
                                      "${actor_rollout_ref.actor.use_dynamic_bsz}",
                                      "path": "${model.model_path}"}}}}}), encoding="utf-8")
    plain = load_plain(path)
    ref = plain["trainer"]["trainer_config"]["actor_rollout_ref"]["ref"]
    assert ref == {"log_prob_use_dynamic_bsz": True, "path": "m"}
    path.write_text(yaml.safe_dump({"trainer": {"trainer_config": {"a": "${nowhere.key}"}}}),
                    encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_plain(path)
    assert caught.value.problems == [
        "trainer.trainer_config.a: ${nowhere.key} refers to a key that is not in the config"]
