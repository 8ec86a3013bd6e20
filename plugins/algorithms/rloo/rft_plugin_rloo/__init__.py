"""rft-plugin-rloo: REINFORCE Leave-One-Out (https://arxiv.org/abs/2402.14740).

Registered names: algorithm ``rloo``; advantage fn ``rloo``. Equal to veRL 0.9.1's
``compute_rloo_outcome_advantage``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from rft import hookimpl
from rft.algorithm import rl_preset
from rft.contracts import AdvantageInputs
from rft.group_ops import group_ids, group_stats, outcome_scores

__all__ = ["PRESET", "RLOOArgs", "rloo_advantages"]


@dataclass
class RLOOArgs:
    """Arguments of the ``rloo`` advantage: none (veRL's ``epsilon`` is unused there)."""


def rloo_advantages(inputs: AdvantageInputs, args: RLOOArgs
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """RLOO: each sample's baseline is the mean reward of the *other* samples of its group.

    ``A_i = r_i − mean_{j≠i} r_j = n/(n−1) · (r_i − μ_g)`` for a group of ``n > 1``;
    a singleton keeps ``A_i = r_i`` (veRL). ``A_it = A_i · mask_it``; ``returns`` is the
    same tensor.
    """
    with torch.no_grad():
        scores = outcome_scores(inputs.token_level_rewards)  # (B,)
        counts, mean, _ = group_stats(scores, group_ids(inputs.index, scores.device))
        scale = counts / (counts - 1).clamp_min(1)
        scalars = torch.where(counts > 1, scores * scale - mean * scale, scores)  # (B,)
        advantages = scalars.unsqueeze(-1) * inputs.response_mask  # (B, T)
    return advantages, advantages


rloo_advantages.Args = RLOOArgs  # type: ignore[attr-defined]

PRESET = rl_preset("rloo")
"""RLOO: leave-one-out advantages with the clipped surrogate and a k2 KL loss."""


@hookimpl
def register_algorithms() -> dict[str, Any]:
    return {"rloo": PRESET}


@hookimpl
def register_advantage_fns() -> dict[str, Any]:
    return {"rloo": rloo_advantages}
