"""``alfworld``: a hand-written game on ALFWorld's own PDDL domain and grammar, played by
the alfworld package's TextWorld path (real Fast Downward grounding); rows, the game
folder's one-line messages, Trinity-RFT's workflow names and RAFT reply format."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rft.errors import RftError
from rft.plugins import PluginRegistry
from rft.testing.checks import check_environment
from rft.workflow import Task
from rft_plugin_alfworld import (
    AlfWorldArgs,
    AlfWorldEnvironment,
    experience_think_action,
    game_file_of,
    make_game,
    write_taskset,
)
from rft_plugin_alfworld.games import main as games_main
from rft_plugin_alfworld.workflows import (
    RAFTAlfWorldArgs,
    StepWiseAlfWorldArgs,
    AlfWorldWorkflowArgs,
)

PROBLEM = Path(__file__).parent / "data" / "tiny_apple.pddl"
GOAL = "put some apple on diningtable"
WALKTHROUGH = ["go to countertop 1", "take apple 1 from countertop 1", "go to diningtable 1",
               "move apple 1 to diningtable 1"]


def task(raw: dict, prompt: str | None = None, index: int = 0) -> Task:
    return Task(raw=raw, index=index, taskset="alf", prompt=prompt)


@pytest.fixture(scope="module")
def games(tmp_path_factory) -> Path:
    """A game folder with the tiny game (``tiny/game.tw-pddl``)."""
    folder = tmp_path_factory.mktemp("alfworld_games")
    make_game(PROBLEM.read_text(), GOAL, folder / "tiny")
    return folder


@pytest.fixture(scope="module")
def env(games):
    environment = AlfWorldEnvironment(AlfWorldArgs(data_path=str(games), walkthrough=True))
    yield environment
    environment.close()


def test_registered_by_this_distribution():
    registry = PluginRegistry.create()
    assert registry.registration("environment", "alfworld").implementation \
        is AlfWorldEnvironment
    for name in ("alfworld_workflow", "alfworld_workflow_v2", "step_wise_alfworld_workflow",
                 "RAFT_alfworld_workflow", "RAFT_reflect_alfworld_workflow"):
        assert registry.registration("workflow", name).distribution == "rft-plugin-alfworld"
    assert registry.registration("action_parser", "experience_think_action").implementation \
        is experience_think_action


def test_the_planners_walkthrough_wins_the_game(env):
    observation, info = env.reset(task({"game_file": "tiny/game.tw-pddl"}))
    assert observation.startswith("-= Welcome to TextWorld, ALFRED! =-")
    assert "you see a countertop 1, a diningtable 1, and a fridge 1" in observation
    assert info["task"] == GOAL and info["walkthrough"] == WALKTHROUGH
    assert "go to countertop 1" in info["admissible_commands"]
    results = [env.step(action) for action in info["walkthrough"]]
    assert [r.reward for r in results] == [0.0, 0.0, 0.0, 1.0]
    assert [r.terminated for r in results] == [False, False, False, True]
    assert results[1].observation == "You pick up the apple 1 from the countertop 1."
    assert results[-1].info["won"]
    late = env.step("look")
    assert late.terminated and late.reward == 0.0


def test_an_unknown_command_changes_nothing(env):
    first, _ = env.reset(task({"game_file": "tiny/game.tw-pddl"}))
    result = env.step("fly to the moon")
    assert result.observation == "Nothing happens." and result.reward == 0.0
    assert not result.terminated
    again, _ = env.reset(task({"game_file": "tiny/game.tw-pddl"}))
    assert again == first


def test_keeps_the_environment_contract(games):
    (trajectory,) = check_environment(AlfWorldEnvironment,
                                      [{"game_file": str(games / "tiny" / "game.tw-pddl")}],
                                      args=AlfWorldArgs(), timeout=120.0)
    assert trajectory


def test_rows_name_games_by_path_or_prompt(games, monkeypatch):
    absolute = games / "tiny" / "game.tw-pddl"
    assert game_file_of(task({"game_file": str(absolute)}), None) == absolute
    assert game_file_of(task({}, prompt="tiny/game.tw-pddl"), str(games)) == absolute
    monkeypatch.setenv("ALFWORLD_DATA", str(games))
    assert game_file_of(task({"game_file": "tiny/game.tw-pddl"}), None) == absolute


def test_missing_games_are_one_line(tmp_path, games, monkeypatch):
    monkeypatch.delenv("ALFWORLD_DATA", raising=False)
    empty = tmp_path / "empty"
    empty.mkdir()
    cases = [
        (AlfWorldArgs(data_path=str(tmp_path / "nowhere")), {"game_file": "a/game.tw-pddl"},
         "the game folder .*nowhere does not exist .*alfworld-download"),
        (AlfWorldArgs(data_path=str(empty)), {"game_file": "a/game.tw-pddl"},
         "the game folder .*empty holds no \\*.tw-pddl game .*needs the internet"),
        (AlfWorldArgs(data_path=str(games)), {"game_file": "other/game.tw-pddl"},
         "row 3: game file .*other/game.tw-pddl not found"),
        (AlfWorldArgs(), {"question": "?"}, "row 3 names no game"),
    ]
    for args, raw, message in cases:
        environment = AlfWorldEnvironment(args)
        with pytest.raises(RftError, match=message) as caught:
            environment.reset(task(raw, index=3))
        assert "\n" not in str(caught.value)
        environment.close()


def test_a_taskset_is_written_from_a_game_folder(games, tmp_path, capsys):
    out = tmp_path / "tasks.jsonl"
    assert write_taskset(games, out) == 1
    assert [json.loads(line) for line in out.read_text().splitlines()] == [
        {"game_file": "tiny/game.tw-pddl"}]
    assert games_main([str(games), str(out)]) == 0
    with pytest.raises(SystemExit):
        games_main([str(tmp_path / "none"), str(out)])
    assert capsys.readouterr().err.startswith("rft: environment 'alfworld': the game folder")


@pytest.mark.parametrize("reply, action", [
    ("<experience>Look first.</experience><think>Go.</think><action>go to fridge 1</action>",
     "go to fridge 1"),
    ("<experience> e </experience>\n\n<think> t </think>\n\n<action> look </action>", "look"),
    ("<think>Go.</think><action>look</action>", None),           # no experience part
    ("<experience>e</experience><think></think><action>look</action>", None),  # empty think
    ("<action>look</action><experience>e</experience><think>t</think>", None),  # order
])
def test_raft_replies_need_experience_think_and_action(reply, action):
    assert experience_think_action(reply) == action


def test_trinity_args_and_defaults():
    assert AlfWorldWorkflowArgs(max_env_steps=12).max_steps == 12
    assert AlfWorldWorkflowArgs().unfinished_reward == -0.1
    assert StepWiseAlfWorldArgs().experience_form == "step"
    raft = RAFTAlfWorldArgs()
    assert (raft.max_steps, raft.action_parser, raft.unfinished_reward) == \
        (50, "experience_think_action", 0.0)
    with pytest.raises(ValueError, match="max_env_steps 12 differs from max_steps 20"):
        AlfWorldWorkflowArgs(max_steps=20, max_env_steps=12)


def test_games_load_and_play_on_threads_at_once(games):
    """Two runner threads loading games at once (TextWorld's parser alone is not
    thread-safe): both play the walkthrough to a win."""
    from concurrent.futures import ThreadPoolExecutor

    def play(_: int) -> float:
        environment = AlfWorldEnvironment(AlfWorldArgs(data_path=str(games)))
        try:
            environment.reset(task({"game_file": "tiny/game.tw-pddl"}))
            return sum(environment.step(action).reward for action in WALKTHROUGH)
        finally:
            environment.close()

    with ThreadPoolExecutor(max_workers=3) as pool:
        assert list(pool.map(play, range(3))) == [1.0, 1.0, 1.0]


def test_without_the_alfworld_engine_the_reset_says_so_in_one_line(games, monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "fast_downward", None)
    environment = AlfWorldEnvironment(AlfWorldArgs(data_path=str(games)))
    with pytest.raises(RftError, match="the alfworld package cannot be imported .*"
                                       "scripts/setup.sh") as caught:
        environment.reset(task({"game_file": "tiny/game.tw-pddl"}))
    assert "\n" not in str(caught.value)


@pytest.fixture(scope="module")
def long_model(tmp_path_factory):
    """The tiny model with room for ALFWorld's prompts (4 new tokens a reply)."""
    from rft.engines.engine import SamplingArgs
    from rft.engines.hf_engine import HFEngine
    from rft.rollout.model_wrapper import ModelWrapper
    from rft.testing.tiny_model import build_tiny_model

    path = build_tiny_model(tmp_path_factory.mktemp("tiny"), seed=0)
    return ModelWrapper(HFEngine(str(path), max_model_len=4096, max_response_tokens=4, seed=0),
                        SamplingArgs(temperature=1.0, max_tokens=4))


