"""The ``algorithm`` section's check: the preset and every algorithm function resolved."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rft.algorithm import AlgorithmPreset
from rft.config.findings import Findings
from rft.config.plan import LossPlan, Selected
from rft.config.schema import RftConfig
from rft.contracts import needs_values
from rft.plugin_kinds import ADVANTAGE_FN, ALGORITHM, ENTROPY_LOSS_FN, KL_FN, POLICY_LOSS_FN, SAMPLE_STRATEGY


@dataclass(frozen=True)
class AlgorithmChoice:
    """What :func:`check_algorithm` resolved."""

    preset: AlgorithmPreset
    """``algorithm.algorithm_type``'s preset."""
    loss: LossPlan | None
    """The actor loss's functions (``None``: the policy loss did not resolve)."""
    sample_strategy: Selected[Any] | None
    """``algorithm.sample_strategy``."""


def check_algorithm(c: RftConfig, found: Findings) -> AlgorithmChoice | None:
    """Resolve the preset and every algorithm function name with its args (the derived
    config holds the preset's defaults); ``None`` when the preset does not resolve."""
    a = c.algorithm
    chosen = found.select(ALGORITHM, "algorithm.algorithm_type", a.algorithm_type)
    check_optimizer(c, found)  # whether or not the preset resolves
    if chosen is None:
        return None
    preset = chosen.implementation
    if not isinstance(preset, AlgorithmPreset):
        found.problem("algorithm.algorithm_type",
                      f"plugin for {a.algorithm_type!r} registered a {type(preset).__name__}, "
                      "expected an AlgorithmPreset")
        return None
    if a.repeat_times is not None and a.repeat_times < preset.min_repeat_times:
        found.problem("algorithm.repeat_times",
                      f"{a.algorithm_type} needs repeat_times >= {preset.min_repeat_times}, "
                      f"got {a.repeat_times}")
    advantage = found.select(ADVANTAGE_FN, "algorithm.advantage_fn", a.advantage_fn,
                             a.advantage_fn_args)
    if advantage is not None and needs_values(advantage.implementation) \
            and not preset.use_critic:
        found.problem("algorithm.advantage_fn",
                      f"{a.advantage_fn!r} needs critic values, but {a.algorithm_type!r} "
                      "trains no critic; choose an advantage fn without a critic (e.g. the "
                      f"preset's {preset.advantage_fn!r}) or an algorithm with one (ppo)")
    policy_loss = found.select(POLICY_LOSS_FN, "algorithm.policy_loss_fn", a.policy_loss_fn,
                               a.policy_loss_fn_args)
    kl_loss = found.select(KL_FN, "algorithm.kl_loss_fn", a.kl_loss_fn, a.kl_loss_fn_args)
    kl_penalty = found.select(KL_FN, "algorithm.kl_penalty_fn", a.kl_penalty_fn,
                              a.kl_penalty_fn_args)
    entropy = found.select(ENTROPY_LOSS_FN, "algorithm.entropy_loss_fn", a.entropy_loss_fn,
                           a.entropy_loss_fn_args)
    sample_strategy = found.select(SAMPLE_STRATEGY, "algorithm.sample_strategy",
                                   a.sample_strategy, a.sample_strategy_args)
    loss = None if policy_loss is None else LossPlan(
        policy_loss=policy_loss, advantage=advantage, kl_loss=kl_loss, kl_penalty=kl_penalty,
        entropy=entropy, loss_agg_mode=a.loss_agg_mode or "token-mean")
    return AlgorithmChoice(preset, loss, sample_strategy)


def check_optimizer(c: RftConfig, found: Findings) -> None:
    """``algorithm.optimizer``: a positive learning rate, a warm-up ratio within [0, 1]."""
    opt = c.algorithm.optimizer
    if opt.lr <= 0:
        found.problem("algorithm.optimizer.lr", f"must be > 0, got {opt.lr}")
    if not 0.0 <= opt.lr_warmup_steps_ratio <= 1.0:
        found.problem("algorithm.optimizer.lr_warmup_steps_ratio",
                      f"must be within [0, 1], got {opt.lr_warmup_steps_ratio}")


__all__ = ["AlgorithmChoice", "check_algorithm", "check_optimizer"]
