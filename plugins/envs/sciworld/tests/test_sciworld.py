"""``sciworld``: ScienceWorld's real JVM behind the environment contract — task rows, the
gold path scoring 1.0, the JVM's time-outs and death reported in one line, and no java
process left after ``close()``."""

from __future__ import annotations

import os
import signal

import psutil
import pytest

from rft.environment import EnvironmentFailure
from rft.errors import RftError
from rft.plugins import PluginRegistry
from rft.testing.checks import check_environment
from rft.workflow import Task
from rft_plugin_sciworld import (
    SciWorldArgs,
    SciWorldEnvironment,
    SciWorldTask,
    java_missing,
    task_of,
)


def task(raw: dict, prompt: str | None = None, index: int = 0) -> Task:
    return Task(raw=raw, index=index, taskset="sci", prompt=prompt)


def java_children() -> set[int]:
    """Pids of the live java processes this test process started."""
    return {p.pid for p in psutil.Process().children(recursive=True)
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE and p.name() == "java"}


@pytest.fixture(scope="module")
def env():
    """One JVM for the module's tests that play full episodes."""
    environment = SciWorldEnvironment(SciWorldArgs(gold_path=True))
    yield environment
    environment.close()


def test_registered_by_this_distribution():
    registration = PluginRegistry.create().registration("environment", "sciworld")
    assert registration.distribution == "rft-plugin-sciworld"
    assert registration.implementation is SciWorldEnvironment


@pytest.mark.parametrize("raw, prompt, expected", [
    ({"task_name": "boil", "var_num": 3}, None, SciWorldTask("boil", 3)),
    ({"task_name": "melt"}, None, SciWorldTask("melt", 0)),
    # Trinity-RFT's rows: a JSON string in the prompt column, with a jar_path of its machine
    ({"game_file": "x"}, '{"task_name": "boil", "var_num": "7", "jar_path": "/x.jar"}',
     SciWorldTask("boil", 7)),
])
def test_rows_name_a_task_and_variation(raw, prompt, expected):
    assert task_of(task(raw, prompt)) == expected


@pytest.mark.parametrize("raw, prompt, message", [
    ({"question": "boil"}, "boil water", "row 4 names no ScienceWorld task"),
    ({"task_name": "boil", "var_num": "two"}, None, "var_num must be an integer, got 'two'"),
])
def test_rows_without_a_task_are_refused_in_one_line(raw, prompt, message):
    with pytest.raises(RftError, match=message) as caught:
        task_of(task(raw, prompt, index=4))
    assert "\n" not in str(caught.value) and "taskset 'sci'" in str(caught.value)


def test_args_are_checked():
    with pytest.raises(ValueError, match="env_step_limit must be >= 1"):
        SciWorldArgs(env_step_limit=0)
    with pytest.raises(ValueError, match="timeout must be > 0"):
        SciWorldArgs(timeout=0)
    with pytest.raises(ValueError, match="jar_path: file '/nowhere/sw.jar' does not exist"):
        SciWorldArgs(jar_path="/nowhere/sw.jar")


def test_gold_path_scores_one_and_terminates(env):
    observation, info = env.reset(task({"task_name": "boil", "var_num": 0}))
    assert observation.startswith("Your task is to boil water")
    assert "This room is called" in observation and info["score"] == 0
    rewards, result = [], None
    for action in info["gold_actions"]:
        result = env.step(action)
        rewards.append(result.reward)
        if result.terminated or result.truncated:
            break
    assert result is not None and result.terminated and not result.truncated
    assert result.info["won"] and result.info["score"] == 100
    assert sum(rewards) == pytest.approx(1.0) and min(rewards) >= 0.0
    # after the end: harmless, no reward
    late = env.step("look around")
    assert late.terminated and late.reward == 0.0


def test_episodes_reuse_the_jvm_and_start_afresh(env):
    env.reset(task({"task_name": "boil", "var_num": 0}))
    pid = env.jvm.pid
    first = env.step("look around").observation
    again, _ = env.reset(task({"task_name": "boil", "var_num": 0}))
    assert env.step("look around").observation == first
    env.reset(task({"task_name": "melt", "var_num": 1}))
    assert env.jvm.pid == pid  # one JVM for every episode of the instance
    invalid = env.step("fly to the moon")
    assert invalid.reward == 0.0 and not invalid.terminated
    assert "No known action" in invalid.observation


