"""rft-plugin-asymre: Asymmetric REINFORCE (Arnal et al., 2025,
https://arxiv.org/abs/2506.20520), as Trinity-RFT's ``asymre``.

Registered names: algorithm ``asymre``; advantage fn ``asymre`` (group mean plus a
baseline shift). The policy loss is OPMD's ``−A · log π / (1 + τ)`` (``opmd`` from
rft-plugin-opmd).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from rft import hookimpl
from rft.algorithm import rl_preset
from rft.contracts import AdvantageInputs
from rft.group_ops import group_ids, group_stats, outcome_scores

__all__ = ["ASYMREArgs", "PRESET", "asymre_advantages"]


@dataclass
class ASYMREArgs:
    """Arguments of the ``asymre`` advantage (``algorithm.advantage_fn_args``)."""

    baseline_shift: float = -0.1
    """``δ`` added to the group mean to form the baseline ``V = mean + δ``; ``δ < 0``
    weights positive rewards more than negative ones (the paper's asymmetry)."""


def asymre_advantages(inputs: AdvantageInputs, args: ASYMREArgs
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """AsymRE advantage: the outcome reward minus a shifted group baseline.

    With ``r_i = Σ_t token_level_rewards_it`` and ``g`` the group of sample ``i``
    (``n = |g|``)::

        V_g  = mean_{j∈g} r_j + δ        (n > 1)
        V_g  = 0                         (a singleton: no baseline, as Trinity-RFT)
        A_it = (r_i − V_g) · mask_it

    ``returns`` is the same tensor.
    """
    with torch.no_grad():
        scores = outcome_scores(inputs.token_level_rewards)  # (B,)
        counts, mean, _ = group_stats(scores, group_ids(inputs.index, scores.device))  # (B,)
        baseline = torch.where(counts > 1, mean + args.baseline_shift,
                               torch.zeros_like(mean))  # (B,)
        advantages = (scores - baseline).unsqueeze(-1) * inputs.response_mask  # (B, T)
    return advantages, advantages


asymre_advantages.Args = ASYMREArgs  # type: ignore[attr-defined]

PRESET = rl_preset("asymre", policy_loss_fn="opmd", kl_loss_fn="none",
                   entropy_loss_fn="none", use_reference=False)
"""AsymRE: shifted-baseline advantages, OPMD's REINFORCE loss, no KL, no entropy term,
no reference model, 2 rollouts per task (Trinity-RFT's defaults)."""


@hookimpl
def register_algorithms() -> dict[str, Any]:
    return {"asymre": PRESET}


@hookimpl
def register_advantage_fns() -> dict[str, Any]:
    return {"asymre": asymre_advantages}
