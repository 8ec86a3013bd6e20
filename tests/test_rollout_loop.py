"""The rollout loop (#30 item 3): the runner takes an iterable of tasks and yields each
result as its task ends; it runs on one event loop with daemon workflow threads only; the
call batcher is an explicit slot on each workflow's model, shared by its direct calls and
its OpenAI-endpoint session (the real HTTP server, the tiny model on the ``hf`` engine)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import openai  # noqa: F401 - imported once here, not while the workflows wait
import pytest
import torch
from fixtures_workflows import Sleepy

from rft.engines.call_batching import CallSlot
from rft.engines.engine import Completion, SamplingArgs
from rft.engines.hf_engine import HFEngine
from rft.experience import Experience
from rft.rollout.model_wrapper import ModelWrapper
from rft.rollout.runner import WorkflowRunner
from rft.workflow import Task, Workflow

QUESTION = [{"role": "user", "content": "Tina has 3 apples. How many?"}]


def sleepy_task(i: int, sleep: float) -> Task:
    return Task(raw={"sleep": sleep}, index=i, taskset="t", prompt="p", truth="1",
                repeat_times=1, reward_fn=lambda response, truth: {"accuracy": 1.0})


def test_run_pulls_tasks_from_an_iterator_and_yields_each_result_as_it_ends():
    pulled: list[int] = []

    def tasks() -> Iterator[Task]:
        for i, sleep in enumerate([0.6, 0.0, 0.3]):
            pulled.append(i)
            yield sleepy_task(i, sleep)

    runner = WorkflowRunner(lambda t, calls: Sleepy(t, None), max_timeout=10,
                            max_retry_times=0, concurrent_mode="multi-threading")
    before = set(threading.enumerate())
    results = runner.run(tasks())
    assert pulled == []  # a generator: nothing runs before the first result is asked for
    ended = [(r.order, r.task.index, r.ok) for r in results]
    assert ended == [(1, 1, True), (2, 2, True), (0, 0, True)]  # as they ended
    assert pulled == [0, 1, 2]
    # one event loop on the caller's thread: the only threads are the workflow threads
    assert {t.name.rsplit("-", 1)[0] if "[" in t.name else t.name
            for t in set(threading.enumerate()) - before} <= {
        "rft-workflow-idle", "rft-workflow-t[0]", "rft-workflow-t[1]", "rft-workflow-t[2]"}
    runner.close()


@pytest.fixture(scope="module")
def engine(tiny_model_dir) -> HFEngine:
    torch.set_num_threads(1)
    return HFEngine(str(tiny_model_dir), dtype="float32", max_model_len=256,
                    max_response_tokens=4)


READY = threading.Barrier(3)


class Asks(Workflow):
    """Task 1 asks through its OpenAI-endpoint session, the others call the model; all
    three at once (their clients made first)."""

    def run(self) -> list[Experience]:
        assert isinstance(self.model.calls, CallSlot)
        assert self.model.calls.participant == self.task.index
        if self.task.index == 1:
            client = self.model.get_openai_client()
            READY.wait(30)
            client.chat.completions.create(model="tiny", messages=QUESTION, logprobs=True)
        else:
            READY.wait(30)
            self.model.chat(QUESTION, logprobs=True)
        exp = Experience(tokens=torch.tensor([1, 2]), prompt_length=1)
        self.score(exp, "1")
        return [exp]


def test_direct_and_endpoint_calls_of_a_batch_meet_in_one_engine_call(engine, monkeypatch):
    calls: list[tuple[str, int]] = []
    chat = engine.chat

    def counted_chat(items, sampling, n):  # type: ignore[no-untyped-def]
        calls.append(("chat", len(items)))
        return chat(items, sampling, n)

    monkeypatch.setattr(engine, "chat", counted_chat)
    root = ModelWrapper(engine, SamplingArgs(max_tokens=4), name="tiny")
    root.serve_openai_api()
    try:
        runner = WorkflowRunner(lambda t, slot: Asks(t, root.for_workflow(calls=slot)),
                                max_timeout=60, max_retry_times=0,
                                concurrent_mode="multi-threading")
        results = runner.run_tasks([sleepy_task(i, 0.0) for i in range(3)])
        runner.close()
    finally:
        root.close()
    assert [r.error for r in results] == [None, None, None]
    assert calls == [("chat", 3)]  # one engine call served the three workflows


class CountingEngine:
    """Answers ``generate`` at once (3 response tokens), recording each call's prompts."""

    model_version = 0

    def __init__(self) -> None:
        self.prompts_per_call: list[list[list[int]]] = []

    def generate(self, items, sampling, n):  # type: ignore[no-untyped-def]
        self.prompts_per_call.append([list(p) for p in items])
        return [[Completion(list(p), [5, 6, 7], None, "abc", "stop") for _ in range(n)]
                for p in items]


class AsksAtOnce(Workflow):
    """Calls the model first thing (its thread may call before the loop has started the
    other runners)."""

    def run(self) -> list[Experience]:
        exps = self.model.generate_from_ids([100 + self.task.index], n=2)
        for exp in exps:
            exp.reward = 1.0
        return exps


@pytest.mark.parametrize("mode, workers", [("multi-threading", 1), ("sequential", 4)])
def test_first_calls_of_a_batch_are_merged_in_task_order(mode, workers):
    """Every runner counts from the batch's start: the first workflow's call waits for the
    others' instead of going alone (``explorer.engine_num: 2`` splits a merged call over
    the replicas), and the merged prompts are in task order, whatever thread came first."""
    for _ in range(5):
        engine = CountingEngine()
        root = ModelWrapper(engine, SamplingArgs(), name="counting")  # type: ignore[arg-type]
        runner = WorkflowRunner(lambda t, slot: AsksAtOnce(t, root.for_workflow(calls=slot)),
                                max_timeout=30, max_retry_times=0, concurrent_mode=mode,
                                workers=workers)
        results = runner.run_tasks([sleepy_task(i, 0.0) for i in range(4)])
        runner.close()
        assert all(r.ok for r in results)
        assert engine.prompts_per_call == [[[100], [101], [102], [103]]]
