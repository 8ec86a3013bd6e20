"""rft-plugin-grpo: Group Relative Policy Optimization (https://arxiv.org/abs/2402.03300).

Registered names:

- algorithm ``grpo`` — the preset below.
- advantage fns ``grpo`` (GRPO; Dr.GRPO with ``norm_adv_by_std_in_grpo: false``),
  ``grpo_no_std`` (the same function, Dr.GRPO by default) and ``opo`` (OPO's
  length-weighted group baseline; it lives here as another group-baseline outcome
  estimator used with GRPO's clipped surrogate);
- advantage fns ``clipb`` and ``clipv`` (Trinity-RFT's Clip_B and Clip_V entropy control:
  GRPO advantages, the negative-advantage tokens that would raise the entropy most dropped
  from the update).

The policy loss (``ppo``, the dual-clip surrogate), the KL estimators and the entropy
bonus are the core's built-ins.
"""

from __future__ import annotations

from typing import Any

from rft import hookimpl
from rft.algorithm import rl_preset
from rft_plugin_grpo.advantages import (GRPOArgs, GRPONoStdArgs, grpo_advantages,
                                        grpo_no_std_advantages, opo_advantages)
from rft_plugin_grpo.clip_b import ClipBArgs, clipb_advantages
from rft_plugin_grpo.clip_v import ClipVArgs, clipv_advantages

__all__ = ["ClipBArgs", "ClipVArgs", "GRPOArgs", "GRPONoStdArgs", "PRESET",
           "clipb_advantages", "clipv_advantages", "grpo_advantages", "grpo_no_std_advantages",
           "opo_advantages"]

PRESET = rl_preset("grpo")
"""GRPO: group-normalised outcome advantages, clipped surrogate, k2 KL loss (Trinity-RFT's
defaults)."""


@hookimpl
def register_algorithms() -> dict[str, Any]:
    return {"grpo": PRESET}


@hookimpl
def register_advantage_fns() -> dict[str, Any]:
    return {"grpo": grpo_advantages, "grpo_no_std": grpo_no_std_advantages,
            "opo": opo_advantages, "clipb": clipb_advantages, "clipv": clipv_advantages}
