"""The FrozenLake game the workflow plays: gymnasium's ``FrozenLakeEnv`` on a map drawn
per task, rendered as text, with actions read from the model's reply.

Map cells: ``S`` start, ``F`` frozen, ``H`` hole, ``G`` goal. Rendered for the model:
``P`` player, ``_`` frozen, ``O`` hole, ``G`` goal, ``X`` the player in a hole, ``√`` the
player on the goal; cells separated by tabs, one row per line.
"""

from __future__ import annotations

import re
from collections import deque

import numpy as np
from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv

ACTIONS = {"left": 1, "down": 2, "right": 3, "up": 4}
"""The model's actions (Trinity-RFT's numbering, 1 … 4)."""
GYM_ACTION = {1: 0, 2: 1, 3: 2, 4: 3}
"""Our action → gymnasium's (0 left, 1 down, 2 right, 3 up)."""
_BLOCK = re.compile(r"```(.*?)```", re.DOTALL)


def parse_action(reply: str) -> int | None:
    """The action in the reply's last ```` ``` ```` block: a direction name (any case) or
    its number 1 … 4; ``None`` when there is no valid one."""
    blocks = _BLOCK.findall(reply)
    return parse_move(blocks[-1]) if blocks else None


def parse_move(action: str) -> int | None:
    """A direction name (any case) or its number 1 … 4 → the move; else ``None``."""
    text = action.strip().lower()
    if text in ACTIONS:
        return ACTIONS[text]
    if text.isdigit() and int(text) in GYM_ACTION:
        return int(text)
    return None


def shortest_path(board: list[str]) -> int | None:
    """Fewest moves from ``S`` to ``G`` around the holes, or ``None`` if unreachable."""
    size_r, size_c = len(board), len(board[0])
    start = next((r, c) for r in range(size_r) for c in range(size_c) if board[r][c] == "S")
    seen, queue = {start}, deque([(start, 0)])
    while queue:
        (r, c), steps = queue.popleft()
        if board[r][c] == "G":
            return steps
        for dr, dc in ((1, 0), (-1, 0), (0, 1), (0, -1)):
            nr, nc = r + dr, c + dc
            if (0 <= nr < size_r and 0 <= nc < size_c and (nr, nc) not in seen
                    and board[nr][nc] != "H"):
                seen.add((nr, nc))
                queue.append(((nr, nc), steps + 1))
    return None


def generate_map(size: int, p: float, seed: int, max_steps: int,
                 max_tries: int = 10_000) -> list[str]:
    """A random ``size × size`` map (each tile frozen with probability ``p``, else a hole)
    with distinct random start and goal, whose goal is reachable in at most ``max_steps``
    moves; deterministic for ``seed``."""
    if size < 2:
        raise ValueError(f"a FrozenLake map needs size >= 2, got {size}")
    rng = np.random.default_rng(seed)
    p = min(1.0, max(0.0, p))
    for _ in range(max_tries):
        tiles = rng.choice(["F", "H"], size=(size, size), p=[p, 1 - p])
        board = [list(row) for row in tiles]
        cells = rng.choice(size * size, size=2, replace=False)
        (sr, sc), (gr, gc) = divmod(int(cells[0]), size), divmod(int(cells[1]), size)
        board[sr][sc], board[gr][gc] = "S", "G"
        rows = ["".join(row) for row in board]
        steps = shortest_path(rows)
        if steps is not None and steps <= max_steps:
            return rows
    raise ValueError(f"no FrozenLake map of size {size} with p={p} has its goal within "
                     f"{max_steps} steps after {max_tries} tries")


class FrozenLakeGame:
    """One map, played from its start as often as :meth:`reset` is called.

    :param desc: the map rows (``S``, ``F``, ``H``, ``G``).
    :param is_slippery: a move may go sideways (gymnasium's slippery ice).
    :param seed: seed of gymnasium's generator (slippery moves).
    """

    def __init__(self, desc: list[str], *, is_slippery: bool = False, seed: int = 0) -> None:
        if sum(row.count("S") for row in desc) != 1 or sum(row.count("G") for row in desc) < 1:
            raise ValueError(f"a FrozenLake map needs one S and a G, got {desc}")
        self.desc = list(desc)
        self.env = FrozenLakeEnv(desc=self.desc, is_slippery=is_slippery)
        self.seed = seed
        self.episodes = 0

    def reset(self) -> None:
        """Back to the start (a new episode)."""
        self.env.reset(seed=self.seed + self.episodes)
        self.episodes += 1

    @property
    def position(self) -> tuple[int, int]:
        """``(row, column)`` of the player."""
        return divmod(int(self.env.s), int(self.env.ncol))

    def tile(self) -> str:
        """The map tile under the player."""
        row, col = self.position
        return self.desc[row][col]

    def finished(self) -> bool:
        return self.tile() in "GH"

    def success(self) -> bool:
        return self.tile() == "G"

    def step(self, action: int | None) -> tuple[float, bool]:
        """Play ``action`` (1 … 4, ``None``: invalid, nothing happens): ``(reward, done)``,
        reward 1 on reaching the goal, else 0; done on the goal or in a hole."""
        if self.finished():
            return (1.0 if self.success() else 0.0), True
        if action not in GYM_ACTION:
            return 0.0, False
        _, reward, terminated, _, _ = self.env.step(GYM_ACTION[action])
        return float(reward), bool(terminated)

    def render(self) -> str:
        """The map as the model sees it (module docstring)."""
        here = self.position
        lines = []
        for r, row in enumerate(self.desc):
            cells = []
            for c, tile in enumerate(row):
                if (r, c) == here:
                    cells.append({"H": "X", "G": "√"}.get(tile, "P"))
                else:
                    cells.append({"S": "_", "F": "_", "H": "O", "G": "G"}[tile])
            lines.append("\t".join(cells))
        return "\n".join(lines)


__all__ = ["ACTIONS", "FrozenLakeGame", "generate_map", "parse_action", "shortest_path"]
