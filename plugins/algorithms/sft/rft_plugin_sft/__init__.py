"""rft-plugin-sft: supervised fine-tuning on prompt/response data.

Registered names: algorithm ``sft``; policy loss fn ``sft``.

The trainer calls a policy loss with ``old_log_prob = log_prob.detach()`` and zero
advantages for ``sft`` batches; this loss only uses ``inputs.log_prob`` (the response
tokens' log-probs, masked by the trainer's aggregation).
"""

from __future__ import annotations

from typing import Any

import torch

from rft import hookimpl
from rft.algorithm import AlgorithmPreset
from rft.contracts import PolicyLossInputs

__all__ = ["PRESET", "sft_loss"]


def sft_loss(inputs: PolicyLossInputs, args: None
             ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Negative log-likelihood per token: ``pg_loss_it = −log π(y_it | x, y_<t)``.

    Aggregated by ``algorithm.loss_agg_mode``: ``token-mean`` (default) is the mean NLL
    over all response tokens of the batch (Trinity-RFT's ``use_token_level_loss: true``),
    ``seq-mean-token-mean`` the mean over sequences of each one's mean NLL
    (``use_token_level_loss: false``). ``old_log_prob`` and ``advantages`` are not used.
    Metrics: none (the trainer reports the loss as ``actor/pg_loss``).
    """
    return -inputs.log_prob, {}


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
