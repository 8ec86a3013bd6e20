"""What ``rft validate`` promises (issue #28, items 6, 12, 13, 17): it refuses what
``rft run`` would refuse, with one line per problem naming its culprit, all of them at once.

- a broken model folder (empty, no weights, a truncated safetensors file, a file, a
  missing shard, a truncated ``pytorch_model.bin``) is one line naming its path;
- ``math_workflow`` without a reward function scores with ``math_reward``, said in one line;
- an engine whose package is missing, more GPUs per node than this machine has (no cluster
  to join), a ``subset_name`` a local folder does not have: validation problems; fields
  with no effect here: one warning each;
- independent problems in several sections come in one run; ``{key:value}`` without a space
  and a name in the wrong case get a hint; data errors give the file's 1-based line.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from fixtures_models import apply_changes
from rft.cli import main
from rft.config import load_config
from rft.errors import ConfigError, RftError

REPO = Path(__file__).resolve().parents[1]
RFT = REPO / ".venv" / "bin" / "rft"


def write_tasks(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def config_dict(tmp_path: Path, model: Path, **changes: Any) -> dict[str, Any]:
    """A colocate GRPO config on the tiny model and four arithmetic tasks; ``changes`` as
    in :func:`fixtures_models.apply_changes` (``a__b=value``)."""
    tasks = tmp_path / "tasks.jsonl"
    if not tasks.exists():
        write_tasks(tasks, [{"question": f"{i}+1=", "answer": str(i + 1)} for i in range(4)])
    config = {
        "project": "promises", "name": "run", "mode": "colocate",
        "checkpoint_root_dir": str(tmp_path / "ck"),
        "model": {"model_path": str(model), "max_prompt_tokens": 128, "max_response_tokens": 4},
        "cluster": {"node_num": 1, "gpu_per_node": 0},
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 2},
        "buffer": {"batch_size": 2, "total_steps": 1, "explorer_input": {"taskset": {
            "name": "tasks", "path": str(tasks),
            "format": {"prompt_key": "question", "response_key": "answer"},
            "default_workflow_type": "simple_workflow",
            "default_reward_fn_type": "accuracy_reward"}}},
        "explorer": {"rollout_model": {"engine_type": "hf", "dtype": "float32", "seed": 1}},
        "synchronizer": {"sync_method": "memory", "sync_interval": 1},
        "trainer": {"trainer_type": "torch"},
        "monitor": {"monitor_type": "jsonl"},
    }
    return apply_changes(config, changes)


def write_config(tmp_path: Path, config: dict[str, Any], name: str = "config.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


def problems_of(tmp_path: Path, config: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_config(write_config(tmp_path, config))
    return caught.value.problems


# --------------------------------------------------------------------------------------
# Item 6: a broken model folder
# --------------------------------------------------------------------------------------


def _copy(model: Path, target: Path, *names: str) -> Path:
    target.mkdir()
    for name in names:
        shutil.copy(model / name, target / name)
    return target


def broken_folder(case: str, model: Path, root: Path) -> tuple[Path, str]:
    """A broken copy of the tiny model and what validation must say about it (after
    ``model.model_path: '<path>'``)."""
    target = root / case
    light = ("config.json", "tokenizer.json", "tokenizer_config.json")
    if case == "empty":
        target.mkdir()
        return target, " is an empty folder, not a model folder"
    if case == "file":
        target.write_text("not a model\n")
        return target, " is a file, not a model folder (config.json, tokenizer and weights)"
    if case == "no-weights":
        _copy(model, target, *light)
        return target, (": no weights (model.safetensors, model.safetensors.index.json, "
                        "pytorch_model.bin or pytorch_model.bin.index.json)")
    if case == "truncated-safetensors":
        _copy(model, target, *light, "model.safetensors")
        size = (target / "model.safetensors").stat().st_size
        os.truncate(target / "model.safetensors", size - 1000)
        return target, (f": model.safetensors is truncated: its tensors end at byte {size}, "
                        f"the file has {size - 1000} bytes")
    if case == "missing-shard":
        _copy(model, target, *light)
        (target / "model.safetensors.index.json").write_text(json.dumps(
            {"weight_map": {"lm_head.weight": "model-00002-of-00002.safetensors"}}))
        return target, (": model-00002-of-00002.safetensors (listed in "
                        "model.safetensors.index.json) is missing")
    if case == "truncated-bin":
        _copy(model, target, *light)
        torch.save({"w": torch.zeros(64, 64)}, target / "pytorch_model.bin")
        os.truncate(target / "pytorch_model.bin", 1000)
        return target, ": pytorch_model.bin is truncated (its zip archive has no end)"
    raise AssertionError(case)


BROKEN = ("empty", "file", "no-weights", "truncated-safetensors", "missing-shard",
          "truncated-bin")


@pytest.mark.parametrize("case", BROKEN)
def test_a_broken_model_folder_is_one_line_naming_its_path(case, tiny_model_dir, tmp_path):
    from rft.config.model_files import model_folder_problem

    path, expected = broken_folder(case, tiny_model_dir, tmp_path)
    assert model_folder_problem("model.model_path", str(path)) == \
        f"model.model_path: {str(path)!r}{expected}"


def test_whole_model_folders_pass_single_and_sharded(tiny_model_dir, tmp_path):
    from safetensors.torch import load_file, save_file

    from rft.config.model_files import model_folder_problem

    assert model_folder_problem("model.model_path", str(tiny_model_dir)) is None
    sharded = _copy(tiny_model_dir, tmp_path / "sharded", "config.json", "tokenizer.json")
    tensors = load_file(str(tiny_model_dir / "model.safetensors"))
    names = sorted(tensors)
    halves = {"model-00001-of-00002.safetensors": names[: len(names) // 2],
              "model-00002-of-00002.safetensors": names[len(names) // 2:]}
    for shard, keys in halves.items():
        save_file({k: tensors[k].contiguous() for k in keys}, str(sharded / shard))
    (sharded / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {k: shard for shard, keys in halves.items() for k in keys}}))
    assert model_folder_problem("model.model_path", str(sharded)) is None
    os.truncate(sharded / "model-00002-of-00002.safetensors", 100)
    assert "model-00002-of-00002.safetensors is truncated" in \
        model_folder_problem("model.model_path", str(sharded))


@pytest.mark.slow
def test_rft_validate_names_each_broken_model_folder_in_one_line_within_seconds(
        tiny_model_dir, tmp_path):
    """The real command in its own process, as a user runs it: exit 2, one line, no
    traceback, seconds."""
    (tmp_path / "models").mkdir()
    for case in BROKEN:
        path, expected = broken_folder(case, tiny_model_dir, tmp_path / "models")
        config = write_config(tmp_path, config_dict(tmp_path, path), f"{case}.yaml")
        started = time.monotonic()
        result = subprocess.run([str(RFT), "validate", str(config)], capture_output=True,
                                text=True, cwd=REPO, timeout=120)
        elapsed = time.monotonic() - started
        assert result.returncode == 2, (case, result.stderr[-2000:])
        assert result.stderr == f"rft: model.model_path: {str(path)!r}{expected}\n", case
        assert "Traceback" not in result.stderr and result.stdout == ""
        assert elapsed < 30, (case, elapsed)


def test_rft_run_stops_at_start_on_a_broken_model_folder(tiny_model_dir, tmp_path):
    """``rft run`` validates the config (the folder exists), then stops with the same one
    line before it loads anything."""
    from rft.launcher import run

    path, expected = broken_folder("truncated-safetensors", tiny_model_dir, tmp_path)
    loaded = load_config(write_config(tmp_path, config_dict(tmp_path, path)))
    with pytest.raises(RftError) as caught:
        run(loaded)
    assert str(caught.value) == f"model.model_path: {str(path)!r}{expected}"
    assert not (tmp_path / "ck").exists()  # nothing written


# --------------------------------------------------------------------------------------
# Item 12: math_workflow without a reward function
# --------------------------------------------------------------------------------------


def test_math_workflow_without_a_reward_scores_with_math_reward(tiny_model_dir, tmp_path):
    from rft.engines.engine import SamplingArgs
    from rft.rollout.explorer import open_taskset
    from rft.engines.hf_engine import HFEngine
    from rft.rollout.model_wrapper import ModelWrapper

    torch.manual_seed(0)
    config = config_dict(tmp_path, tiny_model_dir,
                         buffer__explorer_input__taskset__default_workflow_type="math_workflow")
    del config["buffer"]["explorer_input"]["taskset"]["default_reward_fn_type"]
    loaded = load_config(write_config(tmp_path, config))
    notes = [w for w in loaded.warnings if "default_reward_fn_type" in w]
    assert notes == ["buffer.explorer_input.taskset.default_reward_fn_type: not set; workflow "
                     "'math_workflow' scores with its default reward function 'math_reward' "
                     "(as in Trinity-RFT)"]
    plan = loaded.stages[0].plan.tasksets[0]
    assert plan.reward is not None and plan.reward.name == "math_reward"
    taskset = open_taskset(plan)
    engine = HFEngine(str(tiny_model_dir), max_model_len=160, max_response_tokens=4, seed=1)
    model = ModelWrapper(engine, SamplingArgs(temperature=1.0, max_tokens=4))
    task = taskset.tasks[0]
    experiences = taskset.workflow_cls(task, model).run()
    assert len(experiences) == task.repeat_times == 2
    for experience in experiences:
        assert isinstance(experience.reward, float)
        assert any(key.startswith("reward/") for key in experience.metrics)


# --------------------------------------------------------------------------------------
# Item 13: what the run would refuse here
# --------------------------------------------------------------------------------------


def test_an_engine_whose_package_is_missing_is_refused(tiny_model_dir, tmp_path, monkeypatch):
    """``sys.modules["vllm"] = None`` is how Python marks a package that cannot be
    imported: ``import vllm`` raises ImportError, as the engine's start does without it."""
    monkeypatch.setitem(sys.modules, "vllm", None)
    problems = problems_of(tmp_path, config_dict(
        tmp_path, tiny_model_dir, explorer__rollout_model__engine_type="vllm_async"))
    from rft.engines.vllm_engine import INSTALL_HINT

    assert problems == [
        "explorer.rollout_model.engine_type: engine 'vllm' needs vllm, which is not installed "
        f"here ({INSTALL_HINT})"]
    assert "rft-framework[vllm]" in INSTALL_HINT and "requirements/" not in INSTALL_HINT


