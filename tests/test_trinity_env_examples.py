"""Trinity-RFT's environment example configs (ALFWorld ×4 + its reflect variant, SciWorld,
FrozenLake), in test copies under ``tests/data/trinity_env_examples`` written in their form
with their values, validate here; those whose environment runs here train 2 steps on the
tiny model (slow).

Paths come from ``${oc.env:...}`` (set by the fixture); ``cluster.gpu_per_node=0`` is this
CPU machine. Before rft-plugin-alfworld / rft-plugin-sciworld each of these configs failed
with ``unknown workflow 'alfworld_workflow' ... rft does not ship``."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from rft.config import load_config
from rft.errors import ConfigError
from rft.plugins import PluginRegistry

EXAMPLES = Path(__file__).parent / "data" / "trinity_env_examples"
ALFWORLD_PROBLEM = (Path(__file__).parents[1] / "plugins" / "envs" / "alfworld" / "tests"
                    / "data" / "tiny_apple.pddl")
MACHINE = ("cluster.gpu_per_node=0",)
"""This machine has no GPU (the examples ask for 8)."""
TASKSET = "buffer.explorer_input.taskset"


@pytest.fixture(scope="module")
def registry() -> PluginRegistry:
    return PluginRegistry.create()


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict[str, Path]:
    """Taskset folders (``train.jsonl`` / ``test.jsonl``) in Trinity-RFT's row forms:
    ALFWorld rows name a game file, SciWorld rows hold a JSON string of task and variation
    in ``game_file``, FrozenLake rows a map size and seed."""
    from rft_plugin_alfworld import make_game

    root = tmp_path_factory.mktemp("trinity_env_examples")
    game = make_game(ALFWORLD_PROBLEM.read_text(), "put some apple on diningtable",
                     root / "games" / "tiny")
    rows = {
        "alfworld": [{"game_file": str(game)}] * 2,
        "sciworld": [{"game_file": json.dumps({"task_name": "boil", "var_num": v,
                                               "jar_path": "/elsewhere/scienceworld.jar"})}
                     for v in (0, 1)],
        "frozen_lake": [{"size": 3, "p": 0.8, "seed": s} for s in (1, 2)],
    }
    folders = {}
    for name, tasks in rows.items():
        folder = folders[name] = root / name
        folder.mkdir()
        for split in ("train", "test"):
            (folder / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in tasks))
    return folders


@pytest.fixture
def environ(monkeypatch, tmp_path, tiny_model_dir, data):
    """Set the example's variables for the taskset folder of ``kind``."""
    def set_for(kind: str) -> None:
        monkeypatch.setenv("TRINITY_CHECKPOINT_ROOT_DIR", str(tmp_path / "checkpoints"))
        monkeypatch.setenv("TRINITY_MODEL_PATH", str(tiny_model_dir))
        monkeypatch.setenv("TRINITY_TASKSET_PATH", str(data[kind]))
    return set_for


@pytest.mark.parametrize("example, kind, workflow, environment, max_steps", [
    ("alfworld", "alfworld", "alfworld_workflow", "alfworld", 30),
    ("RAFT_alfworld_7B", "alfworld", "RAFT_alfworld_workflow", "alfworld", 50),
    ("RAFT_reflect_alfworld_7B", "alfworld", "RAFT_reflect_alfworld_workflow", "alfworld", 50),
    ("sciworld", "sciworld", "sciworld_workflow", "sciworld", 30),
])
def test_environment_examples_validate(environ, registry, example, kind, workflow,
                                       environment, max_steps):
    environ(kind)
    stage = load_config(EXAMPLES / f"{example}.yaml", MACHINE, registry=registry).stages[0]
    taskset = stage.config.buffer.explorer_input.taskset
    assert taskset.default_workflow_type == workflow
    assert taskset.environment == environment  # the workflow's default_environment
    registration = registry.registration("workflow", workflow)
    assert registration.implementation.Args().max_steps == max_steps


