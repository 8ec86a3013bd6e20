"""rft-plugin-alfworld: environment ``alfworld``, ALFWorld's household text games on
TextWorld's PDDL engine (the ``alfworld`` package's TextWorld path)."""

from __future__ import annotations

from rft import hookimpl
from rft.environment import Environment
from rft_plugin_alfworld.env import AlfWorldArgs, AlfWorldEnvironment, alfworld_missing
from rft_plugin_alfworld.games import find_games, game_file_of, make_game, write_taskset

__all__ = ["AlfWorldArgs", "AlfWorldEnvironment", "alfworld_missing", "find_games",
           "game_file_of", "make_game", "write_taskset"]


@hookimpl
def register_environments() -> dict[str, type[Environment]]:
    return {"alfworld": AlfWorldEnvironment}
