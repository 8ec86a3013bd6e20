"""``environment_workflow`` over real environments with the tiny model: the episode and
step forms, rewards, invalid actions, lifecycle (reuse, close), failures as one line."""

from __future__ import annotations

import dataclasses

import pytest

from fixtures_environments import Guess, GuessArgs, Hanging, OneShot, Raising
from rft.builtin.action_parsers import ACTION_PARSERS
from rft.environment import EnvironmentFailure
from rft.workflow import Task
from rft_plugin_workflows.environment import EnvironmentArgs, EnvironmentWorkflow, state_hash


def always(action: str):
    """An action parser that ignores the reply: the policy always plays ``action``."""
    return lambda reply: action


def guess_task(parser=None, env=Guess, repeat_times=1, **args) -> Task:
    return Task(raw={"secret": 3}, index=0, taskset="t", repeat_times=repeat_times,
                sampling={"max_tokens": 4}, workflow_args=EnvironmentArgs(**args),
                environment=env, environment_args=GuessArgs(), action_parser=parser)


@pytest.fixture(autouse=True)
def counts():
    Guess.instances = Guess.closes = 0


def test_episode_form_is_one_experience_with_observations_masked(rft_model):
    task = guess_task(always("5"), max_steps=3, reward="sum")
    (exp,) = EnvironmentWorkflow(task, rft_model).run()
    assert exp.reward == pytest.approx(-0.3)
    assert exp.metrics["env/steps"] == 3.0 and exp.metrics["env/success"] == 0.0
    assert exp.metrics["env/invalid_actions"] == 0.0
    mask = exp.action_mask
    assert bool(mask[0]) and not bool(mask.all())
    masked = rft_model.tokenizer.decode(exp.response_tokens[~mask].tolist(),
                                        skip_special_tokens=False)
    assert masked.count("Wrong, lower.") == 2  # two observations between three replies
    prompt = rft_model.tokenizer.decode(exp.tokens[:exp.prompt_length].tolist())
    assert "Guess a number from 1 to 10." in prompt


def test_terminal_reward_and_success(rft_model):
    (exp,) = EnvironmentWorkflow(guess_task(always("3"), max_steps=4), rft_model).run()
    assert exp.reward == 1.0 and exp.metrics["env/steps"] == 1.0
    assert exp.metrics["env/success"] == 1.0
    (exp,) = EnvironmentWorkflow(guess_task(always("5"), max_steps=2), rft_model).run()
    assert exp.reward == pytest.approx(-0.1)  # terminal: the last step's reward only


def test_invalid_replies_do_not_step_the_environment(rft_model):
    task = guess_task(lambda reply: None, max_steps=2, invalid_action_reward=-0.5)
    (exp,) = EnvironmentWorkflow(task, rft_model).run()
    assert exp.reward == pytest.approx(-1.0) and exp.metrics["env/invalid_actions"] == 2.0
    masked = rft_model.tokenizer.decode(exp.response_tokens[~exp.action_mask].tolist())
    assert "no valid action" in masked and "Guess a number from 1 to 10." in masked


def test_step_form_marks_episodes_steps_and_states(rft_model):
    task = guess_task(always("5"), repeat_times=2, max_steps=3, experience_form="step",
                      reward="sum")
    experiences = EnvironmentWorkflow(task, rft_model).run()
    assert len(experiences) == 6
    episodes = {exp.info["episode"] for exp in experiences}
    assert len(episodes) == 2
    first = experiences[:3]
    assert [exp.eid.step for exp in first] == [0, 1, 2]
    assert [exp.info["step_reward"] for exp in first] == pytest.approx([-0.1] * 3)
    assert all(exp.reward == pytest.approx(-0.3) for exp in first)
    assert first[0].info["env_state_hash"] == state_hash("Guess a number from 1 to 10.")
    assert first[1].info["env_state_hash"] == state_hash("Wrong, lower.")
    assert experiences[3].info["env_state_hash"] == first[0].info["env_state_hash"]
    assert all(exp.metrics["step_wise/steps"] == 3.0 for exp in experiences)


def test_step_form_terminal_reward_sits_on_the_last_step(rft_model):
    task = guess_task(always("5"), max_steps=2, experience_form="step")
    steps = EnvironmentWorkflow(task, rft_model).run()
    assert [exp.info["step_reward"] for exp in steps] == pytest.approx([0.0, -0.1])


def test_a_reusable_environment_serves_every_episode_and_is_closed(rft_model):
    EnvironmentWorkflow(guess_task(always("3"), repeat_times=3), rft_model).run()
    assert (Guess.instances, Guess.closes) == (1, 1)
    EnvironmentWorkflow(guess_task(always("3"), env=OneShot, repeat_times=3), rft_model).run()
    assert (Guess.instances, Guess.closes) == (4, 4)


@pytest.mark.parametrize("env, line", [
    (Raising, "step raised ValueError: the board is on fire"),
    (Hanging, "step did not return within 0.5 s"),
])
def test_a_failing_environment_is_one_line_and_closed(rft_model, env, line):
    task = guess_task(always("3"), env=env, env_timeout=0.5)
    with pytest.raises(EnvironmentFailure) as caught:
        EnvironmentWorkflow(task, rft_model).run()
    message = str(caught.value)
    assert line in message and env.__name__ in message and "\n" not in message
    assert Guess.closes == 1


def test_the_parser_is_looked_up_by_name_when_the_task_has_none(rft_model):
    task = dataclasses.replace(guess_task(None, action_parser="action_tag"))
    workflow = EnvironmentWorkflow(task, rft_model)
    assert workflow.parser() is ACTION_PARSERS["action_tag"]
    assert EnvironmentWorkflow(guess_task(None), rft_model).parser() is ACTION_PARSERS["raw"]
