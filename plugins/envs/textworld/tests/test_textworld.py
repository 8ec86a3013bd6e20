"""``textworld`` environment: games made by TextWorld's generator in a tmp folder, played
through TextWorld's engine (walkthrough wins, a wrong command, truncation, determinism,
missing files), and SFT rows from walkthroughs."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from rft.environment import EnvironmentFailure
from rft.plugins import PluginRegistry
from rft.testing.checks import check_environment
from rft.workflow import Task
from rft_plugin_textworld import (
    TextWorldArgs,
    TextWorldEnvironment,
    clean_feedback,
    write_sft_rows,
)
from rft_plugin_textworld.environment import MAX_COMMAND_CHARS, clean_command
from rft_plugin_textworld.make_games import QUESTS, make_games

QUEST_KINDS = ("take", "open", "take_from", "put")


@pytest.fixture(scope="session")
def games(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict]]:
    """Three tiny games (seeded), one split; their folder and rows."""
    out = tmp_path_factory.mktemp("tw_games")
    rows = make_games(out, count=3, seed=7, quests=QUEST_KINDS)["games"]
    return out, rows


def task(row: dict, index: int = 0) -> Task:
    return Task(raw=row, index=index, taskset="games")


def test_registered_by_this_distribution():
    registration = PluginRegistry.create().registration("environment", "textworld")
    assert registration.distribution == "rft-plugin-textworld"
    assert registration.implementation is TextWorldEnvironment


def test_games_are_written_with_their_rows(games):
    out, rows = games
    assert [json.loads(line) for line in (out / "games.jsonl").read_text().splitlines()] == rows
    for row in rows:
        assert (out / row["game_file"]).is_file()
        assert len(row["walkthrough"]) == QUESTS[row["kind"]]


def test_walkthrough_wins_every_game(games):
    out, rows = games
    env = TextWorldEnvironment(TextWorldArgs(game_dir=str(out)))
    try:
        for i, row in enumerate(rows):
            obs, info = env.reset(task(row, i))
            assert row["objective"] in obs and "$$" not in obs and not obs.startswith("\n")
            assert info["won"] is False and info["score"] == 0 and info["max_score"] == 1
            total = 0.0
            for n, command in enumerate(row["walkthrough"], 1):
                assert command in info["admissible_actions"]
                result = env.step(command)
                info = result.info
                total += result.reward
                assert result.terminated is (n == len(row["walkthrough"]))
            assert result.info["won"] is True and result.info["score"] == 1
            assert total == 1.0 and not result.truncated
            assert "RESTART" not in result.observation and ">" not in result.observation
            with pytest.raises(EnvironmentFailure, match="textworld: step"):
                env.step("look")
    finally:
        env.close()
        env.close()  # idempotent


def test_a_wrong_command_changes_nothing_and_the_episode_truncates(games):
    out, rows = games
    env = TextWorldEnvironment(TextWorldArgs(game_dir=str(out), max_episode_steps=2))
    try:
        obs0, info0 = env.reset(task(rows[0]))
        first = env.step("eat the moon")
        assert (first.reward, first.terminated, first.truncated) == (0.0, False, False)
        assert first.info["won"] is False and first.observation
        assert first.info["admissible_actions"] == info0["admissible_actions"]
        second = env.step("look")
        assert second.truncated and not second.terminated and second.reward == 0.0
        # a new episode of the same game starts over
        assert env.reset(task(rows[0])) == (obs0, info0)
    finally:
        env.close()


def test_show_admissible_lists_the_commands(games):
    out, rows = games
    env = TextWorldEnvironment(TextWorldArgs(game_dir=str(out), show_admissible=True))
    try:
        obs, info = env.reset(task(rows[0]))
        assert obs.endswith("Admissible commands: " + ", ".join(info["admissible_actions"]))
    finally:
        env.close()


def test_the_same_seed_makes_the_same_games(games, tmp_path):
    out, rows = games
    again = make_games(tmp_path, count=3, seed=7, quests=QUEST_KINDS)["games"]
    assert again == rows
    other = make_games(tmp_path / "other", count=3, seed=8, quests=QUEST_KINDS)["games"]
    assert [r["objective"] for r in other] != [r["objective"] for r in rows]
    first = TextWorldEnvironment(TextWorldArgs(game_dir=str(out)))
    second = TextWorldEnvironment(TextWorldArgs(game_dir=str(tmp_path)))
    try:
        for row in rows:
            assert first.reset(task(row)) == second.reset(task(row))
            for command in row["walkthrough"]:
                assert first.step(command) == second.step(command)
    finally:
        first.close()
        second.close()


def test_heldout_games_differ_from_training_games(tmp_path):
    splits = make_games(tmp_path, count=4, heldout=2, seed=3, quests=("take",))
    assert [len(splits["train"]), len(splits["heldout"])] == [2, 2]
    assert (tmp_path / "train.jsonl").is_file() and (tmp_path / "heldout.jsonl").is_file()
    env = TextWorldEnvironment(TextWorldArgs(game_dir=str(tmp_path)))
    try:
        train = {env.reset(task(row))[0] for row in splits["train"]}
        heldout = {env.reset(task(row))[0] for row in splits["heldout"]}
    finally:
        env.close()
    assert len(train) == 2 and len(heldout) == 2 and not train & heldout
    names = [r["game_file"] for r in splits["train"] + splits["heldout"]]
    assert len(set(names)) == 4


def test_a_missing_game_file_is_one_line(tmp_path):
    env = TextWorldEnvironment(TextWorldArgs(game_dir=str(tmp_path)))
    with pytest.raises(EnvironmentFailure) as failure:
        env.reset(task({"game_file": "nope.z8"}))
    message = str(failure.value)
    assert "\n" not in message and str(tmp_path / "nope.z8") in message
    assert "environment_args.game_dir" in message
    with pytest.raises(EnvironmentFailure, match="no 'game_file'"):
        env.reset(task({"game": "x.z8"}))


def test_bad_generator_arguments_are_one_line(tmp_path):
    with pytest.raises(ValueError, match="unknown quest kind"):
        make_games(tmp_path, count=1, quests=("dance",))
    with pytest.raises(ValueError, match="heldout < count"):
        make_games(tmp_path, count=2, heldout=2)


def test_clean_feedback_drops_banner_prompt_and_end_screen():
    text = ("\n\n   ________  \n  |  $$  \\ \n   \\$$$$$$  \n\nYour goal: take the pen.\n\n\n\n"
            "-= Attic =-\nThis is a small attic.\n\n\n>     -= Attic =-0/1")
    assert clean_feedback(text) == ("Your goal: take the pen.\n\n-= Attic =-\n"
                                    "This is a small attic.")
    end = ("\nYou take the pen.\n\n\nYour score has just gone up by one point.\n\n\n"
           "       *** The End ***\n\nWould you like to RESTART, RESTORE a saved game, "
           "QUIT or UNDO the last command?\n>   -= Attic =-1/1")
    assert clean_feedback(end) == ("You take the pen.\n\nYour score has just gone up by "
                                   "one point.")


def test_sft_rows_replay_the_walkthrough_in_the_workflow_prompt(games, tmp_path):
    out, rows = games
    sft = tmp_path / "sft.jsonl"
    assert write_sft_rows(out / "games.jsonl", sft, repeat=2) == 6
    chats = [json.loads(line)["messages"] for line in sft.read_text().splitlines()]
    env = TextWorldEnvironment(TextWorldArgs(game_dir=str(out)))
    try:
        for chat, row in zip(chats, rows):
            assert chat[0] == {"role": "system", "content": env.system_prompt()}
            assert [m["role"] for m in chat[1:]] == ["user", "assistant"] * len(row["walkthrough"])
            assert [m["content"] for m in chat[2::2]] == row["walkthrough"]
            obs, _ = env.reset(task(row))
            assert chat[1]["content"] == obs
    finally:
        env.close()
    assert chats[3:] == chats[:3]


def test_passes_the_environment_kit(games):
    out, rows = games
    args = TextWorldArgs(game_dir=str(out), max_episode_steps=3)
    trajectories = check_environment(TextWorldEnvironment, rows, args=args, seed=0)
    assert len(trajectories) == len(rows)
    walked = check_environment(TextWorldEnvironment, rows[:1], args=args,
                               actions=rows[0]["walkthrough"])
    assert walked[0][1][-1][1:3] == (1.0, True)  # the walkthrough's last step wins


def test_episodes_in_many_threads_at_once(games):
    """environment_workflow runs environment calls in threads: TextWorld's shared parsers
    broke under that ('RulePreconditionNode' object is not iterable, pop from empty list)."""
    out, rows = games

    def play(i: int) -> bool:
        row = rows[i % len(rows)]
        env = TextWorldEnvironment(TextWorldArgs(game_dir=str(out)))
        try:
            env.reset(task(row, i))
            result = None
            for command in row["walkthrough"]:
                result = env.step(command)
            return bool(result and result.info["won"])
        finally:
            env.close()

    with ThreadPoolExecutor(max_workers=8) as pool:
        assert all(pool.map(play, range(16)))


@pytest.mark.parametrize("command", ["quit", "restart", "save", "Q", "undo"])
def test_interpreter_commands_do_not_reach_the_game(games, command):
    out, rows = games
    env = TextWorldEnvironment(TextWorldArgs(game_dir=str(out), max_episode_steps=5))
    try:
        _, info = env.reset(task(rows[0]))
        result = env.step(command)
        assert result.observation == "That command is not available in this game."
        assert (result.reward, result.terminated, result.truncated) == (0.0, False, False)
        assert result.info == info
        for walk in rows[0]["walkthrough"]:
            result = env.step(walk)
        assert result.info["won"]
    finally:
        env.close()


def test_any_reply_is_a_safe_command(games):
    """A model writes any bytes: frotz killed the process (SIGSEGV) on the first reply
    (a tiny model's, during GRPO) and dumb-frotz hung on the last (its ``\\`` commands)."""
    out, rows = games
    env = TextWorldEnvironment(TextWorldArgs(game_dir=str(out), max_episode_steps=50))
    try:
        env.reset(task(rows[0]))
        for reply in ["bocontent\ufffd\ufffd\x14\ufffd la\ufffd", "se\x1b:\x00\x7f", "é" * 500,
                      "take\tapple\r\n", "x" * 1000,
                      "\\nThe =-\\ coin adventure"]:
            result = env.step(reply)
            assert isinstance(result.observation, str) and not result.terminated
    finally:
        env.close()
    assert clean_command("  take\t\x14apple\ufffd ") == "take apple"
    assert clean_command("\\help me") == "help me"
    assert len(clean_command("x " * 500)) == MAX_COMMAND_CHARS