@pytest.fixture
def no_ray_here(tmp_path, monkeypatch):
    """No Ray cluster joined by this process, and Ray's address file in an empty folder."""
    import ray

    if ray.is_initialized():
        ray.shutdown()
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path / "raytmp"))
    return tmp_path / "raytmp"


def test_more_gpus_per_node_than_this_machine_is_refused_without_a_cluster(
        tiny_model_dir, tmp_path, no_ray_here):
    here = torch.cuda.device_count()
    asked = here + 8
    config = config_dict(tmp_path, tiny_model_dir, mode="explore", cluster__gpu_per_node=asked,
                         continue_from_checkpoint=True, synchronizer__sync_method="checkpoint",
                         buffer__trainer_input__experience_buffer__storage_type="sql")
    line = next(p for p in problems_of(tmp_path, config) if p.startswith("cluster."))
    assert line.startswith(f"cluster.gpu_per_node: {asked} GPUs per node, but this machine "
                           f"has {here} and the run would use it alone")
    # an address of a cluster: its nodes' GPUs are the run's to check (through Ray)
    config["cluster"]["ray_address"] = "10.0.0.1:6379"
    load_config(write_config(tmp_path, config))
    # `auto` with a cluster started on this machine (`ray start` wrote its address) joins it
    config["cluster"]["ray_address"] = "auto"
    (no_ray_here / "ray").mkdir(parents=True)
    (no_ray_here / "ray" / "ray_current_cluster").write_text("127.0.0.1:6379\n")
    load_config(write_config(tmp_path, config))


