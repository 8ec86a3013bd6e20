"""rft-plugin-raft: Reward rAnked FineTuning (Dong et al., 2023,
https://arxiv.org/abs/2304.06767), as Trinity-RFT's ``raft``: supervised fine-tuning on
the rollouts that the reward selects.

Registered names: algorithm ``raft``; advantage fn ``raft`` (a 0/1 selection weight per
rollout); policy loss fn ``raft`` (the negative log-likelihood of the selected rollouts).

Trinity-RFT's ``raft`` is the ``sft`` loss on whatever its RAFT workflows return (they
keep only successful trajectories). rft's workflows return every rollout, so the
selection is the advantage function's job here, and the loss weights the NLL by it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from rft import hookimpl
from rft.algorithm import AlgorithmPreset
from rft.contracts import AdvantageInputs, PolicyLossInputs
from rft.group_ops import group_ids, num_groups, outcome_scores, segment_max
from rft.ops import masked_mean

__all__ = ["PRESET", "RAFTArgs", "raft_advantages", "raft_policy_loss"]


@dataclass
class RAFTArgs:
    """Arguments of the ``raft`` advantage (``algorithm.advantage_fn_args``)."""

    reward_threshold: float = 1.0
    """Rollouts with ``reward ≥ reward_threshold`` are fine-tuned on (Trinity-RFT's RAFT
    workflows keep trajectories with ``reward ≥ 1``: a success)."""
    best_of_group: bool = False
    """Keep only the highest-reward rollouts of each group (the RAFT paper's ranking:
    best of ``repeat_times`` per task; ties all kept), still subject to the threshold."""


def raft_advantages(inputs: AdvantageInputs, args: RAFTArgs
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """RAFT's selection as a 0/1 weight per rollout.

    With ``r_i = Σ_t token_level_rewards_it``::

        s_i  = [r_i ≥ reward_threshold] · [r_i = max_{j∈g} r_j  if best_of_group]
        A_it = s_i · mask_it

    ``returns`` is the same tensor.
    """
    with torch.no_grad():
        scores = outcome_scores(inputs.token_level_rewards)  # (B,)
        selected = scores >= args.reward_threshold  # (B,)
        if args.best_of_group:
            ids = group_ids(inputs.index, scores.device)
            best = segment_max(scores, ids, num_groups(ids))[ids]  # (B,)
            selected = selected & (scores == best)
        advantages = selected.to(inputs.response_mask.dtype).unsqueeze(-1) \
            * inputs.response_mask  # (B, T)
    return advantages, advantages


raft_advantages.Args = RAFTArgs  # type: ignore[attr-defined]


def raft_policy_loss(inputs: PolicyLossInputs, args: None
                     ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Selection-weighted negative log-likelihood per token:
    ``pg_loss_t = −A_t · log π_t`` — with ``raft``'s 0/1 advantages, SFT on the selected
    rollouts. ``old_log_prob`` is not used (no importance ratio).

    Aggregated with the trainer's ``loss_agg_mode`` over *all* tokens of the batch, so
    the loss is the SFT loss on the selected tokens times their share of the batch.

    :return: ``pg_loss`` ``(B, T)`` and detached metrics ``selected_frac`` (share of the
        response tokens with ``A > 0``) and ``sft_loss`` (mean NLL over those tokens).
    """
    mask = inputs.response_mask
    pg_loss = -inputs.advantages * inputs.log_prob  # (B, T)
    with torch.no_grad():
        chosen = (inputs.advantages > 0).to(mask.dtype) * mask  # (B, T)
        metrics = {"selected_frac": masked_mean(chosen, mask),
                   "sft_loss": masked_mean(-inputs.log_prob, chosen)}
    return pg_loss, metrics


PRESET = AlgorithmPreset(
    advantage_fn="raft",
    policy_loss_fn="raft",
    kl_loss_fn="none",
    kl_penalty_fn="none",
    entropy_loss_fn="none",
    sample_strategy="default",
    repeat_times=1,
    min_repeat_times=1,
)
"""RAFT: fine-tune on the rollouts the reward selects; no KL, no entropy term, no
reference model, one rollout per task (Trinity-RFT's defaults)."""


@hookimpl
def register_algorithms() -> dict[str, Any]:
    return {"raft": PRESET}


@hookimpl
def register_advantage_fns() -> dict[str, Any]:
    return {"raft": raft_advantages}


@hookimpl
def register_policy_loss_fns() -> dict[str, Any]:
    return {"raft": raft_policy_loss}
