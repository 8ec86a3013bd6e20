"""rft-plugin-topr: Tapered Off-Policy REINFORCE (Le Roux et al., 2025,
https://arxiv.org/abs/2503.14286), as Trinity-RFT's ``topr``.

Registered names: algorithm ``topr``; policy loss fn ``topr``; advantage fn
``reinforce`` (the outcome reward itself, no baseline: TOPR's default in Trinity-RFT).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from rft import hookimpl
from rft.algorithm import rl_preset
from rft.contracts import AdvantageInputs, PolicyLossInputs
from rft.group_ops import outcome_scores
from rft.ops import masked_mean

__all__ = ["PRESET", "TOPRArgs", "reinforce_advantages", "topr_policy_loss"]


def reinforce_advantages(inputs: AdvantageInputs, args: None
                         ) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE without a baseline: ``A_it = r_i · mask_it`` with
    ``r_i = Σ_t token_level_rewards_it``; ``returns`` is the same tensor. Groups
    (``inputs.index``) are not used."""
    with torch.no_grad():
        scores = outcome_scores(inputs.token_level_rewards)  # (B,)
        advantages = scores.unsqueeze(-1) * inputs.response_mask  # (B, T)
    return advantages, advantages


@dataclass
class TOPRArgs:
    """Arguments of the ``topr`` policy loss (``algorithm.policy_loss_fn_args``)."""

    advantage_threshold: float = 0.0
    """Tokens with ``A ≤ advantage_threshold`` (the "negative" examples) are weighted by
    the truncated ratio ``min(r, 1)``; the others by 1."""


def topr_policy_loss(inputs: PolicyLossInputs, args: TOPRArgs
                     ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """TOPR's tapered REINFORCE per token.

    With ``r_t = exp(log π_t − log π_old,t)`` and ``α_t = clip(r_t, 0, 1)`` where
    ``A_t ≤ advantage_threshold``, else ``α_t = 1``::

        pg_loss_t = −sg(α_t) · A_t · log π_t          (∂/∂log π_t = −α_t · A_t)

    Positive examples get a plain (SFT-like) REINFORCE update whatever the ratio;
    negative ones are truncated-importance-weighted so that pushing their probability
    down stops once the policy has left them. Aggregated with the trainer's
    ``loss_agg_mode`` (Trinity-RFT's default: ``token-mean``).

    :return: ``pg_loss`` ``(B, T)`` and detached metrics ``avg_alpha``, ``avg_ratio``
        (masked means) and ``ppo_kl``.
    """
    log_prob, advantages, mask = inputs.log_prob, inputs.advantages, inputs.response_mask
    with torch.no_grad():
        log_ratio = log_prob - inputs.old_log_prob  # (B, T)
        ratio = torch.exp(log_ratio)  # (B, T)
        alpha = torch.where(advantages <= args.advantage_threshold,
                            ratio.clamp(0.0, 1.0), torch.ones_like(ratio))  # (B, T)
    pg_loss = -alpha * advantages * log_prob  # (B, T)
    with torch.no_grad():
        metrics = {
            "avg_alpha": masked_mean(alpha, mask),
            "avg_ratio": masked_mean(ratio, mask),
            "ppo_kl": masked_mean(-log_ratio, mask),
        }
    return pg_loss, metrics


topr_policy_loss.Args = TOPRArgs  # type: ignore[attr-defined]

PRESET = rl_preset("reinforce", group=False, policy_loss_fn="topr", repeat_times=2)
"""TOPR: REINFORCE advantages (the reward), the ``topr`` loss, k2 KL loss against a
reference model, the ``default`` entropy term, 2 rollouts per task (Trinity-RFT's
defaults); no group baseline, so one rollout per task also works."""


@hookimpl
def register_algorithms() -> dict[str, Any]:
    return {"topr": PRESET}


@hookimpl
def register_advantage_fns() -> dict[str, Any]:
    return {"reinforce": reinforce_advantages}


@hookimpl
def register_policy_loss_fns() -> dict[str, Any]:
    return {"topr": topr_policy_loss}