@pytest.mark.parametrize("raw, message", [
    ({"task_name": "bake-a-cake"}, "unknown ScienceWorld task 'bake-a-cake' \\(known: boil,"),
    ({"task_name": "boil", "var_num": 999}, "var_num 999 of 'boil' is out of range 0..29"),
])
def test_unknown_tasks_are_refused_in_one_line(env, raw, message):
    with pytest.raises(RftError, match=message) as caught:
        env.reset(task(raw))
    assert "\n" not in str(caught.value)


def test_a_dead_jvm_is_one_line_and_close_leaves_no_java():
    before = java_children()  # the module's JVM, when its tests ran first
    environment = SciWorldEnvironment(SciWorldArgs())
    environment.reset(task({"task_name": "boil", "var_num": 0}))
    environment.step("look around")
    assert java_children() - before == {environment.jvm.pid}
    pid = environment.jvm.pid
    os.kill(pid, signal.SIGKILL)  # the JVM dies mid-episode
    with pytest.raises(EnvironmentFailure) as caught:
        environment.step("open door to kitchen")
    message = str(caught.value)
    assert message == (f"environment 'sciworld': its ScienceWorld JVM (pid {pid}) died "
                       "(exit code -9) during step")
    environment.close()
    environment.close()  # idempotent
    assert java_children() == before


def test_a_hanging_jvm_times_out_and_is_stopped():
    before = java_children()
    environment = SciWorldEnvironment(SciWorldArgs())
    environment.reset(task({"task_name": "boil", "var_num": 0}))
    environment.jvm.timeout = 3.0  # what SciWorldArgs(timeout=3) sets; after a slow start
    pid = environment.jvm.pid
    os.kill(pid, signal.SIGSTOP)  # the JVM stops answering
    with pytest.raises(EnvironmentFailure, match=(
            f"^environment 'sciworld': step took longer than 3 s; its ScienceWorld JVM "
            f"\\(pid {pid}\\) was stopped$")):
        environment.step("look around")
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    with pytest.raises(EnvironmentFailure, match="died"):
        environment.step("look around")
    environment.close()
    assert java_children() == before


def test_no_scienceworld_package_is_one_line(monkeypatch):
    monkeypatch.setattr("importlib.util.find_spec",
                        lambda name, *a: None if name == "scienceworld" else object())
    with pytest.raises(EnvironmentFailure, match="the scienceworld package is not installed"):
        SciWorldEnvironment(SciWorldArgs()).reset(task({"task_name": "boil"}))


