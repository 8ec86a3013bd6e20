"""Workflow runner (retries, timeouts, concurrency, bad rewards) and taskset reading."""

from __future__ import annotations

import json
import sqlite3
import threading
import time

import pytest
import torch

from rft.buffer.taskset import TaskPlugins, TasksetError, load_tasks, read_rows
from rft.config.schema import FormatConfig, TasksetConfig
from rft.experience import Experience
from rft.rollout.runner import WorkflowRunner, split_repeats
from rft.workflow import RewardError, Task, Workflow, score_response


def task(i: int = 0, repeat_times: int = 2, reward_fn=None) -> Task:
    return Task(raw={}, index=i, taskset="t", prompt="p", truth="1", repeat_times=repeat_times,
                reward_fn=reward_fn or (lambda response, truth: {"accuracy": 1.0}))


class Echo(Workflow):
    """Makes ``repeat_times`` one-token experiences and scores them."""

    def run(self) -> list[Experience]:
        out = []
        for _ in range(self.task.repeat_times):
            exp = Experience(tokens=torch.tensor([1, 2]), prompt_length=1)
            self.score(exp, "1")
            out.append(exp)
        return out


def runner(factory, **kwargs) -> WorkflowRunner:
    options = {"max_timeout": 5.0, "max_retry_times": 2, **kwargs}
    return WorkflowRunner(factory, **options)


def test_success_and_order_in_every_mode():
    tasks = [task(i) for i in range(5)]
    for mode in ("sequential", "multi-threading", "asynchronous"):
        results = runner(lambda t, calls: Echo(t, model=None), concurrent_mode=mode,
                         workers=3).run_tasks(tasks)
        assert [r.task.index for r in results] == [0, 1, 2, 3, 4]
        assert all(r.ok and len(r.experiences) == 2 and r.attempts == 1 for r in results)
        assert results[0].experiences[0].reward == 1.0


@pytest.mark.parametrize("mode", ["sequential", "multi-threading"])
def test_idle_workflow_threads_hold_no_result_and_close_ends_them(mode):
    """An idle workflow thread keeps no reference to its last attempt's experiences, and
    ``close`` returns only once the idle threads have ended: a daemon thread freeing
    tensors at interpreter exit aborts the process (``terminate called without an active
    exception``, exit 134) after a successful run."""
    import weakref

    before = set(threading.enumerate())
    workflow_runner = runner(lambda t, calls: Echo(t, model=None), concurrent_mode=mode, workers=3)
    results = workflow_runner.run_tasks([task(i) for i in range(4)])
    tokens = [weakref.ref(exp.tokens) for r in results for exp in r.experiences]
    assert len(tokens) == 8
    started = [t for t in set(threading.enumerate()) - before
               if t.name.startswith("rft-workflow")]
    assert started  # the attempts ran on workflow threads, now idle
    del results
    deadline = time.monotonic() + 5  # a thread may still be on its way from done to idle
    while any(ref() is not None for ref in tokens) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [ref for ref in tokens if ref() is not None] == []  # not held by idle threads
    workflow_runner.close()
    assert [t.name for t in started if t.is_alive()] == []


def test_raising_workflow_is_retried_then_recorded_as_failed():
    calls = []

    class Flaky(Workflow):
        def run(self):
            calls.append(self.task.index)
            raise ValueError("bad row")

    result = runner(lambda t, calls: Flaky(t, None), max_retry_times=2).run_task(task())
    assert not result.ok and result.attempts == 3 and len(calls) == 3
    assert result.error.startswith("ValueError: bad row (at test_runner_and_tasksets.py:")


def test_retry_can_succeed():
    attempts = {"n": 0}

    class SecondTime(Echo):
        def run(self):
            attempts["n"] += 1
            if attempts["n"] == 1:
                raise RuntimeError("transient")
            return super().run()

    result = runner(lambda t, calls: SecondTime(t, None)).run_task(task())
    assert result.ok and result.attempts == 2


def test_hanging_workflow_times_out_and_the_run_goes_on():
    release = threading.Event()

    class Hang(Workflow):
        def run(self):
            release.wait(10)
            return []

    hanging = runner(lambda t, calls: Hang(t, None) if t.index == 0 else Echo(t, None),
                     max_timeout=0.2)
    started = time.monotonic()
    results = hanging.run_tasks([task(0), task(1)])
    release.set()
    assert time.monotonic() - started < 3
    assert not results[0].ok and results[0].attempts == 1
    assert results[0].error == "workflow timed out after 0.2 s (explorer.max_timeout)"
    assert results[1].ok


