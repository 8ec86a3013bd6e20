"""rft-plugin-remax: ReMax (https://arxiv.org/abs/2310.10505).

Registered names: algorithm ``remax``; advantage fn ``remax``. Equal to veRL 0.9.1's
``compute_remax_outcome_advantage``.

The baseline is the reward of the greedy response to the same prompt. The trainer passes
it as ``inputs.reward_baselines`` ``(B,)`` from ``Experience.info["reward_baseline"]``; the
preset's ``reward_baseline="greedy"`` makes the explorer ask each workflow for it
(:meth:`rft.workflow.Workflow.attach_greedy_baseline`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from rft import hookimpl
from rft.algorithm import rl_preset
from rft.contracts import AdvantageInputs

__all__ = ["PRESET", "ReMaxArgs", "remax_advantages"]


@dataclass
class ReMaxArgs:
    """Arguments of the ``remax`` advantage: none."""


def remax_advantages(inputs: AdvantageInputs, args: ReMaxArgs
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """ReMax: return-to-go minus the greedy baseline.

    ``G_t = Σ_{s≥t} r_s · mask_s`` (``returns``), ``A_t = G_t − b · mask_t`` with ``b`` the
    reward of the greedy response, ``inputs.reward_baselines`` ``(B,)`` (required).
    """
    reward_baselines = inputs.require("reward_baselines", "remax")  # (B,)
    token_level_rewards, response_mask = inputs.token_level_rewards, inputs.response_mask
    with torch.no_grad():
        returns = (token_level_rewards * response_mask).flip(-1).cumsum(-1).flip(-1)  # (B, T)
        advantages = returns - reward_baselines.unsqueeze(-1) * response_mask
    return advantages, returns


remax_advantages.Args = ReMaxArgs  # type: ignore[attr-defined]

PRESET = rl_preset("remax", group=False, reward_baseline="greedy")
"""ReMax: greedy-baseline advantages with the clipped surrogate and a k2 KL loss."""


@hookimpl
def register_algorithms() -> dict[str, Any]:
    return {"remax": PRESET}


@hookimpl
def register_advantage_fns() -> dict[str, Any]:
    return {"remax": remax_advantages}
