"""``frozen_lake_workflow`` and environment ``frozen_lake``: the game by hand, the workflow
and the environment through rft's testing kit, and a tiny run selecting it by name."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rft.config.validate import build_args
from rft.plugins import PluginRegistry
from rft.testing.checks import check_environment, check_workflow
from rft.testing.strategies import workflow_tasks
from rft.workflow import Task
from rft_plugin_frozen_lake import (
    FrozenLakeArgs,
    FrozenLakeEnvArgs,
    FrozenLakeEnvironment,
    FrozenLakeGame,
    FrozenLakeWorkflow,
    generate_map,
    parse_action,
)
from rft_plugin_frozen_lake.game import shortest_path
from rft_plugin_workflows.environment import EnvironmentArgs, EnvironmentWorkflow


def test_registered_by_this_distribution():
    registration = PluginRegistry.create().registration("workflow", "frozen_lake_workflow")
    assert registration.distribution == "rft-plugin-frozen-lake"
    assert registration.implementation is FrozenLakeWorkflow


@pytest.mark.parametrize("reply, action", [
    ("I go right. ```Right```", 3), ("```up```", 4), ("```Left``` no, ```Down```", 2),
    ("``` 1 ```", 1), ("```5```", None), ("```jump```", None), ("Right", None), ("", None),
])
def test_actions_come_from_the_last_code_block(reply, action):
    assert parse_action(reply) == action


@given(size=st.integers(2, 6), p=st.floats(0.5, 1.0), seed=st.integers(0, 10**6),
       max_steps=st.integers(1, 12))
@settings(max_examples=50, deadline=None)
def test_maps_are_deterministic_and_solvable(size, p, seed, max_steps):
    board = generate_map(size, p, seed, max_steps)
    assert board == generate_map(size, p, seed, max_steps)
    assert len(board) == size and all(len(row) == size for row in board)
    assert sum(r.count("S") for r in board) == 1 and sum(r.count("G") for r in board) == 1
    assert set("".join(board)) <= set("SFHG")
    assert 1 <= shortest_path(board) <= max_steps


def test_map_arguments_are_checked():
    with pytest.raises(ValueError, match="size >= 2"):
        generate_map(1, 0.8, 0, 5)
    with pytest.raises(ValueError, match="one S and a G"):
        FrozenLakeGame(["FF", "FG"])
    assert shortest_path(["SH", "HG"]) is None


def test_the_game_by_hand():
    game = FrozenLakeGame(["SF", "HG"])
    game.reset()
    assert game.render() == "P\t_\nO\tG"
    assert game.step(None) == (0.0, False) and game.position == (0, 0)  # invalid: no move
    assert game.step(4) == (0.0, False) and game.position == (0, 0)     # up: into the wall
    assert game.step(3) == (0.0, False) and game.position == (0, 1)     # right
    assert game.step(2) == (1.0, True) and game.success()               # down: the goal
    assert game.render() == "_\t_\nO\t√"
    game.reset()
    assert game.position == (0, 0)
    assert game.step(2) == (0.0, True) and game.finished() and not game.success()  # hole
    assert game.render() == "_\t_\nX\tG"


def make_task(**kwargs) -> Task:
    base = dict(raw={"size": 3, "p": 0.8, "seed": 5}, index=0, taskset="t", prompt="",
                repeat_times=1, sampling={"max_tokens": 6})
    return Task(**{**base, **kwargs})


def test_the_workflow_talks_to_the_game(rft_model):
    task = make_task(workflow_args=FrozenLakeArgs(max_steps=3, desc=["SF", "HG"]))
    workflow = FrozenLakeWorkflow(task, rft_model)
    workflow.reset()
    system, user = workflow.initial_messages()
    assert "Up | Down | Left | Right" in system["content"] and "Example" not in system["content"]
    assert user["content"].startswith("Current observation (0):\nP\t_\nO\tG\n")
    assert user["content"].endswith("At most 3 steps remain.")
    observation, reward = workflow.step("hmm ```Up```", 0)
    assert reward == 0.0 and "did not move you" in observation
    observation, reward = workflow.step("```Right```", 1)
    assert reward == 0.0 and "did not move you" not in observation
    assert "Current observation (2):\n_\tP\nO\tG" in observation
    assert workflow.step("```Down```", 2) == (None, 1.0)
    assert workflow.episode_metrics() == {"env_steps": 3.0, "env_done": 1.0, "success": 1.0}
    examples = FrozenLakeWorkflow(dataclasses.replace(task, workflow_args=FrozenLakeArgs(
        use_multistep_prompt=True)), rft_model)
    examples.reset()
    assert "Examples:" in examples.initial_messages()[0]["content"]


def test_each_task_row_draws_its_own_map(rft_model):
    a = FrozenLakeWorkflow(make_task(), rft_model).game.desc
    assert a == generate_map(3, 0.8, 5, FrozenLakeArgs().max_steps)
    b = FrozenLakeWorkflow(make_task(raw={"size": 3, "seed": 6}), rft_model).game.desc
    assert a != b


@pytest.fixture(scope="module")
def long_model(rft_tiny_model):
    """The kit's ``rft_model`` with a context that holds a whole episode (the game's first
    prompt alone is ~415 tokens; a reply sampled from a left-truncated prompt is not
    trained on)."""
    from rft.engines.engine import SamplingArgs
    from rft.engines.hf_engine import HFEngine
    from rft.rollout.model_wrapper import ModelWrapper

    engine = HFEngine(str(rft_tiny_model), max_model_len=1024, max_response_tokens=8, seed=0)
    return ModelWrapper(engine, SamplingArgs(temperature=1.0, max_tokens=8))


def test_an_episode_is_one_experience_with_the_games_turns_masked(long_model):
    rft_model = long_model
    task = make_task(repeat_times=2, workflow_args=FrozenLakeArgs(max_steps=2, desc=["SF", "HG"]))
    experiences = FrozenLakeWorkflow(task, rft_model).run()
    assert len(experiences) == 2
    for exp in experiences:  # a random model never writes a move: two turns, no reward
        assert exp.reward == 0.0 and exp.metrics["multi_turn/turns"] == 2.0
        assert exp.metrics["env_steps"] == 2.0 and exp.metrics["success"] == 0.0
        mask = exp.action_mask
        assert bool(mask[0]) and not bool(mask.all())
        text = rft_model.tokenizer.decode(exp.response_tokens[~mask].tolist(),
                                          skip_special_tokens=False)
        assert "Current observation (1)" in text


def test_trinitys_env_max_steps_bounds_episodes_and_maps(rft_model):
    """``workflow_args: {env_max_steps: 2}`` (Trinity-RFT's AgentScope FrozenLake example)
    validates and is ``max_steps``: an episode of a model that never moves ends after two
    turns, and the map's goal is reachable within two moves; ``agent_max_steps`` sets the
    turns alone."""
    problems: list[str] = []
    args = build_args(FrozenLakeWorkflow, "frozen_lake_workflow", {"env_max_steps": 2},
                      "buffer.explorer_input.taskset.workflow_args", problems)
    assert problems == [] and args.max_steps == 2
    task = make_task(raw={"size": 4, "seed": 3}, workflow_args=args)
    workflow = FrozenLakeWorkflow(task, rft_model)
    assert workflow.game.desc == generate_map(4, 0.8, 3, 2)
    (exp,) = workflow.run()
    assert exp.metrics["env_steps"] == 2.0 and exp.metrics["multi_turn/turns"] == 2.0
    both = FrozenLakeArgs(env_max_steps=2, agent_max_steps=3, desc=["SF", "HG"])
    (exp,) = FrozenLakeWorkflow(make_task(workflow_args=both), rft_model).run()
    assert exp.metrics["env_steps"] == 3.0
    build_args(FrozenLakeWorkflow, "frozen_lake_workflow", {"env_max_steps": 2, "max_steps": 3},
               "w", problems)
    assert len(problems) == 1 and "env_max_steps 2 differs from max_steps 3" in problems[0]


@settings(max_examples=3, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(task=workflow_tasks(reward_fn=None))
def test_frozen_lake_keeps_the_contract(rft_model, task):
    task = dataclasses.replace(task, raw={"size": 3, "seed": task.index})
    check_workflow(FrozenLakeWorkflow, FrozenLakeArgs(max_steps=2), task, rft_model)


@pytest.mark.slow
def test_frozen_lake_trains_by_name(rft_run):
    taskset = "buffer.explorer_input.taskset"
    outcome = rft_run({f"{taskset}.default_workflow_type": "frozen_lake_workflow",
                       f"{taskset}.workflow_args": {"max_steps": 2},
                       "model.max_prompt_tokens": 1024})
    assert [s["rollout/experiences"] for s in outcome.metrics] == [4.0, 4.0]
    assert all(s["rollout/failed_tasks"] == 0.0 for s in outcome.metrics)


def test_the_environment_is_registered_by_this_distribution():
    registration = PluginRegistry.create().registration("environment", "frozen_lake")
    assert registration.distribution == "rft-plugin-frozen-lake"
    assert registration.implementation is FrozenLakeEnvironment


def test_the_environment_by_hand():
    env = FrozenLakeEnvironment(FrozenLakeEnvArgs(max_steps=3, desc=["SF", "HG"]))
    observation, info = env.reset(make_task())
    assert observation.startswith("Current observation (0):\nP\t_\nO\tG\n")
    assert observation.endswith("At most 3 steps remain.") and info == {"desc": ["SF", "HG"]}
    result = env.step("jump")
    assert "'jump' is not a move" in result.observation and not result.terminated
    result = env.step("right")
    assert "Current observation (2):\n_\tP\nO\tG" in result.observation
    result = env.step("2")
    assert (result.reward, result.terminated, result.info) == (1.0, True, {"won": True})
    env.reset(make_task())
    result = env.step("Down")
    assert (result.reward, result.terminated, result.info) == (0.0, True, {"won": False})
    assert "fell into a hole" in result.observation


def test_the_environment_truncates_after_max_steps_and_keeps_the_contract():
    env = FrozenLakeEnvironment(FrozenLakeEnvArgs(max_steps=2, desc=["SF", "HG"]))
    env.reset(make_task())
    assert not env.step("Up").truncated and env.step("Up").truncated
    check_environment(FrozenLakeEnvironment, [{"size": 3, "seed": 5}, {"size": 4, "seed": 2}],
                      FrozenLakeEnvArgs(max_steps=3), actions=["Down", "Right", "Up", "Left"])


def test_environment_workflow_plays_frozen_lake(rft_model):
    task = make_task(environment=FrozenLakeEnvironment,
                     environment_args=FrozenLakeEnvArgs(max_steps=2, desc=["SF", "HG"]),
                     workflow_args=EnvironmentArgs(max_steps=2), repeat_times=2)
    experiences = EnvironmentWorkflow(task, rft_model).run()
    assert len(experiences) == 2
    for exp in experiences:  # a random model never writes a move
        assert exp.reward == 0.0 and exp.metrics["env/steps"] == 2.0
        assert exp.metrics["env/invalid_actions"] == 2.0
        masked = rft_model.tokenizer.decode(exp.response_tokens[~exp.action_mask].tolist())
        assert "Put the action in a ``` ``` block." in masked
