"""``frozen_lake_workflow``: Trinity-RFT's multi-turn FrozenLake game.

Each task is a map: the workflow arg ``desc`` (the same map for every task), else one drawn
from the row's ``size`` (default 4), ``p`` (chance a tile is frozen, 0.8) and ``seed``
(42) with its goal reachable within ``max_steps`` moves (Trinity-RFT's ``env_max_steps``).
Each episode the model sees the map and answers with a move in a ```` ``` ```` block
(``Up``, ``Down``, ``Left``, ``Right``, or 1 … 4); the game answers with the new map, until
the player reaches the goal (reward 1), falls into a hole (0), or ``max_steps`` moves
(``agent_max_steps`` when set) were made (0). A reply without a valid move leaves the
player where it is, and the next observation says so.

The episode is one experience (a :class:`~rft_plugin_workflows.multi_turn.MultiTurnWorkflow`):
the model's replies trained on, the game's messages masked out; metrics ``env_steps``,
``env_done``, ``success``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rft_plugin_frozen_lake.game import FrozenLakeGame, generate_map, parse_action
from rft_plugin_workflows.multi_turn import MultiTurnWorkflow

SYSTEM_PROMPT = """You are a helpful assistant walking on a frozen lake.

FrozenLake quick guide
Goal: reach the goal (G): the player (P) and the goal must overlap.

Symbols:
_ frozen | O hole | G goal | P player

Rules:
1. Do not fall into a hole (O).
2. The ice may be slippery: a move may go sideways instead.

Valid actions: Up | Down | Left | Right

Rewards:
Fall into a hole: 0
Reach the goal: +1.0

Each turn you get the current observation and decide the next action. Show your thinking,
then put the final action in ``` ```, for example ```Up``` to move up. Give only the NEXT
action each turn, and plan to reach the goal in as few steps as you can.
"""
"""The system prompt."""

EXAMPLES = """
Examples:

User: Current observation:
P\t_\t_\t_
_\t_\t_\tO
O\t_\tO\t_
O\t_\t_\tG
Assistant: G is at the bottom right. Right is free of holes, so I move right. Action: ```Right```

User: Current observation:
_\t_\t_\t_
_\t_\t_\tO
_\tO\t_\tP
O\t_\t_\tG
Assistant: G is right below P and nothing is in between. Action: ```Down```

User: Current observation:
_\t_\t_\t_
_\t_\t_\tO
_\tO\t_\tO
O\tG\tP\t_
Assistant: P is next to G but not on it yet: G is to the left. Action: ```Left```
"""
"""Worked examples added to the system prompt with ``use_multistep_prompt``."""


@dataclass
class FrozenLakeArgs:
    """Arguments of ``frozen_lake_workflow`` (``workflow_args``; Trinity-RFT's names)."""

    max_steps: int | None = None
    """Most moves (model turns) per episode, and the map's bound: its goal is reachable
    within this many moves; ``None``: ``env_max_steps``, else 10."""
    env_max_steps: int | None = None
    """Trinity-RFT's name of ``max_steps`` (its AgentScope FrozenLake example); setting both
    to different values is refused."""
    agent_max_steps: int | None = None
    """Most model turns per episode when it differs from ``max_steps`` (Trinity-RFT's
    AgentScope example: the agent's turn limit, the map still drawn for ``max_steps``);
    ``None``: ``max_steps``."""
    use_multistep_prompt: bool = False
    """Add worked examples to the system prompt."""
    desc: list[str] | None = None
    """A fixed map for every task (rows of ``S``, ``F``, ``H``, ``G``); ``None``: each
    task's own random map."""
    is_slippery: bool = False
    """Slippery ice: a move may go sideways (gymnasium's dynamics)."""
    max_model_len: int | None = None
    """Accepted for Trinity-RFT configs and ignored (as there): the engine's
    ``max_model_len`` bounds the conversation."""

    def __post_init__(self) -> None:
        if (self.env_max_steps is not None and self.max_steps is not None
                and self.env_max_steps != self.max_steps):
            raise ValueError(f"env_max_steps {self.env_max_steps} differs from max_steps "
                             f"{self.max_steps} (Trinity-RFT's name of it); set one")
        if self.max_steps is None:
            self.max_steps = self.env_max_steps if self.env_max_steps is not None else 10
        self.env_max_steps = self.max_steps
        for name in ("max_steps", "agent_max_steps"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")

    @property
    def steps(self) -> int:
        """Moves per episode and the map's bound (``max_steps`` resolved)."""
        assert self.max_steps is not None
        return self.max_steps

    @property
    def turns(self) -> int:
        """Model turns per episode: ``agent_max_steps``, else ``max_steps``."""
        return self.agent_max_steps if self.agent_max_steps is not None else self.steps


class FrozenLakeWorkflow(MultiTurnWorkflow):
    """FrozenLake episodes (module docstring)."""

    Args = FrozenLakeArgs

    def __init__(self, task: Any, model: Any, auxiliary_models: Any = None) -> None:
        super().__init__(task, model, auxiliary_models)
        args = self.options
        row = task.raw or {}
        seed = int(row.get("seed", 42))
        desc = args.desc or generate_map(int(row.get("size", 4)), float(row.get("p", 0.8)),
                                         seed, args.steps)
        self.game = FrozenLakeGame(desc, is_slippery=args.is_slippery, seed=seed)

    @property
    def options(self) -> FrozenLakeArgs:
        return self.args if self.args is not None else FrozenLakeArgs()

    def turn_limit(self) -> int:
        return self.options.turns

    def reset(self) -> None:
        self.game.reset()
        self.steps = 0
        self.done = False
        self.reward = 0.0
        self.previous: str | None = None

    def observation(self) -> str:
        """The user message showing the current map."""
        board = self.game.render()
        text = (f"Current observation ({self.steps}):\n{board}\nYou have not reached the goal "
                "yet: P is not on G. Give the next action.")
        if self.steps > 0 and board == self.previous:
            text += ("\nYour last reply did not move you: the position did not change. Check "
                     "your reasoning and the format: give only the next action inside ``` ```, "
                     "e.g. ```Up``` to move up.")
        text += f"\nAt most {self.options.turns - self.steps} steps remain."
        self.previous = board
        return text

    def initial_messages(self) -> list[dict]:
        system = SYSTEM_PROMPT + (EXAMPLES if self.options.use_multistep_prompt else "")
        return [{"role": "system", "content": system},
                {"role": "user", "content": self.observation()}]

    def step(self, reply: str, turn: int) -> tuple[str | None, float]:
        reward, done = self.game.step(parse_action(reply))
        self.steps += 1
        if done:
            self.done, self.reward = True, reward
            return None, reward
        return self.observation(), 0.0

    def episode_metrics(self) -> dict[str, float]:
        return {"env_steps": float(self.steps), "env_done": float(self.done),
                "success": float(self.done and self.reward >= 1.0)}


__all__ = ["EXAMPLES", "FrozenLakeArgs", "FrozenLakeWorkflow", "SYSTEM_PROMPT"]
