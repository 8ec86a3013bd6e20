"""The replay buffer's built-in priority functions (``replay_buffer.priority_fn``).

- ``linear_decay``: ``priority = model_version − decay · use_count`` (fresh, rarely used
  experiences first).
- ``linear_decay_use_count_control_randomization``: the same priority plus uniform noise
  ``U(0, sigma)``, and experiences used ``use_count_limit`` times are removed.
- ``decay_limit_randomization``: Trinity-RFT's current name of that function, with its
  noise: Gaussian ``N(0, sigma²)``; ``use_count_limit ≤ 0`` means no limit.
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


# Args on a function: the dataclass of its *_args (rft.hookspecs)
linear_decay.Args = LinearDecayArgs  # type: ignore[attr-defined]


def randomized_linear_decay(item: ReplayItem, args: RandomizedDecayArgs,
                            rng: random.Random) -> float:
    """``model_version − decay · use_count + U(0, sigma)``."""
    noise = rng.uniform(0.0, args.sigma) if args.sigma > 0 else 0.0
    return item.experience.model_version - args.decay * item.use_count + noise


# Args on a function: the dataclass of its *_args (rft.hookspecs)
randomized_linear_decay.Args = RandomizedDecayArgs  # type: ignore[attr-defined]


@dataclass
class DecayLimitRandomizationArgs:
    """Arguments of ``decay_limit_randomization`` (Trinity-RFT's names and defaults)."""

    decay: float = 2.0
    """Priority lost per use."""
    use_count_limit: int | None = 3
    """Experiences used this many times are removed; ``0``, a negative number or ``null``:
    no limit (normalised to ``None``, which the replay buffer reads as no limit)."""
    sigma: float = 0.0
    """Standard deviation of the Gaussian noise added to the priority (``0``: none)."""

    def __post_init__(self) -> None:
        if self.use_count_limit is not None and self.use_count_limit <= 0:
            self.use_count_limit = None
        if self.sigma < 0:
            raise ValueError(f"sigma must be >= 0, got {self.sigma}")


def decay_limit_randomization(item: ReplayItem, args: DecayLimitRandomizationArgs,
                              rng: random.Random) -> float:
    """``model_version − decay · use_count + N(0, sigma²)`` (Trinity-RFT's
    ``LinearDecayUseCountControlPriority``)."""
    noise = rng.gauss(0.0, args.sigma) if args.sigma > 0 else 0.0
    return item.experience.model_version - args.decay * item.use_count + noise


# Args on a function: the dataclass of its *_args (rft.hookspecs)
decay_limit_randomization.Args = DecayLimitRandomizationArgs  # type: ignore[attr-defined]


@hookimpl
def register_priority_fns() -> dict[str, Any]:
    return {"linear_decay": linear_decay,
            "linear_decay_use_count_control_randomization": randomized_linear_decay,
            "decay_limit_randomization": decay_limit_randomization}