def test_a_subset_name_a_local_folder_does_not_have_is_refused(tiny_model_dir, tmp_path):
    from rft.buffer.errors import TasksetError
    from rft.buffer.taskset import read_rows
    from rft.config.schema import TasksetConfig

    folder = tmp_path / "dataset"
    folder.mkdir()
    write_tasks(folder / "train.jsonl", [{"question": "1+1=", "answer": "2"}])
    config = config_dict(tmp_path, tiny_model_dir,
                         buffer__explorer_input__taskset__path=str(folder),
                         buffer__explorer_input__taskset__subset_name="main")
    assert problems_of(tmp_path, config) == [
        f"buffer.explorer_input.taskset.subset_name: 'main' is neither a subfolder of "
        f"{folder} nor one of its configurations (it has no README.md naming configurations)"]
    with pytest.raises(TasksetError, match="subset_name 'main' is neither"):  # as the run
        read_rows(TasksetConfig(name="tasks", path=str(folder), subset_name="main"))
    (folder / "README.md").write_text("---\nconfigs:\n- config_name: main\n  data_files:\n"
                                      "  - split: train\n    path: train.jsonl\n---\n")
    load_config(write_config(tmp_path, config))  # a configuration of the README
    config["buffer"]["explorer_input"]["taskset"]["path"] = str(tmp_path / "tasks.jsonl")
    loaded = load_config(write_config(tmp_path, config))
    assert ("buffer.explorer_input.taskset.subset_name: 'main' has no effect on a data file "
            f"({tmp_path / 'tasks.jsonl'})") in loaded.warnings


