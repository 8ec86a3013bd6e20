"""Entropy losses: the entropy term subtracted from the policy loss.

``loss = pg_loss + kl_loss − entropy_term``; each function follows
:class:`rft.contracts.EntropyLossFn`: it maps per-token entropies ``(B, T)`` (see
:func:`rft.ops.entropy_from_logits`), the response mask and the trainer's aggregation to
that 0-dim term: ``default`` (every row), ``mix`` (rollout rows only, not the expert rows
of a mixed batch) and ``none``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from rft.contracts import EntropyInputs
from rft.hookspecs import hookimpl


@dataclass
class EntropyArgs:
    """Arguments of the ``default`` entropy loss (``algorithm.entropy_loss_fn_args``)."""

    entropy_coef: float = 0.0
    """Weight of the entropy bonus (veRL ``actor.entropy_coeff``); 0 disables it."""


def entropy_bonus(inputs: EntropyInputs, args: EntropyArgs) -> torch.Tensor:
    """``entropy_coef · agg(entropy, response_mask)`` — the term subtracted from the loss
    (veRL: ``policy_loss -= entropy_coeff * entropy_loss``), aggregated like the policy
    loss (``inputs.agg``: ``loss_agg_mode`` and the mini-batch's counts)."""
    return args.entropy_coef * inputs.agg(inputs.entropy, inputs.response_mask)


# Args on a function: the dataclass of its *_args (rft.hookspecs)
entropy_bonus.Args = EntropyArgs  # type: ignore[attr-defined]


def rollout_entropy_bonus(inputs: EntropyInputs, args: EntropyArgs) -> torch.Tensor:
    """``mix``: the entropy bonus of the rollout rows only (Trinity-RFT's ``mix`` entropy
    loss, the default of ``mix`` / ``mix_chord``); expert (SFT) rows add no entropy.

    With ``m`` the response mask ``(B, T)``, ``e`` the expert rows ``(B,)``
    (``inputs.is_expert_mask``; ``None``: no expert rows, the ``default`` bonus)::

        term = entropy_coef · agg(H, m · (1 − e))

    aggregated like the policy loss (``inputs.agg``: ``loss_agg_mode`` and the mini-batch's
    counts of every row), as rft-plugin-mix aggregates its two parts together so that
    micro-batches add up. Divergence from Trinity-RFT, which divides by the rollout rows'
    own count: with ``token-mean`` rft's term is Trinity-RFT's times the rollout share of
    the tokens (``1 − expert_data_ratio`` of the rows for ``seq-mean-*`` modes).
    """
    mask = inputs.response_mask  # (B, T)
    if inputs.is_expert_mask is None:
        return entropy_bonus(inputs, args)
    expert = inputs.is_expert_mask.to(device=mask.device, dtype=torch.bool)  # (B,)
    rollout = mask * (~expert).to(mask.dtype).unsqueeze(-1)  # (B, T)
    return args.entropy_coef * inputs.agg(inputs.entropy, rollout)


# Args on a function: the dataclass of its *_args (rft.hookspecs)
rollout_entropy_bonus.Args = EntropyArgs  # type: ignore[attr-defined]


def no_entropy(inputs: EntropyInputs, args: None) -> torch.Tensor:
    """No entropy term: a scalar ``0`` (on ``entropy``'s device and dtype)."""
    return inputs.entropy.new_zeros(())


@hookimpl
def register_entropy_loss_fns() -> dict[str, Any]:
    return {"default": entropy_bonus, "mix": rollout_entropy_bonus, "none": no_entropy}
