"""Carry-over explore steps (#35 fully async, :mod:`rft.rollout.carry_over`): with
``partial_rollout`` + ``streaming_batches`` an explore step returns once ``batch_size`` tasks
ended; the rest carry over, end in a later step and reach the buffer once; the tasks in
flight are in the run state and a resumed explorer submits them again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from fixtures_models import arithmetic_tasks

from rft.config import load_config
from rft.engines.engine_factory import build_engine, default_sampling
from rft.experience import Experience
from rft.modes.run_state import RunState
from rft.rollout.explorer import Explorer
from rft.rollout.model_wrapper import ModelWrapper


class Recorded:
    """The experience buffer as the explorer sees it: each write kept apart."""

    def __init__(self) -> None:
        self.writes: list[list[Experience]] = []

    def write(self, experiences: list[Experience]) -> None:
        self.writes.append(list(experiences))


def _config(tmp_path: Path, model: Path, *, carry: bool) -> Path:
    tasks = arithmetic_tasks(tmp_path, 64)

    def taskset(index: int, max_tokens: int) -> dict:
        return {"name": f"t{index}", "path": str(tasks),
                "format": {"prompt_key": "question", "response_key": "answer"},
                "default_workflow_type": "simple_workflow",
                "default_reward_fn_type": "accuracy_reward",
                "rollout_args": {"max_tokens": max_tokens}}

    config = {
        "project": "carry", "name": "run", "mode": "both",
        "checkpoint_root_dir": str(tmp_path / "ck"),
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 2},
        "model": {"model_path": str(model), "max_prompt_tokens": 32,
                  "max_response_tokens": 48},
        "cluster": {"node_num": 1, "gpu_per_node": 0},
        "buffer": {"batch_size": 4, "total_steps": 4,
                   "explorer_input": {"tasksets": [taskset(0, 1), taskset(1, 1),
                                                   taskset(2, 1), taskset(3, 48)]},
                   "trainer_input": {"experience_buffer": {"name": "exp",
                                                           "storage_type": "queue"}}},
        "explorer": {"rollout_model": {"engine_type": "hf", "dtype": "float32"}},
        "synchronizer": {"sync_method": "memory", "sync_interval": 1,
                         "partial_rollout": True, "streaming_batches": carry},
        "trainer": {"trainer_type": "torch"},
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _explorer(path: Path):
    stage = load_config(path).stages[0]
    engine = build_engine(stage.config, stage.plan.rollout_model.engine.implementation)
    storage = Recorded()
    explorer = Explorer(stage.plan, ModelWrapper(engine, default_sampling(stage.config)),
                        storage)
    return explorer, storage


def test_carried_tasks_reach_the_buffer_in_a_later_step_once(tmp_path, tiny_model_dir):
    explorer, storage = _explorer(_config(tmp_path, tiny_model_dir, carry=True))
    try:
        metrics = [explorer.explore_step(step) for step in (1, 2, 3)]
        state = RunState(step=3, selectors=[s.state_dict() for s in explorer.selectors],
                         carried_tasks=explorer.carried_state())
    finally:
        explorer.close()
    # each step: 4 tasks (x 2 runs) written, 4 tasks carried over (one batch ahead)
    assert [len(w) for w in storage.writes] == [8, 8, 8]
    assert [m["rollout/carried_over"] for m in metrics] == [4.0, 4.0, 4.0]
    assert metrics[0]["rollout/carried_in"] == 0.0 and metrics[1]["rollout/carried_in"] > 0
    # a task of step 1 written by step 2: its experiences keep their step (their group)
    assert any(e.eid.batch == 1 for e in storage.writes[1])
    # (the tasksets share their rows' indices: the taskset is part of what names a sample)
    uids = [(e.info["taskset"], e.eid.uid) for w in storage.writes for e in w]
    assert len(uids) == len(set(uids))  # nothing twice
    for write in storage.writes:  # whole groups: both runs of a task in the same write
        groups: dict[tuple[str, str], int] = {}
        for e in write:
            key = (e.info["taskset"], e.eid.group)
            groups[key] = groups.get(key, 0) + 1
        assert set(groups.values()) == {2}
    # the tasks in flight are in the run state; a resumed explorer runs them first
    saved = RunState.from_dict(json.loads(json.dumps(state.to_dict())), "state.json")
    assert len(saved.carried_tasks) == 4
    carried = {(t[0], t[1], t[4]) for t in saved.carried_tasks}
    written = {(e.info["taskset"], e.eid.task, e.eid.batch) for w in storage.writes for e in w}
    assert not carried & written
    again, again_storage = _explorer(tmp_path / "config.yaml")
    try:
        for selector, selector_state in zip(again.selectors, saved.selectors, strict=True):
            selector.load_state_dict(selector_state)
        again.restore_carried(saved.carried_tasks)
        for step in (4, 5):
            again.explore_step(step)
    finally:
        again.close()
    resumed = {(e.info["taskset"], e.eid.task, e.eid.batch)
               for w in again_storage.writes for e in w}
    assert carried <= resumed  # none lost
    assert not resumed & written  # none twice
