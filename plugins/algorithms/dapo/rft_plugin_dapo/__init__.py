"""rft-plugin-dapo: Decoupled Clip and Dynamic sAmpling Policy Optimization (Yu et al.,
2025, https://arxiv.org/abs/2503.14476), as Trinity-RFT's ``dapo``.

Registered names: algorithm ``dapo`` (a preset over existing functions: ``grpo``
advantages from rft-plugin-grpo, the core's ``ppo`` loss with clip-higher); experience
operator ``overlong_penalty`` (DAPO's soft overlong punishment). Dynamic sampling is the
core's ``reward_std_filter`` operator; the token-level loss is ``loss_agg_mode:
token-mean``, rft's default.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rft import hookimpl
from rft.algorithm import AlgorithmPreset
from rft.buffer.operators import ExperienceOperator
from rft.experience import Experience

__all__ = ["OverlongPenalty", "OverlongPenaltyArgs", "PRESET", "overlong_penalty"]


@dataclass
class OverlongPenaltyArgs:
    """Arguments of the ``overlong_penalty`` operator
    (``data_processor.experience_pipeline.operators[i].args``)."""

    max_response_length: int = 20480
    """``L_max``: responses longer than this get the full penalty; set it to
    ``model.max_response_tokens`` (the DAPO paper: 20480)."""
    cache_length: int = 4096
    """``L_cache``: the penalty ramps up linearly over the last ``cache_length`` tokens
    before ``L_max`` (the DAPO paper: 4096)."""
    penalty_factor: float = 1.0
    """The full penalty (subtracted from the reward)."""


def overlong_penalty(length: int, args: OverlongPenaltyArgs) -> float:
    """DAPO's soft overlong punishment of a response of ``length`` tokens::

        0                                      length ≤ L_max − L_cache
        (L_max − L_cache − length) / L_cache · f    L_max − L_cache < length ≤ L_max
        −f                                     length > L_max

    (``f = penalty_factor``), i.e. Trinity-RFT's ``math_dapo_reward`` with
    ``enable_overlong_penalty``.
    """
    expected = args.max_response_length - args.cache_length
    if length <= expected:
        return 0.0
    if length > args.max_response_length:
        return -args.penalty_factor
    return (expected - length) / args.cache_length * args.penalty_factor


class OverlongPenalty(ExperienceOperator):
    """Add :func:`overlong_penalty` of each response's length to its reward (to the last
    response token's reward when the experience carries token-level rewards), and record
    it as ``Experience.metrics["overlong_penalty"]``. Experiences without a reward are
    left alone."""

    Args = OverlongPenaltyArgs

    def __init__(self, args: OverlongPenaltyArgs | None = None) -> None:
        super().__init__(args)
        a = self.args
        if a.cache_length <= 0 or a.max_response_length <= a.cache_length:
            raise ValueError(f"overlong_penalty: need 0 < cache_length < max_response_length, "
                             f"got cache_length={a.cache_length}, "
                             f"max_response_length={a.max_response_length}")

    def process(self, experiences: list[Experience]) -> tuple[list[Experience], dict[str, float]]:
        penalized, total = 0, 0.0
        for exp in experiences:
            penalty = overlong_penalty(exp.response_length, self.args)
            if exp.token_level_reward is not None and exp.token_level_reward.numel() > 0:
                shaped = exp.token_level_reward.clone()
                shaped[-1] += penalty
                exp.token_level_reward = shaped
            elif exp.reward is not None:
                exp.reward = exp.reward + penalty
            else:
                continue
            exp.metrics["overlong_penalty"] = penalty
            penalized += penalty < 0
            total += penalty
        return experiences, {"penalized": float(penalized),
                             "mean_penalty": total / len(experiences) if experiences else 0.0}


PRESET = AlgorithmPreset(
    advantage_fn="grpo",
    policy_loss_fn="ppo",
    kl_loss_fn="none",
    kl_penalty_fn="none",
    entropy_loss_fn="default",
    sample_strategy="default",
    repeat_times=16,
    min_repeat_times=2,
    default_args={"policy_loss_fn_args": {"clip_range_low": 0.2, "clip_range_high": 0.28}},
)
"""DAPO: GRPO advantages, the clipped surrogate with clip-higher (0.2 / 0.28), no KL and
no reference model, the ``default`` entropy term, 16 rollouts per task (Trinity-RFT's
``dapo`` defaults plus the paper's clip ranges)."""


@hookimpl
def register_algorithms() -> dict[str, Any]:
    return {"dapo": PRESET}


@hookimpl
def register_experience_operators() -> dict[str, Any]:
    return {"overlong_penalty": OverlongPenalty}
