"""Entropy losses: the entropy term subtracted from the policy loss.

``loss = pg_loss + kl_loss − entropy_term``; each function maps per-token entropies
``(B, T)`` (see :func:`rft.ops.entropy_from_logits`) and the mask to that scalar term.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from rft.hookspecs import hookimpl
from rft.ops import agg_loss


@dataclass
class EntropyArgs:
    """Arguments of the ``default`` entropy loss (``algorithm.entropy_loss_fn_args``)."""

    entropy_coef: float = 0.0
    """Weight of the entropy bonus (veRL ``actor.entropy_coeff``); 0 disables it."""


def entropy_bonus(entropy: torch.Tensor, mask: torch.Tensor, *, entropy_coef: float = 0.0,
                  loss_agg_mode: str = "token-mean", **agg_kwargs: Any) -> torch.Tensor:
    """``entropy_coef · agg_loss(entropy, mask, loss_agg_mode)`` — the term subtracted from
    the loss (veRL: ``policy_loss -= entropy_coeff * entropy_loss``).

    ``entropy``, ``mask``: ``(B, T)``; ``agg_kwargs`` go to :func:`rft.ops.agg_loss`
    (``batch_num_tokens``, ``global_batch_size``, ``dp_size``, ``loss_scale_factor``).
    """
    return entropy_coef * agg_loss(entropy, mask, loss_agg_mode, **agg_kwargs)


entropy_bonus.Args = EntropyArgs  # type: ignore[attr-defined]


def no_entropy(entropy: torch.Tensor, mask: torch.Tensor, **_: Any) -> torch.Tensor:
    """No entropy term: a scalar ``0`` (on ``entropy``'s device and dtype)."""
    return entropy.new_zeros(())


@hookimpl
def register_entropy_loss_fns() -> dict[str, Any]:
    return {"default": entropy_bonus, "none": no_entropy}
