"""rft-plugin-alfworld: environment ``alfworld``, ALFWorld's household text games on
TextWorld's PDDL engine (the ``alfworld`` package's TextWorld path); Trinity-RFT's ALFWorld
workflow names (:mod:`rft_plugin_alfworld.workflows`) and its RAFT reply format as the
action parser ``experience_think_action``."""

from __future__ import annotations

from typing import Callable

from rft import hookimpl
from rft.environment import Environment
from rft_plugin_alfworld.env import AlfWorldArgs, AlfWorldEnvironment, alfworld_missing
from rft_plugin_alfworld.games import find_games, game_file_of, make_game, write_taskset
from rft_plugin_alfworld.workflows import WORKFLOWS, experience_think_action

__all__ = ["AlfWorldArgs", "AlfWorldEnvironment", "alfworld_missing",
           "experience_think_action", "find_games", "game_file_of", "make_game",
           "write_taskset"]


@hookimpl
def register_environments() -> dict[str, type[Environment]]:
    return {"alfworld": AlfWorldEnvironment}


@hookimpl
def register_workflows() -> dict[str, type]:
    return dict(WORKFLOWS)


@hookimpl
def register_action_parsers() -> dict[str, Callable[[str], str | None]]:
    return {"experience_think_action": experience_think_action}
