"""Make TextWorld games offline with TextWorld's own generator, deterministic for a seed.

Two kinds of game:

- ``simple`` (the default): one room built with :class:`textworld.GameMaker` from a fixed
  small vocabulary (:data:`OBJECTS`, :data:`CONTAINERS`, :data:`ROOMS`), a one-sentence
  room description and a one-sentence goal (``Your goal: take the apple.``); the quest is one of
  :data:`QUESTS`: ``take`` an object lying in the room (1 command), ``open`` a closed
  container (1), ``take_from`` an object inside a closed container (2: open it, take it),
  ``put`` an object into a closed container (3: open, take, insert). Other objects and
  containers of the vocabulary lie around as distractors. Small enough for a tiny model.
- ``random``: :func:`textworld.generator.make_game` with ``world_size`` rooms,
  ``nb_objects`` objects and a quest of ``quest_length`` commands (what ``tw-make custom``
  makes), TextWorld's full vocabulary.

Each game is compiled by TextWorld's Inform 7 compiler (shipped in its wheel) to
``<out>/<prefix>_<i>.z8`` with its ``.json`` beside it; the task rows (``game_file``
relative to ``out``, ``objective``, ``walkthrough``, ``kind``) go to ``<out>/<split>.jsonl``.
With ``heldout > 0`` the games are split into ``train.jsonl`` and ``heldout.jsonl`` with no
game (same quest and same room contents) in both.

Command line::

    python -m rft_plugin_textworld.make_games OUT --count 64 --heldout 32 --seed 1
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

OBJECTS = ("apple", "coin", "key", "book", "pen", "cup", "ball", "lamp")
"""Objects of ``simple`` games."""
CONTAINERS = ("box", "chest", "crate")
"""Containers of ``simple`` games."""
ROOMS = ("kitchen", "attic", "cellar", "garden")
"""Rooms of ``simple`` games."""
QUESTS = {"take": 1, "open": 1, "take_from": 2, "put": 3}
"""Quest kinds of ``simple`` games and their walkthrough length."""


@dataclass(frozen=True)
class SimpleGame:
    """The plan of one ``simple`` game (what makes two games the same)."""

    quest: str
    """One of :data:`QUESTS`."""
    room: str
    """The room's name."""
    target: str
    """The object the quest is about (the container for ``open``)."""
    container: str | None
    """The container of ``take_from`` / ``put``; ``None`` for the others."""
    floor: tuple[str, ...]
    """Objects lying in the room (distractors, and the target of ``take`` / ``put``)."""
    containers: tuple[str, ...]
    """Closed containers in the room (the quest's among them)."""
    inside: tuple[tuple[str, str], ...] = field(default=())
    """``(object, container)`` pairs: objects inside containers."""

    def room_description(self) -> str:
        """The room's text (the objects on the floor are listed by the game itself)."""
        things = " and ".join(f"a closed {name}" for name in self.containers)
        return f"This is a small {self.room}. You see {things}."

    def objective(self) -> str:
        """The goal as the game states it (one short sentence)."""
        if self.quest in ("take", "open"):
            return f"Your goal: {self.quest} the {self.target}."
        if self.quest == "take_from":
            return f"Your goal: take the {self.target} from the {self.container}."
        return f"Your goal: put the {self.target} into the {self.container}."

    def commands(self) -> list[str]:
        """The walkthrough."""
        if self.quest == "take":
            return [f"take {self.target}"]
        if self.quest == "open":
            return [f"open {self.target}"]
        if self.quest == "take_from":
            return [f"open {self.container}", f"take {self.target} from {self.container}"]
        return [f"open {self.container}", f"take {self.target}",
                f"insert {self.target} into {self.container}"]


def plan_simple(rng: random.Random, quests: tuple[str, ...]) -> SimpleGame:
    """Draw one ``simple`` game plan (module docstring)."""
    quest = rng.choice(quests)
    room = rng.choice(ROOMS)
    objects = rng.sample(OBJECTS, 3)
    containers = tuple(rng.sample(CONTAINERS, 2))
    if quest == "take":
        return SimpleGame(quest, room, objects[0], None, tuple(objects[:rng.randint(2, 3)]),
                          containers[:rng.randint(1, 2)])
    if quest == "open":
        return SimpleGame(quest, room, containers[0], None, tuple(objects[:rng.randint(1, 2)]),
                          containers, ((objects[2], containers[0]),))
    if quest == "take_from":
        return SimpleGame(quest, room, objects[0], containers[0],
                          tuple(objects[1:rng.randint(2, 3)]), containers,
                          ((objects[0], containers[0]),))
    return SimpleGame(quest, room, objects[0], containers[0], tuple(objects[:rng.randint(1, 2)]),
                      containers)


def build_simple(plan: SimpleGame, seed: int, path: Path) -> Any:
    """Build ``plan`` with :class:`textworld.GameMaker` and compile it to ``path``.

    :return: the compiled :class:`textworld.Game`.
    """
    import textworld
    import textworld.generator
    from textworld import GameMaker
    from textworld.generator.game import Event, Quest

    options = textworld.GameOptions()
    options.seeds = seed
    maker = GameMaker(options)
    room = maker.new_room(plan.room, desc=plan.room_description())
    maker.set_player(room)
    entities: dict[str, Any] = {}
    for name in plan.containers:
        entities[name] = maker.new(type="c", name=name)
        entities[name].add_property("closed")
        room.add(entities[name])
    for name in plan.floor:
        entities[name] = maker.new(type="o", name=name)
        room.add(entities[name])
    for name, container in plan.inside:
        entities[name] = maker.new(type="o", name=name)
        entities[container].add(entities[name])
    # the quest as its winning condition (not set_quest_from_commands, which compiles and
    # plays a second game to record the actions: twice the time)
    target = entities[plan.target]
    if plan.quest == "open":
        goal = maker.new_fact("open", target)
    elif plan.quest == "put" and plan.container is not None:
        goal = maker.new_fact("in", target, entities[plan.container])
    else:
        goal = maker.new_fact("in", target, maker.inventory)
    event = Event(conditions=[goal])
    maker.quests = [Quest(win_events=[event], desc=plan.objective(), commands=plan.commands())]
    game = maker.build()
    game.metadata["walkthrough"] = plan.commands()
    game.objective = plan.objective()
    options.path = str(path)
    options.force_recompile = True
    textworld.generator.compile_game(game, options)
    return game


