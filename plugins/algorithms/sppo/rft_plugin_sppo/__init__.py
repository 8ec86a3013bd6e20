"""rft-plugin-sppo: Trinity-RFT's ``sppo`` (sPPO-token, https://arxiv.org/abs/2108.05828).

sPPO replaces PPO's ratio by the log-ratio, ``−A · (log π − log π_old)``, and keeps a
token only while its ratio stays inside the band ``[1/(1+ε), 1+ε]``; outside it the
token contributes neither loss nor gradient.

Registered names: algorithm ``sppo``; policy loss fn ``sppo``. Advantages are OPMD's
group-mean baseline (``opmd`` from rft-plugin-opmd).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from rft import hookimpl
from rft.algorithm import rl_preset
from rft.contracts import PolicyLossInputs
from rft.ops import masked_mean

__all__ = ["PRESET", "SPPOArgs", "sppo_policy_loss"]


@dataclass
class SPPOArgs:
    """Arguments of the ``sppo`` policy loss (``algorithm.policy_loss_fn_args``)."""

    epsilon: float = 0.3
    """``ε > 0``: a token counts while its ratio is within ``[1/(1+ε), 1+ε]``."""

    def __post_init__(self) -> None:
        if not self.epsilon > 0:
            raise ValueError(f"epsilon must be > 0, got {self.epsilon}")


def sppo_policy_loss(inputs: PolicyLossInputs, args: SPPOArgs
                     ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """sPPO's surrogate per token.

    With ``δ = log π − log π_old`` and ``ρ = exp(δ)`` (no gradient through the band)::

        pg_loss_it = −A_it · δ_it · 1[1/(1+ε) ≤ ρ_it ≤ 1+ε]

    so ``∂pg/∂log π = −A`` inside the band and 0 outside. The trainer aggregates it with
    ``loss_agg_mode`` (``token-mean``: Trinity-RFT's ``masked_mean``).

    :return: ``pg_loss`` ``(B, T)`` and ``pg_clipfrac`` (share of counted tokens outside
        the band), detached.
    """
    epsilon = args.epsilon
    log_ratio = inputs.log_prob - inputs.old_log_prob  # (B, T)
    with torch.no_grad():
        ratio = torch.exp(log_ratio)  # (B, T)
        inside = (ratio >= 1.0 / (1.0 + epsilon)) & (ratio <= 1.0 + epsilon)  # (B, T)
    pg_loss = -inputs.advantages * log_ratio * inside.to(log_ratio.dtype)  # (B, T)
    with torch.no_grad():
        metrics = {"pg_clipfrac": masked_mean((~inside).to(log_ratio.dtype),
                                              inputs.response_mask)}
    return pg_loss, metrics


sppo_policy_loss.Args = SPPOArgs  # type: ignore[attr-defined]

PRESET = rl_preset("opmd", policy_loss_fn="sppo", kl_loss_fn="none", entropy_loss_fn="none",
                   use_reference=False)
"""sPPO: OPMD's group-mean advantages, the sPPO surrogate, no KL, no entropy term, two
rollouts per task (Trinity-RFT's ``sppo`` preset)."""


@hookimpl
def register_algorithms() -> dict[str, Any]:
    return {"sppo": PRESET}


@hookimpl
def register_policy_loss_fns() -> dict[str, Any]:
    return {"sppo": sppo_policy_loss}
