"""ALFWorld game files: finding them, naming them from task rows, and making new ones.

An ALFWorld game is a ``game.tw-pddl`` file: JSON with the ALFRED PDDL domain
(``pddl_domain``), the text grammar (``grammar``, its ``UNKNOWN GOAL`` replaced by the task
sentence), one PDDL problem (``pddl_problem``) and ``solvable``. ``alfworld-download`` fetches
some 8,800 of them (it needs the internet); :func:`make_game` writes one from a problem of
your own on the domain and grammar the ``alfworld`` wheel ships.

Rows name a game with ``game_file`` (Trinity-RFT's column, also read from the prompt when
``format.prompt_key: game_file``): an absolute path, or one relative to the game folder —
``environment_args.data_path``, else ``$ALFWORLD_DATA``.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from rft.errors import RftError

if TYPE_CHECKING:
    from rft.workflow import Task

NAME = "alfworld"
"""Name of the environment in every message."""

GAME_SUFFIX = ".tw-pddl"

DOWNLOAD_HINT = ("alfworld-download fetches ALFWorld's games and needs the internet; "
                 "rft_plugin_alfworld.games.make_game writes games of your own")


def data_folder(data_path: str | None) -> Path | None:
    """The game folder: ``data_path``, else ``$ALFWORLD_DATA`` (``None``: neither set)."""
    folder = data_path or os.environ.get("ALFWORLD_DATA")
    return Path(folder).expanduser() if folder else None


def find_games(folder: Path) -> list[Path]:
    """Every ``*.tw-pddl`` game under ``folder``, sorted.

    :raises RftError: the folder is missing or holds no game; one line that says so.
    """
    games = sorted(folder.rglob(f"*{GAME_SUFFIX}")) if folder.is_dir() else []
    if not games:
        state = "holds no *.tw-pddl game" if folder.is_dir() else "does not exist"
        raise RftError(f"environment '{NAME}': the game folder {folder} {state} "
                       f"(environment_args.data_path or ALFWORLD_DATA); {DOWNLOAD_HINT}")
    return games


def game_file_of(task: Task, data_path: str | None) -> Path:
    """The game file a task row names (module docstring).

    :raises RftError: the row names none, or the file is not there; one line.
    """
    where = f"environment '{NAME}': taskset '{task.taskset}' row {task.index}"
    name = task.raw.get("game_file")
    if not isinstance(name, str) or not name:
        name = task.prompt
    if not isinstance(name, str) or not name.strip():
        raise RftError(f"{where} names no game: give 'game_file' (a *.tw-pddl path)")
    path = Path(name.strip()).expanduser()
    folder = data_folder(data_path)
    if not path.is_absolute() and folder is not None:
        path = folder / path
    if not path.is_file():
        if folder is not None and not name.strip().startswith(("/", "~")):
            find_games(folder)  # raises when the folder is missing or holds no game
        raise RftError(f"{where}: game file {path} not found; {DOWNLOAD_HINT}")
    return path


def make_game(problem: str, goal: str, out_dir: Path, walkthrough: list[str] | None = None
              ) -> Path:
    """Write ``out_dir/game.tw-pddl``: ``problem`` (PDDL on the ALFRED domain) with
    alfworld's own domain and grammar, the grammar's goal sentence set to ``goal``.

    :param walkthrough: commands that win the game (stored; TextWorld's planner finds one
        when absent).
    :return: the game file.
    """
    from alfworld.info import ALFRED_PDDL_PATH, ALFRED_TWL2_PATH

    grammar = Path(ALFRED_TWL2_PATH).read_text().replace("UNKNOWN GOAL", goal)
    game = {"pddl_domain": Path(ALFRED_PDDL_PATH).read_text(), "grammar": grammar,
            "pddl_problem": problem, "solvable": True}
    if walkthrough is not None:
        game["walkthrough"] = list(walkthrough)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"game{GAME_SUFFIX}"
    path.write_text(json.dumps(game))
    return path


def write_taskset(folder: Path, out: Path) -> int:
    """Write a JSONL taskset with one row ``{"game_file": ...}`` per game under ``folder``
    (paths relative to it); return the number of rows."""
    games = find_games(folder)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w") as handle:
        for game in games:
            handle.write(json.dumps({"game_file": str(game.relative_to(folder))}) + "\n")
    return len(games)


def main(argv: list[str] | None = None) -> int:
    """``python -m rft_plugin_alfworld.games DATA_PATH OUT.jsonl``: a taskset of the games
    under DATA_PATH."""
    parser = argparse.ArgumentParser(prog="python -m rft_plugin_alfworld.games",
                                     description=main.__doc__)
    parser.add_argument("data_path", type=Path)
    parser.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    try:
        count = write_taskset(args.data_path, args.out)
    except RftError as exc:
        parser.exit(1, f"rft: {exc}\n")
    print(f"{count} games -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
