"""``explorer.runner_state_report_interval``: a real WorkflowRunner and the reporter thread
log one line of the runners' states every interval (0: no reporter)."""

from __future__ import annotations

import logging
import threading
import time

import torch
from rft.experience import Experience
from rft.rollout.runner import WorkflowRunner
from rft.rollout.runner_states import start_reporter
from rft.workflow import Task, Workflow

GATE = threading.Event()


class Gated(Workflow):
    """Waits for ``GATE``; index 1 fails (a non-retryable error)."""

    def run(self) -> list[Experience]:
        GATE.wait(10)
        if self.task.index == 1:
            raise ValueError("bad task")
        return [Experience(tokens=torch.tensor([1, 2]), prompt_length=1, reward=1.0)]


def _task(i: int) -> Task:
    return Task(raw={}, index=i, taskset="t", prompt="p", truth="1", repeat_times=1,
                reward_fn=lambda response, truth: {"accuracy": 1.0})


def _wait_for(caplog, text: str, seconds: float = 5.0) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        lines = [r.getMessage() for r in caplog.records if r.name == "test.runner_states"]
        found = [line for line in lines if text in line]
        if found:
            return found[-1]
        time.sleep(0.02)
    raise AssertionError(f"no state line containing {text!r}; got {lines}")


def test_states_are_logged_every_interval(caplog):
    caplog.set_level(logging.INFO, logger="test.runner_states")
    GATE.clear()
    runner = WorkflowRunner(lambda t, calls: Gated(t, model=None), max_timeout=10.0,
                            max_retry_times=0, concurrent_mode="sequential", workers=4)
    reporter = start_reporter(runner.states, 0.05, logging.getLogger("test.runner_states"))
    assert reporter is not None
    results: list = []
    worker = threading.Thread(target=lambda: results.extend(
        runner.run_tasks([_task(0), _task(1), _task(2)])))
    worker.start()
    try:
        line = _wait_for(caplog, "3 running")
        assert line == "runner states: 3 running, 1 idle (of 4 runners); tasks done 0 (ok 0, failed 0)"
        GATE.set()
        worker.join(10)
        line = _wait_for(caplog, "tasks done 3")
        assert line == "runner states: 0 running, 4 idle (of 4 runners); tasks done 3 (ok 2, failed 1)"
        assert [r.ok for r in results] == [True, False, True]
    finally:
        GATE.set()
        reporter.close()
        runner.close()


def test_interval_zero_is_off():
    runner = WorkflowRunner(lambda t, calls: Gated(t, model=None), max_timeout=1.0, max_retry_times=0)
    assert start_reporter(runner.states, 0, logging.getLogger("test.runner_states")) is None
