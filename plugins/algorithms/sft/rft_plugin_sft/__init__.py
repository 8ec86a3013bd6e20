"""rft-plugin-sft: supervised fine-tuning on prompt/response data.

Registered names: algorithm ``sft``; policy loss fn ``sft``.

The trainer calls a policy loss with ``old_per_token_logps = per_token_logps.detach()``
and zero advantages for ``sft`` batches; this loss only uses ``per_token_logps`` and
``mask`` (the response tokens).
"""

from __future__ import annotations

from typing import Any

import torch

from rft import hookimpl
from rft.algorithm import AlgorithmPreset

__all__ = ["PRESET", "sft_loss"]


def sft_loss(
    per_token_logps: torch.Tensor,
    old_per_token_logps: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Negative log-likelihood per token: ``pg_loss_it = −log π(y_it | x, y_<t)``.

    Aggregated by ``algorithm.loss_agg_mode``: ``token-mean`` (default) is the mean NLL
    over all response tokens of the batch (Trinity-RFT's ``use_token_level_loss: true``),
    ``seq-mean-token-mean`` the mean over sequences of each one's mean NLL
    (``use_token_level_loss: false``). ``old_per_token_logps`` and ``advantages`` are
    not used. Metrics: none (the trainer reports the loss as ``actor/pg_loss``).
    """
    return -per_token_logps, {}


PRESET = AlgorithmPreset(
    advantage_fn=None,
    policy_loss_fn="sft",
    kl_loss_fn="none",
    kl_penalty_fn="none",
    entropy_loss_fn="none",
    sample_strategy="default",
    repeat_times=1,
    min_repeat_times=1,
    train_only=True,
    experience_format="sft",
)
"""SFT: maximum likelihood on a fixed dataset; no explorer, no reference model."""


@hookimpl
def register_algorithms() -> dict[str, Any]:
    return {"sft": PRESET}


@hookimpl
def register_policy_loss_fns() -> dict[str, Any]:
    return {"sft": sft_loss}
