"""``rft convert-verl``: veRL launch scripts → rft configs (rft-plugin-convert-verl).

Inputs are the veRL launches quoted by the reference docs (tests/data/verl_scripts beside
this file): the PPO and GRPO examples of the veRL alignment guide and the four veRL scripts
of the GSM8K alignment benchmark. The PPO / GRPO conversions are compared field by field
with the guide's hand-written rft configs (the repository's tests/data/reference_configs,
shared with the core's config tests), after both are converted onto the schema dataclasses
so that a key written explicitly equals its default. Every difference is asserted and
explained: where the guide's YAML disagrees with its own rules the converter follows the
rules.

The GSM8K conversions are checked for schema conversion (``to_dataclass`` without
problems, every emitted key in the schema) and for full validation once their dataset
files exist. The shell forms of real launch scripts are in test_shell_forms.py, the
mapping rules in test_mappings.py, the workflow and converted runs in
test_converted_runs.py.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import io
import os
import re
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml
from omegaconf import OmegaConf
from rft.cli import main as rft_main
from rft.config.convert import to_dataclass
from rft.config.schema import RftConfig
from rft_plugin_convert_verl import convert_text
from rft_plugin_convert_verl.emit import scalar
from rft_plugin_convert_verl.mapping import (
    DIRECT,
    NO_EQUIVALENT,
    PASSTHROUGH,
    VERL_DEFAULTS,
    markdown_table,
)
from rft_plugin_convert_verl.parse import (
    VerlConvertError,
    parse_launch,
    parse_override,
    parse_value,
)

REPO = Path(__file__).resolve().parents[4]
SCRIPTS = Path(__file__).parent / "data" / "verl_scripts"
REFERENCES = REPO / "tests" / "data" / "reference_configs"
PPO_SCRIPT = SCRIPTS / "ppo_run_qwen2-7b_rm.sh"
GRPO_SCRIPT = SCRIPTS / "grpo_run_deepseek7b_llm_seq_balance.sh"
GSM8K_SCRIPTS = sorted(SCRIPTS.glob("gsm8k_alignment_experiment*.sh"))
DOC = REPO / "docs" / "verl.md"


# ---------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------


def _flatten(value: Any, prefix: str = "", out: dict[str, Any] | None = None) -> dict[str, Any]:
    out = {} if out is None else out
    if isinstance(value, dict):
        for key, item in value.items():
            _flatten(item, f"{prefix}.{key}" if prefix else str(key), out)
    elif isinstance(value, list) and value and all(isinstance(i, dict) for i in value):
        for i, item in enumerate(value):
            _flatten(item, f"{prefix}[{i}]", out)
    else:
        out[prefix] = value
    return out


def _schema_view(plain: dict[str, Any]) -> dict[str, Any]:
    """Every field of the config (defaults filled in), flattened to dotted keys."""
    problems: list[str] = []
    config = to_dataclass(RftConfig, plain, "", problems)
    assert problems == []
    return _flatten(dataclasses.asdict(config))


def _plain(yaml_text: str) -> dict[str, Any]:
    """Read YAML as rft does (OmegaConf: ``1e-6`` is a float), interpolations unresolved."""
    return OmegaConf.to_container(OmegaConf.create(yaml_text), resolve=False)  # type: ignore


def _differences(script: Path, reference: Path) -> dict[str, tuple[Any, Any]]:
    """``{key: (guide, converted)}`` for every schema field where they differ."""
    ours = _schema_view(_plain(convert_text(script.read_text()).yaml))
    guide = _schema_view(_plain(reference.read_text()))
    missing = "<absent>"
    return {key: (guide.get(key, missing), ours.get(key, missing))
            for key in sorted(set(ours) | set(guide))
            if ours.get(key, missing) != guide.get(key, missing)}


def _unknown_schema_keys(value: Any, cls: Any, path: str = "") -> list[str]:
    """Dotted keys of ``value`` that the schema class ``cls`` has no field for."""
    origin = typing.get_origin(cls)
    if origin in (typing.Union, __import__("types").UnionType):
        inner = [a for a in typing.get_args(cls) if a is not type(None)]
        return _unknown_schema_keys(value, inner[0], path) if len(inner) == 1 else []
    if origin is list and isinstance(value, list):
        (item,) = typing.get_args(cls)
        return [k for i, v in enumerate(value) for k in _unknown_schema_keys(v, item,
                                                                             f"{path}[{i}]")]
    if not dataclasses.is_dataclass(cls) or not isinstance(value, dict):
        return []  # a free-form mapping (*_args, trainer_config) or a scalar
    hints = typing.get_type_hints(cls)
    unknown = []
    for key, item in value.items():
        child = f"{path}.{key}" if path else key
        if key not in hints:
            unknown.append(child)
        else:
            unknown.extend(_unknown_schema_keys(item, hints[key], child))
    return unknown


def _run_cli(args: list[str], capsys: pytest.CaptureFixture[str],
             stdin: str | None = None, monkeypatch: pytest.MonkeyPatch | None = None
             ) -> tuple[int, str, str]:
    if stdin is not None:
        assert monkeypatch is not None
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    code = rft_main(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# ---------------------------------------------------------------------------------------
# the guide's worked examples, field by field
# ---------------------------------------------------------------------------------------

GUIDE_PLACEHOLDER = ("answer", "response")
"""The guide writes ``response_key: answer  # Check the dataset format``: a placeholder, not
a conversion of any veRL key (veRL's scripts set no data.response_key). The converter
leaves rft's default."""

SYNC_OFFSET = (1, 0)
"""The guide's YAMLs say ``sync_offset: 1`` while its note says veRL's setup is matched
with ``sync_offset=0``; the converter follows the rule."""

VERL_LOSS_DEFAULTS = {
    "algorithm.policy_loss_fn_args.clip_range": ("<absent>", 0.2),
    "algorithm.policy_loss_fn_args.clip_range_low": ("<absent>", 0.2),
    "algorithm.policy_loss_fn_args.clip_range_high": ("<absent>", 0.2),
    "algorithm.policy_loss_fn_args.clip_ratio_c": ("<absent>", 3.0),
}
"""veRL's clip ratios are written explicitly (the guide leaves rft's preset defaults,
which are the same numbers)."""


STEP_UNITS = {"explorer.eval_interval": (5, 20), "trainer.save_interval": (20, 80)}
"""veRL's ``test_freq=5`` / ``save_freq=20`` count veRL steps of ``data.train_batch_size``
prompts, each ``sync_interval`` (1024/256 = 4) rft steps of ``ppo_mini_batch_size``
prompts; the guide copies the numbers, the converter scales them."""


def _dataset_layout(kinds: dict[str, int]) -> dict[str, tuple[Any, Any]]:
    """veRL's dataset layout, which the guide leaves to rft's defaults: chat messages in
    ``prompt``, the answer in ``reward_model.ground_truth`` (the guide's ``response_key:
    answer`` is a placeholder, "check the dataset format")."""
    out: dict[str, tuple[Any, Any]] = {}
    for kind, count in kinds.items():
        for i in range(count):
            prefix = f"buffer.explorer_input.{kind}[{i}]"
            out[f"{prefix}.format.messages_key"] = ("message", "prompt")
            out[f"{prefix}.format.response_key"] = ("answer", "reward_model")
    return out


def _gsm8k_reward(kinds: dict[str, tuple[int, ...]]) -> dict[str, tuple[Any, Any]]:
    """The tasksets of GSM8K files get rft's port of veRL's GSM8K scorer (the guide names
    no reward; veRL picks it by data_source)."""
    return {f"buffer.explorer_input.{kind}[{i}].default_reward_fn_type": (None, "gsm8k_reward")
            for kind, indices in kinds.items() for i in indices}


def _verl_validation_and_shuffle(train: int, evals: int) -> dict[str, tuple[Any, Any]]:
    """veRL's defaults the guide leaves out: data.shuffle=True (the scripts do not set it)
    and greedy validation (val_kwargs.do_sample=False)."""
    out: dict[str, tuple[Any, Any]] = {
        f"buffer.explorer_input.tasksets[{i}].task_selector.selector_type":
            ("sequential", "shuffle") for i in range(train)}
    out.update({f"buffer.explorer_input.eval_tasksets[{i}].rollout_args.temperature":
                (None, 0.0) for i in range(evals)})
    return out


def test_ppo_example_equals_the_guide_except_its_inconsistencies() -> None:
    differences = _differences(PPO_SCRIPT, REFERENCES / "verl_alignment_ppo_example.yaml")
    # The guide serves the reward model as an auxiliary model that no workflow calls; the
    # converter reports it instead (rft does not score with a reward model).
    auxiliary = {k: v for k, v in differences.items() if k.startswith("explorer.auxiliary")}
    assert auxiliary["explorer.auxiliary_models"] == ("<absent>", [])
    assert all(ours == "<absent>" for key, (_, ours) in auxiliary.items()
               if key.startswith("explorer.auxiliary_models[0]"))
    assert {k: v for k, v in differences.items() if k not in auxiliary} == {
        **VERL_LOSS_DEFAULTS,
        **_dataset_layout({"tasksets": 2, "eval_tasksets": 2}),
        **_gsm8k_reward({"tasksets": (0,), "eval_tasksets": (0,)}),
        **_verl_validation_and_shuffle(2, 2),
        "buffer.explorer_input.default_workflow_type": (None, "verl_workflow"),
        # veRL's default entropy_coeff 0, written explicitly
        "algorithm.entropy_loss_fn_args.entropy_coef": ("<absent>", 0),
        # The guide gives the math taskset (only) `rollout_args.temperature: 1.0`, with no
        # veRL source; the converted config leaves it unset, i.e. model.temperature = 1.0.
        "buffer.explorer_input.tasksets[1].rollout_args.temperature": (1.0, None),
        "synchronizer.sync_offset": SYNC_OFFSET,
        **STEP_UNITS,
        # the script does not set use_dynamic_bsz: veRL's default is false, rft's true
        "trainer.use_dynamic_bsz": (True, False),
    }


def test_grpo_example_equals_the_guide_except_its_inconsistencies() -> None:
    assert _differences(GRPO_SCRIPT, REFERENCES / "verl_alignment_grpo_example.yaml") == {
        **VERL_LOSS_DEFAULTS,
        **_dataset_layout({"tasksets": 1, "eval_tasksets": 1}),
        **_gsm8k_reward({"tasksets": (0,), "eval_tasksets": (0,)}),
        **_verl_validation_and_shuffle(1, 1),
        "buffer.explorer_input.default_workflow_type": (None, "verl_workflow"),
        "synchronizer.sync_offset": SYNC_OFFSET,
        **STEP_UNITS,
    }


def test_guide_examples_gpu_split_and_monitor_follow_the_rules() -> None:
    """The engine counts the guide chose by hand for 8 GPUs (PPO: 2 rollout engines of TP 1;
    GRPO: 1 engine of TP 2) are what the quarter rule gives, and ``trainer.logger=
    ["console","wandb"]`` gives ``wandb`` (console is always on). The PPO example's reward
    model is reported, not served."""
    ppo_result = convert_text(PPO_SCRIPT.read_text())
    ppo, grpo = ppo_result.config, convert_text(GRPO_SCRIPT.read_text()).config
    assert ppo["explorer"]["rollout_model"]["engine_num"] == 2
    assert "auxiliary_models" not in ppo["explorer"] and "mode" not in ppo
    reasons = {entry.key: entry.reason for entry in ppo_result.report.not_converted}
    assert "rewards with this reward model's score" in reasons["reward_model.enable"]
    assert grpo["explorer"]["rollout_model"]["engine_num"] == 1
    assert grpo["explorer"]["rollout_model"]["tensor_parallel_size"] == 2
    assert ppo["monitor"] == grpo["monitor"] == {"monitor_type": "wandb"}


# ---------------------------------------------------------------------------------------
# the GSM8K benchmark scripts
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("script", GSM8K_SCRIPTS, ids=lambda p: p.stem)
def test_gsm8k_script_converts_onto_the_schema(script: Path) -> None:
    result = convert_text(script.read_text(), script.name)
    plain = _plain(result.yaml)
    assert _unknown_schema_keys(plain, RftConfig) == []
    problems: list[str] = []
    to_dataclass(RftConfig, plain, "", problems)
    assert problems == []
    assert result.report.not_converted == []  # every override of these scripts has a home


@pytest.mark.parametrize("script", GSM8K_SCRIPTS, ids=lambda p: p.stem)
def test_gsm8k_script_validates_once_its_dataset_exists(
        script: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        cluster_elsewhere: str) -> None:
    from rft.config import load_config

    monkeypatch.setenv("HOME", str(tmp_path))
    for split in ("train", "test"):  # $HOME/data/gsm8k/{train,test}.parquet
        (tmp_path / "data" / "gsm8k").mkdir(parents=True, exist_ok=True)
        (tmp_path / "data" / "gsm8k" / f"{split}.parquet").touch()
    converted = tmp_path / "converted.yaml"
    converted.write_text(convert_text(script.read_text()).yaml)
    (stage,) = load_config(converted, [cluster_elsewhere]).stages
    config = stage.config
    assert (config.trainer.trainer_type, config.mode) == ("torch", "both")
    assert config.buffer.explorer_input.tasksets[0].default_workflow_type == "verl_workflow"
    assert config.buffer.explorer_input.tasksets[0].default_reward_fn_type == "gsm8k_reward"


@pytest.mark.parametrize("script", GSM8K_SCRIPTS, ids=lambda p: p.stem)
def test_gsm8k_training_settings_match_the_benchmarks_trinity_config(script: Path) -> None:
    """The benchmark's hand-written Trinity configs were tuned separately (engine counts,
    vLLM flags, an 8-GPU cluster for a 6-GPU veRL run, the raw GSM8K columns); the settings
    that drive the training maths must agree with the conversion."""
    number = script.stem[-1]
    ours = _schema_view(_plain(convert_text(script.read_text()).yaml))
    theirs = _schema_view(_plain(
        (REFERENCES / f"gsm8k_alignment_experiment{number}.yaml").read_text()))
    same = ["project", "algorithm.algorithm_type", "algorithm.repeat_times",
            "algorithm.optimizer.lr", "algorithm.kl_loss_fn", "algorithm.kl_loss_fn_args.kl_coef",
            "algorithm.policy_loss_fn_args.clip_range_low",
            "algorithm.policy_loss_fn_args.clip_range_high",
            "algorithm.entropy_loss_fn_args.entropy_coef", "model.model_path",
            "model.max_prompt_tokens", "model.max_response_tokens", "cluster.node_num",
            "buffer.batch_size", "buffer.total_epochs", "explorer.eval_interval",
            "explorer.rollout_model.tensor_parallel_size", "synchronizer.sync_style",
            "synchronizer.sync_interval", "trainer.use_dynamic_bsz",
            "trainer.max_token_len_per_gpu", "monitor.monitor_type"]
    assert {k: ours[k] for k in same} == {k: theirs[k] for k in same}
    # data.shuffle=false: the benchmark reads GSM8K in file order, as does the conversion
    assert ours["buffer.explorer_input.tasksets[0].task_selector.selector_type"] == \
        theirs["buffer.explorer_input.taskset.task_selector.selector_type"] == "sequential"
    # the benchmark ran Trinity's veRL trainer; rft has none yet: its native trainer
    assert (theirs["trainer.trainer_type"], ours["trainer.trainer_type"]) == ("verl", "torch")


# ---------------------------------------------------------------------------------------
# output format: comments naming sources, round trip
# ---------------------------------------------------------------------------------------


def test_each_key_carries_a_comment_naming_its_verl_source() -> None:
    text = convert_text(PPO_SCRIPT.read_text()).yaml
    lines = text.splitlines()
    for line in ("  batch_size: 256  # actor_rollout_ref.actor.ppo_mini_batch_size",
                 "  critic_model_path: ${oc.env:HOME}/models/Qwen2-7B-Instruct  "
                 "# critic.model.path",
                 "  advantage_fn: ppo  # algorithm.adv_estimator=gae",
                 "  kl_penalty_fn: none  # algorithm.use_kl_in_reward=False",
                 "  sync_interval: 4  # data.train_batch_size / "
                 "actor_rollout_ref.actor.ppo_mini_batch_size = 1024/256",
                 "      critic_warmup: 0  # trainer.critic_warmup",
                 "    log_prob_micro_batch_size_per_gpu: 16  # "
                 "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu"):
        assert any(candidate.endswith(line.strip()) for candidate in lines), line
    body = [ln for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]
    scalar_lines = [ln for ln in body if not ln.rstrip().endswith(":")]
    assert scalar_lines and all("  # " in ln for ln in scalar_lines)


def test_every_source_comment_names_a_key_of_the_launch_or_a_verl_default() -> None:
    result = convert_text(PPO_SCRIPT.read_text())
    launch_keys = {o.key for o in result.launch.overrides}
    for path, comment in result.sources.items():
        named = set(re.findall(r"[a-z_]+(?:\.[a-z_]+)+", comment))
        assert named & launch_keys or "veRL" in comment, (path, comment)


def test_yaml_reads_back_as_the_converted_data() -> None:
    for script in [PPO_SCRIPT, GRPO_SCRIPT, *GSM8K_SCRIPTS]:
        result = convert_text(script.read_text())
        assert yaml.safe_load(result.yaml) == result.config
        assert _plain(result.yaml) == result.config


@pytest.mark.parametrize("value", ["plain", "1e-6", "true", "null", "a: b", "x #y", "'q'",
                                   "", "[a]", "~", "-1", "${oc.env:HOME}/x", "it's", "a\nb"])
def test_scalars_keep_their_type(value: str) -> None:
    assert yaml.safe_load(f"k: {scalar(value)}") == {"k": value}
    for number in (1e-6, 0.1, 3, -2.5e10, True, None):
        assert yaml.safe_load(f"k: {scalar(number)}") == {"k": number}


# ---------------------------------------------------------------------------------------
# the command
# ---------------------------------------------------------------------------------------


def test_command_writes_output_file_and_report(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "ppo.yaml"
    code, stdout, stderr = _run_cli(["convert-verl", str(PPO_SCRIPT), "-o", str(out)], capsys)
    assert code == 0 and stdout == ""
    assert out.read_text() == convert_text(PPO_SCRIPT.read_text(), str(PPO_SCRIPT)).yaml
    assert "data.truncation=error (line 24)" in stderr
    assert "reward_model.micro_batch_size_per_gpu=32" in stderr


def test_stdin_input_gives_the_same_config(capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    code, stdout, _ = _run_cli(["convert-verl", "-"], capsys, GRPO_SCRIPT.read_text(),
                               monkeypatch)
    assert code == 0
    assert "in <stdin>." in stdout.splitlines()[0]
    assert _plain(stdout) == convert_text(GRPO_SCRIPT.read_text()).config


def test_unknown_keys_are_reported_on_stderr_and_in_the_header_not_dropped(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    script = ("python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo \\\n"
              "  actor_rollout_ref.rollout.n=4 data.train_batch_size=32 \\\n"
              "  actor_rollout_ref.actor.ppo_mini_batch_size=32 \\\n"
              "  my_extension.level=3 \\\n"
              "  actor_rollout_ref.rollout.free_cache_engine=False \\\n"
              "  trainer.balance_batch=False algorithm.gamma=0.99 \\\n"
              "  reward_model.model.path=/rm ~trainer.logger\n")
    result = convert_text(script)
    reported = result.report.keys()
    for key in ("my_extension.level", "actor_rollout_ref.rollout.free_cache_engine",
                "trainer.balance_batch", "algorithm.gamma", "reward_model.model.path",
                "~trainer.logger"):
        assert key in reported
        assert any(key in line for line in result.yaml.splitlines() if line.startswith("#"))
    assert "unknown veRL key" in result.yaml
    assert "not used by adv_estimator=grpo" in result.yaml  # gamma: GRPO takes no gamma
    code, _, stderr = _run_cli(["convert-verl", "-"], capsys, script, monkeypatch)
    assert code == 0 and "my_extension.level=3 (line 4): unknown veRL key" in stderr


@pytest.mark.parametrize("text, message", [
    ("python3 -m verl.trainer.main_ppo data.train_batch_size\n",
     "rft: line 1: override 'data.train_batch_size' has no '=value'"),
    ("python3 -m verl.trainer.main_ppo \\\n  trainer.logger='[console,wandb'\n",
     "rft: line 2: override 'trainer.logger=[console,wandb': missing ']'"),
    ("python3 -m verl.trainer.main_ppo trainer.nnodes=1,2\n",
     "rft: line 1: override 'trainer.nnodes=1,2': a comma-separated value is a Hydra sweep"),
    ("python3 -m verl.trainer.main_ppo data.train_batch_size=1000\n",
     "rft: data.train_batch_size=1000 is not a multiple of "
     "actor_rollout_ref.actor.ppo_mini_batch_size=256"),
    ("data.max_prompt_length=512\npython3 train.py\n",
     "rft: line 2: 'python3' is not a Hydra override"),
    ("data.max_prompt_length=$(cat n)\n",
     "rft: line 1: command substitution '$(...)' in an override list cannot be evaluated"),
    ("python3 -m verl.trainer.main_ppo data.max_prompt_length=long\n",
     "rft: converted config: model.max_prompt_tokens (from data.max_prompt_length): "
     "expected an integer, got 'long'"),
    ("python3 -m verl.trainer.main_ppo 'data.x=1\n",
     "rft: <stdin>: the script stopped (exit status 2) before it launched veRL: launch.sh: "
     "line 1: unexpected EOF while looking for matching"),
    ("data.x='1\n", "rft: line 1: unclosed single quote"),
])
def test_malformed_input_exits_2_with_one_line_naming_the_culprit(
        text: str, message: str, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    code, stdout, stderr = _run_cli(["convert-verl", "-"], capsys, text, monkeypatch)
    assert (code, stdout) == (2, "")
    assert len(stderr.splitlines()) == 1 and stderr.startswith(message), stderr


def test_unreadable_input_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.sh"
    assert _run_cli(["convert-verl", str(missing)], capsys) == (
        2, "", f"rft: {missing}: no such file\n")
    assert _run_cli(["convert-verl", str(tmp_path)], capsys)[2] == (
        f"rft: {tmp_path}: is a directory, not a launch script\n")
    binary = tmp_path / "bin.sh"
    binary.write_bytes(b"\xff\xfe\x00")
    assert _run_cli(["convert-verl", str(binary)], capsys)[2] == (
        f"rft: {binary}: not a UTF-8 text file\n")


def test_standalone_entry_point(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from rft_plugin_convert_verl.cli import main

    assert main([str(GRPO_SCRIPT), "-o", str(tmp_path / "g.yaml"), "-q"]) == 0
    assert capsys.readouterr().err == ""
    assert main([str(tmp_path / "missing")]) == 2


# ---------------------------------------------------------------------------------------
# reading launches
# ---------------------------------------------------------------------------------------


def test_shell_variables_quoting_and_noise() -> None:
    """The script is run by bash (commands stubbed): variables, quotes, exports, an
    environment prefix, background downloads, pipes and ``$@`` as bash reads them; ``$HOME``
    and variables the script never sets become OmegaConf interpolations."""
    script = r"""#!/bin/bash
set -x  # trace
export MODEL=Qwen/Qwen2.5-0.5B-Instruct
DATA=${DATA_ROOT:-/data}/gsm8k
files="['$DATA/train.parquet', \"$DATA/extra.jsonl\"]"
huggingface-cli download $MODEL &
wait
# the launch
PYTHONUNBUFFERED=1 python -m verl.trainer.main_ppo \
    actor_rollout_ref.model.path="$MODEL" \
    data.train_files="$files" \
    data.val_files=~/eval/test.parquet \
    trainer.project_name='my proj' \
    trainer.experiment_name=${USER}_run \
    +actor_rollout_ref.actor.fsdp_config.model_dtype=bf16 \
    ++trainer.logger='["console","tensorboard"]' \
    data.train_batch_size=64 actor_rollout_ref.actor.ppo_mini_batch_size=32 \
    "$@" 2>&1 | tee log.txt
echo done
"""
    launch = parse_launch(script)
    assert launch.kind == "script" and launch.entry_point == "verl.trainer.main_ppo"
    assert launch.launch_line == 9
    values = {o.key: o.value for o in launch.overrides}
    assert values["actor_rollout_ref.model.path"] == "Qwen/Qwen2.5-0.5B-Instruct"
    # DATA_ROOT is unset during conversion: the script's default applies (and is noted)
    assert values["data.train_files"] == ["/data/gsm8k/train.parquet",
                                          "/data/gsm8k/extra.jsonl"]
    # bash does not expand "~" after "key=" (not an assignment); rft expands it as veRL does
    assert values["data.val_files"] == "~/eval/test.parquet"
    assert values["trainer.project_name"] == "my proj"
    assert values["trainer.experiment_name"] == "${oc.env:USER}_run"
    assert values["actor_rollout_ref.actor.fsdp_config.model_dtype"] == "bf16"
    assert values["trainer.logger"] == ["console", "tensorboard"]
    assert [o.op for o in launch.overrides if o.op] == ["+", "++"]
    assert [o.line for o in launch.overrides][:4] == [10, 11, 12, 13]
    assert launch.env_refs == ["USER"]
    assert launch.ignored == [(18, "$@", "the script's own arguments: none were given during "
                               "conversion (give rft overrides to `rft run` instead)")]
    assert any("DATA_ROOT" in note for note in launch.notes)
    assert any("huggingface-cli" in note for note in launch.notes)
    result = convert_text(script)
    config = result.config
    tasksets = config["buffer"]["explorer_input"]["tasksets"]
    assert [(t["name"], t["path"], t["split"]) for t in tasksets] == [
        ("gsm8k", "/data/gsm8k", "train"), ("extra", "/data/gsm8k/extra.jsonl", "train")]
    assert config["buffer"]["explorer_input"]["eval_tasksets"][0]["name"] == "eval_eval"
    assert config["project"] == "my proj" and config["monitor"]["monitor_type"] == "tensorboard"
    assert config["trainer"]["trainer_config"]["actor_rollout_ref"]["actor"] == {
        "fsdp_config": {"model_dtype": "bf16"}}
    assert "# Environment variables read when rft loads this file: USER." in result.yaml


@pytest.mark.parametrize("layout", ["lines", "one line"])
def test_a_bare_list_of_overrides_converts_like_a_script(layout: str) -> None:
    overrides = ["algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=8",
                 "data.train_batch_size=1024", "actor_rollout_ref.actor.ppo_mini_batch_size=256",
                 "trainer.logger=['console','wandb']", "data.train_files=/d/gsm8k/train.parquet"]
    text = "\n".join(overrides) if layout == "lines" else " ".join(overrides)
    script = "python3 -m verl.trainer.main_ppo " + " ".join(overrides)
    listed = convert_text(text)
    assert listed.launch.kind == "overrides"
    assert listed.config == convert_text(script).config
    assert "from a list of veRL overrides" in listed.yaml.splitlines()[0]


def test_hydra_flags_read_veRLs_shipped_config_and_report_the_launchs_own() -> None:
    shipped = convert_text("python3 -m verl.trainer.main_ppo --config-name "
                           "ppo_megatron_trainer --config-path=cfg data.max_prompt_length=64\n")
    assert [o.key for o in shipped.launch.overrides] == ["data.max_prompt_length"]
    assert (shipped.launch.config_name, shipped.launch.config_path) == (
        "ppo_megatron_trainer", "cfg")
    assert not any(key.startswith("--config") for key in shipped.report.keys())
    own = convert_text("python3 -m verl.trainer.main_ppo --config-path=\"$(pwd)/config\" "
                       "--config-name='gsm8k_multiturn_grpo' data.max_prompt_length=64\n")
    assert own.launch.config_path == "${oc.env:PWD}/config"
    assert any("'gsm8k_multiturn_grpo' in --config-path ${oc.env:PWD}/config is not shipped "
               "with veRL and was not read" in note for note in own.report.notes)


def test_several_launches_convert_the_first_and_say_how_the_others_differ() -> None:
    result = convert_text("python3 -m verl.trainer.main_ppo data.seed=1 trainer.total_epochs=2\n"
                          "python3 -m verl.trainer.main_ppo data.seed=2 trainer.total_epochs=2\n")
    assert result.config["buffer"]["total_epochs"] == 2
    assert result.launch.launch_line == 1
    assert any("launches veRL 2 times with 2 different argument lists; the first launch is "
               "converted (the others differ in data.seed)" in n for n in result.report.notes)


@pytest.mark.parametrize("text, value", [
    ("1024", 1024), ("1e-6", 1e-6), ("-0.5", -0.5), ("True", True), ("false", False),
    ("null", None), ("token-mean", "token-mean"), ("'quoted, with comma'", "quoted, with comma"),
    ("[a, 'b c', 3]", ["a", "b c", 3]), ("[]", []), ("[[1,2],[3]]", [[1, 2], [3]]),
    ("{lr: 1e-5, betas: [0.9, 0.95]}", {"lr": 1e-5, "betas": [0.9, 0.95]}),
    ("${oc.env:HOME}/x", "${oc.env:HOME}/x"), ("['${oc.env:A,b}/x']", ["${oc.env:A,b}/x"]),
    ("", ""),
])
def test_hydra_values(text: str, value: Any) -> None:
    assert parse_value(text) == value


def test_override_forms() -> None:
    assert parse_override("+a.b=1").op == "+"
    assert parse_override("~a.b").value is None
    with pytest.raises(VerlConvertError, match="not a Hydra override"):
        parse_override("=3")
    with pytest.raises(VerlConvertError, match="Hydra functions"):
        parse_override("a.b=choice(1,2)")


# ---------------------------------------------------------------------------------------
# rules
# ---------------------------------------------------------------------------------------


def test_batch_size_rules() -> None:
    config = convert_text("python3 -m verl.trainer.main_ppo actor_rollout_ref.rollout.n=4 "
                          "data.train_batch_size=512 "
                          "actor_rollout_ref.actor.ppo_mini_batch_size=64").config
    assert config["buffer"]["batch_size"] == 64
    assert config["buffer"]["train_batch_size"] == 4 * 64
    assert config["synchronizer"] == {"sync_style": "fixed", "sync_offset": 0,
                                      "sync_interval": 512 // 64}


def test_verl_defaults_fill_what_the_launch_leaves_out() -> None:
    result = convert_text("python3 -m verl.trainer.main_ppo data.max_prompt_length=256\n")
    config = result.config
    assert config["algorithm"]["algorithm_type"] == "ppo"  # adv_estimator=gae
    assert (config["algorithm"]["kl_penalty_fn"], config["algorithm"]["kl_loss_fn"]) == (
        "none", "none")
    assert (config["buffer"]["batch_size"], config["synchronizer"]["sync_interval"]) == (256, 4)
    assert result.sources["buffer.batch_size"] == (
        "actor_rollout_ref.actor.ppo_mini_batch_size (veRL default 256)")


def test_kl_switches_and_val_kwargs() -> None:
    config = convert_text(
        "python3 -m verl.trainer.main_ppo algorithm.adv_estimator=reinforce_plus_plus "
        "algorithm.gamma=0.99 algorithm.use_kl_in_reward=True algorithm.kl_penalty=mse "
        "actor_rollout_ref.actor.use_kl_loss=True data.val_files=[/d/a/test.parquet] "
        "actor_rollout_ref.rollout.val_kwargs.do_sample=False "
        "actor_rollout_ref.rollout.val_kwargs.n=4 trainer.resume_mode=disable "
        "trainer.save_freq=-1 actor_rollout_ref.actor.ppo_epochs=2\n").config
    algorithm = config["algorithm"]
    assert (algorithm["algorithm_type"], algorithm["advantage_fn"]) == (
        "reinforceplusplus", "reinforceplusplus")
    assert algorithm["advantage_fn_args"] == {"gamma": 0.99}
    assert (algorithm["kl_penalty_fn"], algorithm["kl_loss_fn"]) == ("mse", "low_var_kl")
    evaluation = config["buffer"]["explorer_input"]["eval_tasksets"][0]
    assert (evaluation["rollout_args"], evaluation["repeat_times"]) == (
        {"temperature": 0.0}, 4)
    assert config["continue_from_checkpoint"] is False
    assert config["trainer"]["save_interval"] == 0
    assert config["trainer"]["trainer_config"]["actor_rollout_ref"]["actor"] == {"ppo_epochs": 2}


def test_inactive_settings_are_reported() -> None:
    report = convert_text(
        "python3 -m verl.trainer.main_ppo actor_rollout_ref.actor.use_kl_loss=False "
        "actor_rollout_ref.actor.kl_loss_type=k3 trainer.test_freq=-1 "
        "trainer.logger=[console,wandb,tensorboard] trainer.resume_mode=resume_path\n").report
    reasons = {entry.key: entry.reason for entry in report.not_converted}
    assert reasons["actor_rollout_ref.actor.kl_loss_type"].startswith("inactive")
    assert "disables periodic validation" in reasons["trainer.test_freq"]
    assert "wandb was kept" in reasons["trainer.logger"]
    assert "latest checkpoint" in reasons["trainer.resume_mode"]


def test_mapping_rules_have_documented_targets_in_the_schema() -> None:
    """Every rft key a table rule writes exists in the schema."""
    for rule in DIRECT:
        for target in rule.rft:
            plain: dict[str, Any] = {}
            node = plain
            parts = target.split(".")
            for part in parts[:-1]:
                node = node.setdefault(part, {})
            node[parts[-1]] = 1
            assert _unknown_schema_keys(plain, RftConfig) == [], target
    assert all(rule.note for rule in NO_EQUIVALENT)
    assert all(rule.rft[0].startswith("trainer.trainer_config.") for rule in PASSTHROUGH)


def test_verl_defaults_are_veRLs() -> None:
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("verl is not installed")
    generated = Path(list(spec.submodule_search_locations)[0]) / "trainer" / "config" / \
        "_generated_ppo_trainer.yaml"
    defaults = _flatten(yaml.safe_load(generated.read_text()))
    assert {key: defaults[key] for key in VERL_DEFAULTS} == VERL_DEFAULTS


def test_docs_list_every_rule() -> None:
    """docs/verl.md embeds the table generated from the rules (``markdown_table()``)."""
    assert markdown_table() in DOC.read_text()


def test_environment_is_not_read_at_conversion(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", "/somewhere")
    text = convert_text(PPO_SCRIPT.read_text()).yaml
    assert "/somewhere" not in text and "${oc.env:HOME}/models/Qwen2-7B-Instruct" in text
    assert os.environ["HOME"] == "/somewhere"
