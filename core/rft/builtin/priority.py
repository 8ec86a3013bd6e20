"""The replay buffer's built-in priority functions (``replay_buffer.priority_fn``).

- ``linear_decay``: ``priority = model_version − decay · use_count`` (fresh, rarely used
  experiences first).
- ``linear_decay_use_count_control_randomization``: the same priority plus uniform noise
  ``U(0, sigma)``, and experiences used ``use_count_limit`` times are removed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from rft.buffer.replay import ReplayItem
from rft.hookspecs import hookimpl


@dataclass
class LinearDecayArgs:
    """Arguments of ``linear_decay`` (``replay_buffer.priority_fn_args``)."""

    decay: float = 2.0
    """Priority lost per use."""


@dataclass
class RandomizedDecayArgs:
    """Arguments of ``linear_decay_use_count_control_randomization``."""

    decay: float = 2.0
    """Priority lost per use."""
    use_count_limit: int = 3
    """Experiences used this many times are removed."""
    sigma: float = 0.0
    """Width of the uniform noise added to the priority."""


def linear_decay(item: ReplayItem, args: LinearDecayArgs, rng: random.Random) -> float:
    """``model_version − decay · use_count``."""
    return item.experience.model_version - args.decay * item.use_count


linear_decay.Args = LinearDecayArgs  # type: ignore[attr-defined]


def randomized_linear_decay(item: ReplayItem, args: RandomizedDecayArgs,
                            rng: random.Random) -> float:
    """``model_version − decay · use_count + U(0, sigma)``."""
    noise = rng.uniform(0.0, args.sigma) if args.sigma > 0 else 0.0
    return item.experience.model_version - args.decay * item.use_count + noise


randomized_linear_decay.Args = RandomizedDecayArgs  # type: ignore[attr-defined]


@hookimpl
def register_priority_fns() -> dict[str, Any]:
    return {"linear_decay": linear_decay,
            "linear_decay_use_count_control_randomization": randomized_linear_decay}