@pytest.mark.parametrize(("changes", "key"), [
    ({"explorer__rollout_model__enforce_eager": True}, "explorer.rollout_model.enforce_eager"),
    ({"synchronizer__sync_method": "nccl"}, "synchronizer.sync_method"),
    ({"trainer__ulysses_sequence_parallel_size": 2}, "trainer.ulysses_sequence_parallel_size"),
    ({"mode": "explore", "continue_from_checkpoint": True, "trainer__use_dynamic_bsz": False,
      "synchronizer__sync_method": "checkpoint",
      "buffer__trainer_input__experience_buffer__storage_type": "sql"},
     "trainer.use_dynamic_bsz"),
])
def test_a_field_without_effect_here_is_one_warning(changes, key, tiny_model_dir, tmp_path):
    loaded = load_config(write_config(tmp_path, config_dict(tmp_path, tiny_model_dir,
                                                            **changes)))
    said = [w for w in loaded.warnings if w.startswith(key + ":")]
    assert len(said) == 1 and "\n" not in said[0], loaded.warnings
    assert "no effect" in said[0] or "not honoured" in said[0]


# --------------------------------------------------------------------------------------
# Item 17: every problem at once, hints, line numbers
# --------------------------------------------------------------------------------------


def test_independent_problems_of_several_sections_come_in_one_run(tiny_model_dir, tmp_path,
                                                                  capsys):
    config = config_dict(tmp_path, tiny_model_dir,
                         buffer__explorer_input__taskset__rollout_args={"temprature": 0.5},
                         algorithm__policy_loss_fn_args={"clip_ratioo": 0.2},
                         buffer__explorer_input__taskset__task_selector={
                             "selector_type": "shufle"},
                         model__max_response_tokenz=4)
    assert main(["validate", str(write_config(tmp_path, config))]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert sorted(err.splitlines()) == sorted([
        "rft: model.max_response_tokenz: unknown key; did you mean 'max_response_tokens'?",
        "rft: buffer.explorer_input.taskset.rollout_args.temprature: unknown key; did you "
        "mean 'temperature'?",
        "rft: algorithm.policy_loss_fn_args.clip_ratioo: unknown key; did you mean "
        "'clip_ratio_c'?",
        "rft: buffer.explorer_input.taskset.task_selector.selector_type: unknown task "
        "selector 'shufle'; did you mean 'shuffle'?",
    ])


def test_key_colon_value_without_a_space_is_told_to_write_key_space_value(tiny_model_dir,
                                                                         tmp_path):
    path = write_config(tmp_path, config_dict(tmp_path, tiny_model_dir))
    text = path.read_text().replace("algorithm:\n", "algorithm:\n  kl_loss_fn_args: "
                                    "{kl_coef:1e-6}\n", 1)
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert caught.value.problems == [
        "algorithm.kl_loss_fn_args.kl_coef:1e-6: unknown key 'kl_coef:1e-6'; write `key: "
        "value` with a space after the colon (`kl_coef: 1e-6`)"]


def test_a_name_in_the_wrong_case_finds_the_right_one(tiny_model_dir, tmp_path):
    assert problems_of(tmp_path, config_dict(
        tmp_path, tiny_model_dir, algorithm__algorithm_type="GRPO")) == [
        "algorithm.algorithm_type: unknown algorithm 'GRPO'; did you mean 'grpo'?"]
    assert problems_of(tmp_path, config_dict(
        tmp_path, tiny_model_dir, monitor__monitor_type="JSONL")) == [
        "monitor.monitor_type: unknown monitor 'JSONL'; did you mean 'jsonl'?"]


def test_a_data_error_names_the_line_sed_prints(tiny_model_dir, tmp_path, capsys):
    tasks = tmp_path / "gappy.jsonl"
    tasks.write_text(json.dumps({"question": "1+1=", "answer": "2"}) + "\n\n"
                     + json.dumps({"question": "2+2=", "answer": "4"}) + "\n"
                     + json.dumps({"q": "3+3=", "answer": "6"}) + "\n", encoding="utf-8")
    config = config_dict(tmp_path, tiny_model_dir,
                         buffer__explorer_input__taskset__path=str(tasks))
    assert main(["validate", str(write_config(tmp_path, config))]) == 2
    _, err = capsys.readouterr()
    assert err == (f"rft: taskset 'tasks' ({tasks}): line 4 has no key 'question' "
                   "(format.prompt_key) or 'message' (format.messages_key); keys: q, "
                   "answer\n")
    printed = subprocess.run(["sed", "-n", "4p", str(tasks)], capture_output=True, text=True,
                             check=True).stdout
    assert json.loads(printed) == {"q": "3+3=", "answer": "6"}


def test_problems_of_every_stage_come_in_one_run(tiny_model_dir, tmp_path):
    config = config_dict(tmp_path, tiny_model_dir)
    config["stages"] = [
        {"stage_name": "a", "algorithm": {"algorithm_type": "grpo",
                                          "policy_loss_fn_args": {"clip_ratioo": 1}},
         "buffer": {"explorer_input": {"taskset": {"rollout_args": {"temprature": 1}}}}},
        {"stage_name": "b", "algorithm": {"algorithm_type": "GRPO"}},
    ]
    assert sorted(problems_of(tmp_path, config)) == sorted([
        "stages[0].buffer.explorer_input.taskset.rollout_args.temprature: unknown key; did "
        "you mean 'temperature'?",
        "stages[0].algorithm.policy_loss_fn_args.clip_ratioo: unknown key; did you mean "
        "'clip_ratio_c'?",
        "stages[1].algorithm.algorithm_type: unknown algorithm 'GRPO'; did you mean 'grpo'?",
    ])


def test_a_tokenizer_folder_is_enough_where_no_weights_are_loaded(tiny_model_dir, tmp_path):
    """A remote model's folder gives its tokenizer only; a folder without one is named."""
    from rft.config.model_files import model_folder_problem

    tokenizer = _copy(tiny_model_dir, tmp_path / "tokenizer", "tokenizer.json")
    assert model_folder_problem("k", str(tokenizer), weights=False) is None
    assert model_folder_problem("k", str(tokenizer)) == \
        f"k: {str(tokenizer)!r} has no config.json: not a model folder"
    bare = _copy(tiny_model_dir, tmp_path / "bare", "config.json", "model.safetensors")
    assert model_folder_problem("k", str(bare)) == (
        f"k: {str(bare)!r} has no tokenizer (tokenizer.json, tokenizer.model, vocab.json or "
        "another)")


def test_row_places_of_csv_and_json_list_files(tmp_path):
    """CSV: the header and a quoted field over two lines are counted; a JSON list has no
    line per row, so its rows are numbered from 1."""
    from rft.buffer.taskset import row_place
    from rft.config.schema import TasksetConfig

    table = tmp_path / "rows.csv"
    table.write_text('question,answer\n"two\nlines",1\nc,2\n', encoding="utf-8")
    assert row_place(TasksetConfig(name="t", path=str(table)), 1) == "line 4"
    listed = tmp_path / "rows.json"
    listed.write_text('[{"a": 1},\n {"a": 2}]\n', encoding="utf-8")
    assert row_place(TasksetConfig(name="t", path=str(listed)), 1) == "row 2"
