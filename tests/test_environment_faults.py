"""Environments that crash, hang or raise: one line naming them, the task retried and then
counted failed, the other tasks go on, and no child process is left behind."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from fixtures_environments import Crashing, CrashingOnOdd, GuessArgs, GuessChild, HangingChild
from rft import hookimpl
from rft.environment import EnvironmentFailure
from rft.environments import ProcessEnvironment, open_environment
from rft.rollout.runner import WorkflowRunner
from rft.workflow import Task
from rft_plugin_workflows.environment import EnvironmentArgs, EnvironmentWorkflow

TESTS = Path(__file__).resolve().parent


def env_children() -> list[psutil.Process]:
    """Live child processes of this one started by multiprocessing's spawn."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() != psutil.STATUS_ZOMBIE and any(
                    "spawn_main" in part for part in child.cmdline()):
                found.append(child)
        except psutil.NoSuchProcess:
            continue
    return found


def task(env, index=0, **args) -> Task:
    return Task(raw={"secret": 3}, index=index, taskset="t", repeat_times=2,
                sampling={"max_tokens": 4},
                workflow_args=EnvironmentArgs(max_steps=2, **args), environment=env,
                environment_args=GuessArgs(), action_parser=lambda reply: "3")


def test_a_child_environment_plays_like_an_in_process_one():
    env = open_environment(GuessChild, GuessArgs(top=5), timeout=30)
    assert isinstance(env, ProcessEnvironment) and psutil.pid_exists(env.pid)
    assert env.reset(task(GuessChild), seed=None) == ("Guess a number from 1 to 5.", {"top": 5})
    result = env.step("3")
    assert result.terminated and result.reward == 1.0 and result.info == {"won": True}
    env.close()
    env.close()  # idempotent
    assert env.process.exitcode == 0 and env_children() == []
    with pytest.raises(EnvironmentFailure, match="step after close"):
        env.step("3")


def test_a_dying_child_is_one_line_the_task_fails_and_the_run_goes_on(rft_model):
    runner = WorkflowRunner(lambda t, calls: EnvironmentWorkflow(t, rft_model),
                            max_timeout=120, max_retry_times=1)
    try:
        crashed, fine = runner.run_tasks([task(Crashing), task(GuessChild, index=1)])
    finally:
        runner.close()
    assert not crashed.ok and crashed.attempts == 2  # retried once, then counted failed
    assert crashed.error is not None and "\n" not in crashed.error
    assert "fixtures_environments.Crashing: its process (pid " in crashed.error
    assert "died during step (exit code 3)" in crashed.error
    assert fine.ok and [e.reward for e in fine.experiences] == [1.0, 1.0]
    assert env_children() == []


def test_a_hanging_child_is_killed_after_the_time_out(rft_model):
    started = time.monotonic()
    with pytest.raises(EnvironmentFailure) as caught:
        EnvironmentWorkflow(task(HangingChild, env_timeout=1.0), rft_model).run()
    assert time.monotonic() - started < 30
    assert ("fixtures_environments.HangingChild: step did not return within 1 s "
            "(workflow_args.env_timeout); its process (pid ") in str(caught.value)
    assert env_children() == []


def test_a_child_outlives_no_killed_parent(tmp_path):
    """The parent is SIGKILLed (no clean-up runs): its environment child exits by itself."""
    script = tmp_path / "parent.py"
    script.write_text(textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {str(TESTS)!r})
        from fixtures_environments import GuessChild
        from rft.environments import open_environment
        if __name__ == "__main__":
            env = open_environment(GuessChild, None, timeout=30)
            print(env.pid, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
    """))
    parent = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                            timeout=120)
    child = int(parent.stdout.split()[0])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and psutil.pid_exists(child):
        try:
            if psutil.Process(child).status() == psutil.STATUS_ZOMBIE:
                break
        except psutil.NoSuchProcess:
            break
        time.sleep(0.1)
    alive = psutil.pid_exists(child) and psutil.Process(child).status() != psutil.STATUS_ZOMBIE
    assert not alive, f"environment child {child} outlived its killed parent"


class CrashingPlugin:
    """Registers :class:`CrashingOnOdd` as ``crashing_on_odd``."""

    @hookimpl
    def register_environments(self) -> dict[str, type]:
        return {"crashing_on_odd": CrashingOnOdd}


@pytest.mark.slow
def test_a_run_goes_on_past_dying_environments(rft_run):
    plugin = CrashingPlugin()
    taskset = "buffer.explorer_input.taskset"
    outcome = rft_run({f"{taskset}.default_workflow_type": "environment_workflow",
                       f"{taskset}.environment": "crashing_on_odd",
                       f"{taskset}.workflow_args": {"max_steps": 2, "env_timeout": 30},
                       "explorer.max_retry_times": 0}, plugins=[plugin])
    assert [step["rollout/failed_tasks"] for step in outcome.metrics] == [1.0, 1.0]
    assert all("actor/pg_loss" in step for step in outcome.metrics)
    assert env_children() == []
