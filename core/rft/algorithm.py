"""Algorithm presets: what ``algorithm.algorithm_type`` selects.

An algorithm plugin registers one :class:`AlgorithmPreset` per name through
``register_algorithms``. Validation copies every preset default into the ``algorithm``
section where the user left the field unset (``None``); a value the user wrote wins.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal


@dataclass(frozen=True)
class AlgorithmPreset:
    """Defaults and flags of one algorithm."""

    advantage_fn: str | None = None
    """Default advantage function name; ``None`` when the algorithm uses none (SFT, DPO)."""
    policy_loss_fn: str = "ppo"
    """Default policy loss function name."""
    kl_loss_fn: str = "none"
    """Default KL estimator used as a loss term (``none``: no KL loss)."""
    kl_penalty_fn: str = "none"
    """Default KL estimator subtracted from token-level rewards (``none``: no penalty)."""
    entropy_loss_fn: str = "none"
    """Default entropy loss function name."""
    sample_strategy: str = "default"
    """Default sample strategy name."""
    repeat_times: int = 1
    """Default rollouts per task."""
    min_repeat_times: int = 1
    """Smallest ``repeat_times`` the algorithm works with (group baselines need 2)."""
    fixed_repeat_times: int | None = None
    """When set, ``repeat_times`` is forced to this value (DPO: a chosen and a rejected)."""
    use_critic: bool = False
    """The trainer keeps a value model (PPO)."""
    use_reference: bool = False
    """The trainer keeps a frozen reference model (KL terms, DPO)."""
    advantage_in_explorer: bool = False
    """Advantages are computed by an experience operator in the explorer, not the trainer."""
    reward_baseline: Literal["none", "greedy"] = "none"
    """Baseline the explorer attaches to each training rollout as ``info["reward_baseline"]``:
    ``greedy`` is the reward of one greedy (temperature 0) response to the same task
    (ReMax); ``none``: no baseline."""
    train_only: bool = False
    """The algorithm learns from a fixed dataset: no explorer (SFT, DPO)."""
    experience_format: Literal["rollout", "sft", "dpo"] = "rollout"
    """What one training example looks like: a rollout, a prompt/response, a preference pair."""
    default_args: dict[str, dict[str, Any]] | None = None
    """Default ``*_args`` per algorithm field, e.g. ``{"advantage_fn_args": {"epsilon": 1e-6}}``."""


def rl_preset(advantage_fn: str, *, group: bool = True, **changes: Any) -> AlgorithmPreset:
    """The common online-RL preset, with ``changes`` applied.

    Clipped surrogate policy loss ``ppo``, ``k2`` KL loss against a reference model, no
    KL penalty, the ``default`` entropy term and sample strategy; group baselines
    (``group=True``) need at least two rollouts per task (``repeat_times = 2``).
    """
    repeats = 2 if group else 1
    base: dict[str, Any] = {
        "advantage_fn": advantage_fn, "policy_loss_fn": "ppo", "kl_loss_fn": "k2",
        "kl_penalty_fn": "none", "entropy_loss_fn": "default", "sample_strategy": "default",
        "repeat_times": repeats, "min_repeat_times": repeats, "use_reference": True,
    }
    return AlgorithmPreset(**{**base, **changes})
