"""The ``algorithm`` section's check: the preset and every algorithm function resolved."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rft.algorithm import AlgorithmPreset
from rft.config.findings import Findings
from rft.config.plan import LossPlan, Selected
from rft.config.schema import RftConfig
from rft.contracts import needs_values
from rft.config.rollout_correction_spec import parse_is_threshold, parse_rejection
from rft.plugin_kinds import (
    ADVANTAGE_FN,
    ALGORITHM,
    ENTROPY_LOSS_FN,
    EXPERIENCE_OPERATOR,
    KL_FN,
    POLICY_LOSS_FN,
    SAMPLE_STRATEGY,
)


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
    check_rollout_correction(c, found)
    if a.add_strategy is not None:  # derivation appended it to the experience pipeline
        found.select(EXPERIENCE_OPERATOR, "algorithm.add_strategy", a.add_strategy)
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


def check_rollout_correction(c: RftConfig, found: Findings) -> None:
    """``algorithm.rollout_correction``: the levels, options and thresholds parse (as
    veRL parses them), and bypass mode comes without weights or rejection (veRL applies
    those inside its bypass loss, which rft does not implement)."""
    rc = c.algorithm.rollout_correction
    key = "algorithm.rollout_correction"
    if rc.rollout_is is not None:
        try:
            parse_is_threshold(rc.rollout_is_threshold)
        except ValueError as exc:
            found.problem(f"{key}.rollout_is_threshold", str(exc))
    if rc.rollout_rs is not None:
        try:
            parse_rejection(rc.rollout_rs, rc.rollout_rs_threshold)
        except ValueError as exc:
            where = ("rollout_rs_threshold" if "threshold" in str(exc) or "bound" in str(exc)
                     else "rollout_rs")
            found.problem(f"{key}.{where}", str(exc))
    elif rc.rollout_rs_threshold is not None:
        found.warnings.append(f"{key}.rollout_rs_threshold: has no effect without rollout_rs")
    tree = c.trainer.trainer_config if isinstance(c.trainer.trainer_config, dict) else {}
    torch_node = tree.get("torch")
    torch_tree: dict[str, Any] = torch_node if isinstance(torch_node, dict) else {}
    if (rc.rollout_is is not None or rc.rollout_rs is not None) \
            and torch_tree.get("use_rollout_logprobs"):
        found.problem(key, "trainer.trainer_config.torch.use_rollout_logprobs makes "
                           "old_log_prob the engine's log-probs: the ratio would be 1 and "
                           "nothing corrected; drop one of the two")
    if rc.bypass_mode and (rc.rollout_is is not None or rc.rollout_rs is not None):
        found.problem(f"{key}.bypass_mode",
                      "with rollout_is / rollout_rs is not implemented (veRL applies them "
                      "inside its bypass loss); use bypass_mode: false (decoupled: weights "
                      "on the trainer's old_log_prob) or leave rollout_is / rollout_rs unset")


def check_optimizer(c: RftConfig, found: Findings) -> None:
    """``algorithm.optimizer``: a positive learning rate, a warm-up ratio within [0, 1]."""
    opt = c.algorithm.optimizer
    if opt.lr <= 0:
        found.problem("algorithm.optimizer.lr", f"must be > 0, got {opt.lr}")
    if not 0.0 <= opt.lr_warmup_steps_ratio <= 1.0:
        found.problem("algorithm.optimizer.lr_warmup_steps_ratio",
                      f"must be within [0, 1], got {opt.lr_warmup_steps_ratio}")


__all__ = ["AlgorithmChoice", "check_algorithm", "check_optimizer"]