@pytest.mark.parametrize("value, message", [
    (float("nan"), "returned accuracy=nan, which is not finite"),
    ("high", "returned accuracy='high', which is not a number"),
])
def test_bad_reward_values_fail_the_task_with_a_clear_error(value, message):
    def bad_reward(response, truth):
        return {"accuracy": value}

    result = runner(lambda t, calls: Echo(t, None)).run_task(task(reward_fn=bad_reward))
    assert not result.ok
    assert result.error.startswith(f"RewardError: bad_reward {message}")
    with pytest.raises(RewardError):
        score_response(bad_reward, "x", "1", None, name="bad_reward")


def test_workflow_returning_wrong_type_fails():
    class Wrong(Workflow):
        def run(self):
            return "nope"

    result = runner(lambda t, calls: Wrong(t, None), max_retry_times=0).run_task(task())
    assert result.error.startswith("TypeError: workflow run() must return a list of Experience")


def test_split_repeats():
    parts = split_repeats(task(repeat_times=5), 2)
    assert [(p.repeat_times, first) for p, first in parts] == [(2, 0), (2, 2), (1, 4)]
    assert split_repeats(task(repeat_times=5), None)[0][0].repeat_times == 5


# ---- tasksets ------------------------------------------------------------------------

PLUGINS = TaskPlugins(workflow=Echo, workflow_args=None,
                      reward_fn=lambda r, t: {"accuracy": 1.0}, reward_args=None)


def taskset(path, **kwargs) -> TasksetConfig:
    return TasksetConfig(name="ts", path=str(path), repeat_times=3,
                         format=FormatConfig(prompt_key="q", response_key="a"), **kwargs)


def test_jsonl_rows_become_tasks(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(json.dumps({"q": f"{i}+1", "a": str(i + 1)}) for i in range(3)))
    tasks = load_tasks(taskset(path), PLUGINS, is_eval=False)
    assert [(t.prompt, t.truth, t.index, t.repeat_times) for t in tasks] == [
        ("0+1", "1", 0, 3), ("1+1", "2", 1, 3), ("2+1", "3", 2, 3)]
    assert tasks[0].chat_messages() == [{"role": "user", "content": "0+1"}]


def test_parquet_and_dataset_folder_with_split(tmp_path):
    import datasets

    rows = {"q": ["x", "y"], "a": ["1", "2"]}
    datasets.Dataset.from_dict(rows).to_parquet(str(tmp_path / "t.parquet"))
    assert [r["q"] for r in read_rows(taskset(tmp_path / "t.parquet"))] == ["x", "y"]
    folder = tmp_path / "ds"
    folder.mkdir()
    datasets.Dataset.from_dict(rows).to_json(str(folder / "test.jsonl"))
    datasets.Dataset.from_dict({"q": ["z"], "a": ["3"]}).to_json(str(folder / "train.jsonl"))
    assert [r["q"] for r in read_rows(taskset(folder, split="test"))] == ["x", "y"]


def test_sqlite_taskset(tmp_path):
    path = tmp_path / "t.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE tasks (q TEXT, a TEXT)")
        db.executemany("INSERT INTO tasks VALUES (?, ?)", [("x", "1"), ("y", "2")])
    tasks = load_tasks(taskset(path, storage_type="sql"), PLUGINS, is_eval=True)
    assert [t.prompt for t in tasks] == ["x", "y"] and tasks[0].is_eval


def test_row_missing_the_prompt_key_names_file_row_and_key(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"q": "1", "a": "1"}) + "\n" + json.dumps({"question": "2", "a": "2"}))
    with pytest.raises(TasksetError) as caught:
        load_tasks(taskset(path), PLUGINS, is_eval=False)
    assert str(caught.value) == (f"taskset 'ts' ({path}): line 2 has no key 'q' "
                                 "(format.prompt_key) or 'message' (format.messages_key); "
                                 "keys: a, question")


def test_row_missing_the_response_key(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"q": "1"}) + "\n")
    with pytest.raises(TasksetError, match=r"line 1 has no key 'a' \(format.response_key\)"):
        load_tasks(taskset(path), PLUGINS, is_eval=False)


def test_empty_dataset(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text("")
    with pytest.raises(TasksetError, match=r"taskset 'ts' \(.*t.jsonl\): (the taskset is empty|cannot load)"):
        load_tasks(taskset(path), PLUGINS, is_eval=False)


def test_missing_and_unsupported_files(tmp_path):
    with pytest.raises(TasksetError, match="no such file or folder"):
        read_rows(taskset(tmp_path / "nope.jsonl"))
    (tmp_path / "t.txt").write_text("x")
    with pytest.raises(TasksetError, match="unsupported file type '.txt'"):
        read_rows(taskset(tmp_path / "t.txt"))
