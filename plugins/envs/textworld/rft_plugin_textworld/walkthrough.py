"""SFT rows from TextWorld walkthroughs: each game played with its walkthrough through the
real engine, written as a chat in the prompt format of ``environment_workflow``.

A row is ``{"messages": [system, user: observation 0, assistant: command 0, user:
observation 1, assistant: command 1, ...]}``: the system message is the environment's
:meth:`~rft_plugin_textworld.environment.TextWorldEnvironment.system_prompt`, each user
message the observation the command answers, each assistant message one walkthrough
command; the chat ends with the command that wins the game.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from rft.environment import EnvironmentFailure
from rft.workflow import Task
from rft_plugin_textworld.environment import TextWorldArgs, TextWorldEnvironment


def walkthrough_messages(env: TextWorldEnvironment, row: dict[str, Any]) -> list[dict[str, str]]:
    """Play ``row``'s game with its ``walkthrough`` in ``env``; the chat of the episode.

    :raises EnvironmentFailure: the row has no walkthrough, or it does not win the game.
    """
    commands = row.get("walkthrough")
    if not isinstance(commands, list) or not commands:
        raise EnvironmentFailure(f"textworld: game {row.get('game_file')!r} has no "
                                 f"'walkthrough' in its task row")
    messages: list[dict[str, str]] = []
    system = env.system_prompt()
    if system:
        messages.append({"role": "system", "content": system})
    observation, _ = env.reset(Task(raw=row, index=0, taskset="walkthrough"))
    result = None
    for command in commands:
        messages.append({"role": "user", "content": observation})
        messages.append({"role": "assistant", "content": command})
        result = env.step(command)
        observation = result.observation
    if result is None or not result.info.get("won"):
        raise EnvironmentFailure(f"textworld: the walkthrough {commands} does not win game "
                                 f"{row.get('game_file')!r}")
    return messages


def write_sft_rows(tasks: str | os.PathLike[str], out: str | os.PathLike[str], *,
                   args: TextWorldArgs | None = None, repeat: int = 1) -> int:
    """Write one ``messages`` row per game of the taskset file ``tasks`` (JSON lines with
    ``game_file`` and ``walkthrough``) to ``out``, each ``repeat`` times.

    :param args: the environment's args (as the RL taskset's ``environment_args``: the same
        ``show_admissible`` and system prompt make the same prompts); ``None``: defaults,
        with ``game_dir`` the folder of ``tasks``.
    :return: rows written.
    """
    args = args if args is not None else TextWorldArgs(game_dir=str(Path(tasks).parent))
    env = TextWorldEnvironment(args)
    rows = 0
    try:
        with open(tasks) as src, open(out, "w") as dst:
            chats = [walkthrough_messages(env, json.loads(line)) for line in src if line.strip()]
            for _ in range(repeat):
                for chat in chats:
                    dst.write(json.dumps({"messages": chat}) + "\n")
                    rows += 1
    finally:
        env.close()
    return rows


__all__ = ["walkthrough_messages", "write_sft_rows"]
