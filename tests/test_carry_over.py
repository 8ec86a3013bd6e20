"""Carry-over explore steps (#35 fully async, :mod:`rft.rollout.carry_over`): with
``partial_rollout`` + ``streaming_batches`` an explore step returns once ``batch_size`` tasks
ended; the rest carry over, end in a later step and reach the buffer once; the tasks in
flight are in the run state and a resumed explorer submits them again."""

from __future__ import annotations

import contextlib
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

    @contextlib.contextmanager
    def idempotent_writes(self, key: str):
        yield


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


def _explorer(path: Path, storage=None):
    stage = load_config(path).stages[0]
    engine = build_engine(stage.config, stage.plan.rollout_model.engine.implementation)
    storage = Recorded() if storage is None else storage
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
    # each step: 4 tasks (x 2 runs) written, a write per task; 4 tasks carried over
    assert [len(w) for w in storage.writes] == [2] * 12
    storage.writes = [sum(storage.writes[i:i + 4], []) for i in range(0, 12, 4)]
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


def test_a_due_task_is_waited_for_and_the_rest_carried(tmp_path) -> None:
    """:class:`CarryOver` on the runner's loop, workflows on threads gated by events: a
    step takes the first ``count`` tasks to end; a task ``due`` (``max_staleness``) is
    waited for even when ``count`` others ended first; tasks not taken go on running
    and are taken by a later collect."""
    import threading

    import torch
    from rft.rollout.carry_over import CarryOver, Unit
    from rft.rollout.runner import WorkflowRunner
    from rft.workflow import Task

    release = {i: threading.Event() for i in range(4)}

    class Gated:
        def __init__(self, task: Task) -> None:
            self.task = task

        def run(self) -> list[Experience]:
            assert release[self.task.index].wait(30)
            return [Experience(tokens=torch.tensor([1, 2, self.task.index]), prompt_length=2)]

    runner = WorkflowRunner(lambda task, calls: Gated(task), max_timeout=60,
                            max_retry_times=0)
    carry = CarryOver(runner)
    try:
        units = [Unit(Task(raw={}, index=i, taskset="t"), 0, step=1, version=i % 2)
                 for i in range(4)]
        carry.submit(units)
        for i in (2, 3):
            release[i].set()
        taken = carry.collect(2)
        assert sorted(u.task.index for u, _ in taken) == [2, 3]
        assert [u.task.index for u in carry.in_flight()] == [0, 1]  # carried over
        threading.Timer(0.2, release[1].set).start()
        threading.Timer(0.4, release[0].set).start()
        # one is wanted, but task 0 (version 0) is due: both are waited for
        taken = carry.collect(1, due=lambda unit: unit.version == 0)
        assert [u.task.index for u, _ in taken] == [1, 0] and all(r.ok for _, r in taken)
        assert carry.in_flight() == []
    finally:
        for event in release.values():
            event.set()
        carry.close()
        runner.close()


def test_a_resumed_explorer_writes_each_task_once_to_a_durable_buffer(tmp_path, tiny_model_dir):
    """A run that failed after explore step 3, resumed from the state of step 1 (its
    checkpoint): the tasks in flight after step 1 are submitted again, steps 2 and 3 are
    redone (ending their tasks in another order), and the SQLite buffer holds every
    task's group once — the failed run's writes of a task are not repeated, whatever step
    ends it the second time."""
    from rft.buffer.storage import open_storage

    path = _config(tmp_path, tiny_model_dir, carry=True)
    db = str(tmp_path / "exp.db")
    first = open_storage("sql", "exp", db)
    explorer, _ = _explorer(path, first)
    try:
        explorer.explore_step(1)
        state = RunState(step=1, selectors=[s.state_dict() for s in explorer.selectors],
                         carried_tasks=explorer.carried_state())
        explorer.explore_step(2)
        explorer.explore_step(3)
    finally:
        explorer.close()
        first.close()
    second = open_storage("sql", "exp", db)
    again, _ = _explorer(path, second)
    try:
        for selector, selector_state in zip(again.selectors, state.selectors, strict=True):
            selector.load_state_dict(selector_state)
        again.restore_carried(state.carried_tasks)
        for step in (2, 3, 4):
            again.explore_step(step)
        # a task the failed run wrote in one step, ended again by the resumed run in
        # another step (timing decides which task ends when): not written again
        rows = second.read(second.available(), timeout=0.0)
        again._write_by_task([r for r in rows if r.eid.batch == 1][:2])
        assert second.available() == 0
    finally:
        again.close()
        second.close()
    groups: dict[tuple[str, str], list[int]] = {}
    for e in rows:
        groups.setdefault((e.info["taskset"], e.eid.group), []).append(e.eid.run)
    assert all(sorted(runs) == [0, 1] for runs in groups.values()), groups  # each once
    # steps 1-4 submitted 5 batches; 4 steps took 16 tasks, at least the failed run's 12
    assert len(groups) >= 16
    # several tasksets: a group's id names its taskset (step/taskset:task)
    carried = {(t[0], f"{t[4]}/{t[0]}:{t[1]}") for t in state.carried_tasks}
    assert carried <= set(groups)  # the tasks in flight at the checkpoint: none lost


def test_tasks_of_several_tasksets_with_one_index_are_separate_groups(tmp_path, tiny_model_dir):
    """Four tasksets over one file: a step's 4 tasks all have index 0. Each is its own GRPO
    group (its 2 runs), with ids naming the taskset; a pad_batch of the step has 4 group
    ids, and the ids survive the buffer codec (they had all been group ``1/0``, so the
    advantage baseline mixed four tasks)."""
    from rft.buffer.experience_codec import experience_from_dict, experience_to_dict
    from rft.experience import pad_batch

    explorer, storage = _explorer(_config(tmp_path, tiny_model_dir, carry=False))
    try:
        explorer.explore_step(1)
    finally:
        explorer.close()
    experiences = [e for write in storage.writes for e in write]
    assert len(experiences) == 8 and {e.eid.task for e in experiences} == {0}
    groups = {e.eid.group for e in experiences}
    assert groups == {"1/t0:0", "1/t1:0", "1/t2:0", "1/t3:0"}
    assert len({e.eid.uid for e in experiences}) == 8
    assert len(set(pad_batch(experiences, 0).group_ids)) == 4
    decoded = [experience_from_dict(json.loads(json.dumps(experience_to_dict(e))))
               for e in experiences]
    assert [e.eid for e in decoded] == [e.eid for e in experiences]