@pytest.mark.parametrize("example", ["alfworldv2", "alfworld_general_multi_step"])
def test_step_wise_examples_validate_with_add_strategy_as_their_operator(
        environ, registry, example):
    """``add_strategy: step_wise_grpo`` (Trinity-RFT's older explorer-side advantages) is
    read as that operator at the end of the experience pipeline: the examples validate
    as written."""
    environ("alfworld")
    config = load_config(EXAMPLES / f"{example}.yaml", MACHINE, registry=registry).stages[0].config
    assert [op.name for op in config.data_processor.experience_pipeline.operators] == [
        "step_wise_grpo"]
    taskset = config.buffer.explorer_input.taskset
    assert taskset.default_workflow_type == "alfworld_workflow_v2"
    assert taskset.environment == "alfworld"


def test_frozen_lake_example_validates_as_written(environ, registry):
    """Trinity-RFT's FrozenLake example validates on this machine without CUDA, with one
    warning per setting that has no effect here: ``hybrid_engine: true`` (rft's explorer
    is the rollout), ``use_remove_padding: true`` (packed sequences need CUDA's varlen
    kernels: runs padded) and its eval ``rollout_args.n`` (Trinity-RFT overwrites it with
    the eval repeat count)."""
    environ("frozen_lake")
    loaded = load_config(EXAMPLES / "frozen_lake.yaml", MACHINE, registry=registry)
    config = loaded.stages[0].config
    assert config.buffer.explorer_input.taskset.default_workflow_type == "frozen_lake_workflow"
    keys = {w.split(":")[0] for w in loaded.warnings}
    assert {"buffer.explorer_input.eval_tasksets[0].rollout_args.n",
            "trainer.trainer_config.actor_rollout_ref.hybrid_engine",
            "trainer.trainer_config.actor_rollout_ref.model.use_remove_padding"} <= keys


# ---- 2 training steps on the tiny model, each example's workflow and algorithm ----------

def alfworld_taskset(data: dict[str, Path]) -> dict:
    return {f"{TASKSET}.path": str(data["alfworld"] / "train.jsonl"),
            f"{TASKSET}.format": {"prompt_key": "game_file"},
            "model.max_prompt_tokens": 2048}


@pytest.mark.slow
@pytest.mark.parametrize("workflow, algorithm, operator, experiences", [
    ("alfworld_workflow", "grpo", None, 4.0),                     # grpo_alfworld
    ("alfworld_workflow_v2", "multi_step_grpo", "step_wise_grpo", 8.0),  # v2, multi-step
    ("RAFT_alfworld_workflow", "raft", None, 4.0),                # RAFT_alfworld
])
def test_alfworld_examples_train_two_steps(rft_run, data, workflow, algorithm, operator,
                                           experiences):
    overrides = {**alfworld_taskset(data), f"{TASKSET}.default_workflow_type": workflow,
                 f"{TASKSET}.workflow_args": {"max_env_steps": 2},
                 "algorithm.algorithm_type": algorithm}
    if operator is not None:
        overrides.update({"buffer.train_batch_size": 8,
                          "data_processor.experience_pipeline.operators": [{"name": operator}]})
    outcome = rft_run(overrides)
    assert len(outcome.metrics) == 2
    for step in outcome.metrics:
        assert step["rollout/experiences"] == experiences
        assert step["rollout/failed_tasks"] == 0.0
        assert step["rollout/env/steps/mean"] == 2.0  # the tiny model wins no game in 2
        unfinished = 0.0 if workflow.startswith("RAFT") else -0.1
        assert step["rollout/reward/max"] == pytest.approx(unfinished)
        assert all(math.isfinite(v) for v in step.values() if isinstance(v, float))


def test_bad_environment_args_of_an_example_are_one_line(environ, registry):
    environ("sciworld")
    with pytest.raises(ConfigError) as caught:
        load_config(EXAMPLES / "sciworld.yaml",
                    MACHINE + (f"{TASKSET}.environment_args.timeout=0",), registry=registry)
    assert caught.value.problems == [
        f"{TASKSET}.environment_args: timeout must be > 0, got 0"]