@pytest.mark.parametrize("form, actions, reward, step_rewards", [
    ("step", WALKTHROUGH, 1.0, [0.0, 0.0, 0.0, 1.0]),       # won on the 4th step
    ("step", ["look"] * 4, -0.1, [0.0, 0.0, 0.0, -0.1]),    # not won: Trinity's -0.1
    ("episode", ["look"] * 4, -0.1, None),
])
def test_trinity_workflows_reward_a_win_and_not_a_failure(games, long_model, form, actions,
                                                          reward, step_rewards):
    from rft_plugin_alfworld.workflows import AlfWorldWorkflow, StepWiseAlfWorldWorkflow

    scripted = iter(actions)
    workflow_class = StepWiseAlfWorldWorkflow if form == "step" else AlfWorldWorkflow
    args = workflow_class.Args(max_env_steps=4)
    run = Task(raw={"game_file": "tiny/game.tw-pddl"}, index=0, taskset="alf", repeat_times=1,
               workflow_args=args, environment=AlfWorldEnvironment,
               environment_args=AlfWorldArgs(data_path=str(games)),
               action_parser=lambda reply: next(scripted))
    experiences = workflow_class(run, long_model).run()
    assert [e.reward for e in experiences] == [pytest.approx(reward)] * len(experiences)
    if step_rewards is not None:
        assert [e.info["step_reward"] for e in experiences] == pytest.approx(step_rewards)
    else:
        assert len(experiences) == 1 and experiences[0].metrics["env/steps"] == 4.0