def test_no_java_is_one_line(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert "no 'java' on PATH" in java_missing()
    environment = SciWorldEnvironment(SciWorldArgs())
    with pytest.raises(EnvironmentFailure, match="default-jre-headless") as caught:
        environment.reset(task({"task_name": "boil"}))
    assert "\n" not in str(caught.value)
    environment.close()


def test_keeps_the_environment_contract():
    before = java_children()
    (trajectory,) = check_environment(SciWorldEnvironment, [{"task_name": "boil", "var_num": 1}],
                                      args=SciWorldArgs(), timeout=300.0)
    assert trajectory
    assert java_children() == before  # both instances of the check closed their JVM


@pytest.mark.slow
def test_sciworld_workflow_trains_two_steps(rft_run, tmp_path):
    """Trinity-RFT's ``sciworld_workflow`` by name, its rows (a JSON string in the prompt
    column ``game_file``), 2 GRPO steps on the tiny model; no JVM is left afterwards."""
    import json

    rows = [{"game_file": json.dumps({"task_name": "boil", "var_num": v,
                                      "jar_path": "/elsewhere/scienceworld.jar"})}
            for v in (0, 1)]
    tasks = tmp_path / "sciworld.jsonl"
    tasks.write_text("".join(json.dumps(row) + "\n" for row in rows))
    before = java_children()
    taskset = "buffer.explorer_input.taskset"
    outcome = rft_run({f"{taskset}.path": str(tasks),
                       f"{taskset}.format": {"prompt_key": "game_file"},
                       f"{taskset}.default_workflow_type": "sciworld_workflow",
                       f"{taskset}.workflow_args": {"max_env_steps": 2},
                       "model.max_prompt_tokens": 4096})
    assert len(outcome.metrics) == 2
    for step in outcome.metrics:
        assert step["rollout/experiences"] == 4.0 and step["rollout/failed_tasks"] == 0.0
        assert step["rollout/env/steps/mean"] == 2.0
        assert 0.0 <= step["rollout/reward/min"] <= step["rollout/reward/max"] <= 1.0
        assert "actor/pg_loss" in step
    assert java_children() == before


class KilledOnRowZero(SciWorldEnvironment):
    """``sciworld`` whose JVM is killed (SIGKILL) at the first step of row 0's episodes."""

    def reset(self, task, seed=None):
        self.doomed = task.index == 0
        return super().reset(task, seed)

    def step(self, action):
        if self.doomed:
            os.kill(self.jvm.pid, signal.SIGKILL)
        return super().step(action)


@pytest.mark.slow
def test_a_jvm_dying_in_a_run_fails_its_task_in_one_line_and_the_others_go_on(rft_tiny_model):
    """Through the workflow runner: the task whose JVM dies is retried once (a new JVM),
    then counted failed with one line naming the JVM; the other task plays; no java left."""
    from rft.engines.engine import SamplingArgs
    from rft.engines.hf_engine import HFEngine
    from rft.rollout.model_wrapper import ModelWrapper
    from rft.rollout.runner import WorkflowRunner
    from rft_plugin_sciworld import SciWorldWorkflow, SciWorldWorkflowArgs

    model = ModelWrapper(HFEngine(str(rft_tiny_model), max_model_len=4096,
                                  max_response_tokens=4, seed=0),
                         SamplingArgs(temperature=1.0, max_tokens=4))
    before = java_children()

    def sci_task(env_class, index):
        return Task(raw={"task_name": "boil", "var_num": index}, index=index, taskset="sci",
                    repeat_times=1, workflow_args=SciWorldWorkflowArgs(max_steps=2),
                    environment=env_class, environment_args=SciWorldArgs(),
                    action_parser=lambda reply: "look around")

    runner = WorkflowRunner(lambda t, calls: SciWorldWorkflow(t, model), max_timeout=600,
                            max_retry_times=1)
    try:
        killed, fine = runner.run_tasks([sci_task(KilledOnRowZero, 0),
                                         sci_task(SciWorldEnvironment, 1)])
    finally:
        runner.close()
    assert not killed.ok and killed.attempts == 2
    assert killed.error is not None and "\n" not in killed.error
    assert "environment 'sciworld': its ScienceWorld JVM (pid " in killed.error
    assert "died (exit code -9) during step" in killed.error
    assert fine.ok and len(fine.experiences) == 1
    assert fine.experiences[0].metrics["env/steps"] == 2.0
    assert java_children() == before


def test_a_room_is_listed_in_the_same_order_on_every_reset(env):
    """ScienceWorld keys a room's objects by identity hash; ``stable_order`` (the default)
    makes those hashes constant, so reset after reset of one JVM shows the same room (before
    it, the paint cups of ``boil`` 1 came in another order on the second reset)."""
    actions = ("look around", "open cupboard", "look around", "inventory")
    plays = []
    for _ in range(3):
        first, _ = env.reset(task({"task_name": "boil", "var_num": 1}))
        plays.append([first] + [env.step(action).observation for action in actions])
    assert plays[1] == plays[0] and plays[2] == plays[0]
    assert "wood cup (containing red paint)" in plays[0][0]


@pytest.mark.parametrize("stable_order", [True, False])
def test_stable_order_is_a_jvm_option(stable_order):
    environment = SciWorldEnvironment(SciWorldArgs(stable_order=stable_order))
    try:
        environment.reset(task({"task_name": "boil"}))
        command_line = psutil.Process(environment.jvm.pid).cmdline()
        assert ("-XX:hashCode=2" in command_line) is stable_order
    finally:
        environment.close()