def build_random(seed: int, path: Path, *, world_size: int, nb_objects: int,
                 quest_length: int) -> Any:
    """A game of :func:`textworld.generator.make_game` (``tw-make custom``), compiled to
    ``path``."""
    import textworld
    import textworld.generator

    options = textworld.GameOptions()
    options.seeds = seed
    options.nb_rooms = world_size
    options.nb_objects = nb_objects
    options.quest_length = quest_length
    options.path = str(path)
    options.force_recompile = True
    game = textworld.generator.make_game(options)
    textworld.generator.compile_game(game, options)
    return game


def make_games(out: str | os.PathLike[str], *, count: int, seed: int = 0, heldout: int = 0,
               kind: str = "simple", quests: tuple[str, ...] = ("take", "open"),
               world_size: int = 3, nb_objects: int = 5, quest_length: int = 2,
               prefix: str = "game") -> dict[str, list[dict[str, Any]]]:
    """Generate ``count`` distinct games into ``out`` and write their task rows.

    :param count: games in all (train and held-out).
    :param seed: master seed: the same seed makes the same games.
    :param heldout: games of ``count`` that go to ``heldout.jsonl``; the rest go to
        ``train.jsonl`` (``0``: all to ``games.jsonl``).
    :param kind: ``simple`` or ``random`` (module docstring).
    :param quests: quest kinds of ``simple`` games (:data:`QUESTS`).
    :return: ``{split: rows}`` as written.
    """
    if kind not in ("simple", "random"):
        raise ValueError(f"make_games: kind must be 'simple' or 'random', got {kind!r}")
    unknown = [q for q in quests if q not in QUESTS]
    if unknown:
        raise ValueError(f"make_games: unknown quest kind(s) {unknown}; known: {list(QUESTS)}")
    if not 0 <= heldout < count or count < 1:
        raise ValueError(f"make_games: need count >= 1 and 0 <= heldout < count, got "
                         f"count={count}, heldout={heldout}")
    warnings.filterwarnings("ignore", message=".*is not fully supported")  # jericho's note
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    seen: set[SimpleGame] = set()
    tries = 0
    while len(rows) < count:
        tries += 1
        if tries > 100 * count:
            raise ValueError(f"make_games: only {len(rows)} distinct {kind} games with quests "
                             f"{list(quests)} after {tries} draws; ask for fewer")
        game_seed = rng.randrange(2**31)
        name = f"{prefix}_{len(rows):04d}.z8"
        path = out_dir / name
        if kind == "simple":
            plan = plan_simple(rng, tuple(quests))
            if plan in seen:
                continue
            seen.add(plan)
            game = build_simple(plan, game_seed, path)
            row: dict[str, Any] = {"game_file": name, "kind": plan.quest,
                                   "walkthrough": plan.commands()}
        else:
            game = build_random(game_seed, path, world_size=world_size, nb_objects=nb_objects,
                                quest_length=quest_length)
            row = {"game_file": name, "kind": "random",
                   "walkthrough": list(game.metadata.get("walkthrough") or [])}
        row["objective"] = game.objective
        row["seed"] = game_seed
        ni = path.with_suffix(".ni")
        if ni.exists():
            ni.unlink()
        rows.append(row)
    splits = ({"train": rows[:count - heldout], "heldout": rows[count - heldout:]} if heldout
              else {"games": rows})
    for split, split_rows in splits.items():
        with open(out_dir / f"{split}.jsonl", "w") as f:
            for row in split_rows:
                f.write(json.dumps(row) + "\n")
    return splits


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m rft_plugin_textworld.make_games",
        description="Generate TextWorld games offline (deterministic for a seed).")
    parser.add_argument("out", help="output folder")
    parser.add_argument("--count", type=int, required=True, help="games in all")
    parser.add_argument("--heldout", type=int, default=0,
                        help="games of --count written to heldout.jsonl (rest: train.jsonl)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kind", choices=("simple", "random"), default="simple")
    parser.add_argument("--quests", default="take,open",
                        help=f"simple games' quest kinds, comma-separated: {','.join(QUESTS)}")
    parser.add_argument("--world-size", type=int, default=3, help="random games: rooms")
    parser.add_argument("--nb-objects", type=int, default=5, help="random games: objects")
    parser.add_argument("--quest-length", type=int, default=2, help="random games: commands")
    args = parser.parse_args(argv)
    try:
        splits = make_games(args.out, count=args.count, seed=args.seed, heldout=args.heldout,
                            kind=args.kind, quests=tuple(args.quests.split(",")),
                            world_size=args.world_size, nb_objects=args.nb_objects,
                            quest_length=args.quest_length)
    except ValueError as exc:
        print(f"rft: {exc}", file=sys.stderr)
        return 2
    for split, rows in splits.items():
        print(f"{len(rows)} games -> {os.path.join(args.out, split + '.jsonl')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
