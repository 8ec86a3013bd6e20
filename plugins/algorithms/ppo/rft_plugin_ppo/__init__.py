"""rft-plugin-ppo: Proximal Policy Optimization with a critic (https://arxiv.org/abs/1707.06347).

Registered names:

- algorithm ``ppo`` — the preset below (the trainer keeps a value model).
- advantage fns ``ppo`` and its alias ``gae`` — Generalized Advantage Estimation.

The clipped surrogate (``ppo`` policy loss) and the clipped value loss are the core's
(:mod:`rft.builtin.policy_loss`); this plugin adds GAE and the preset.
"""

from __future__ import annotations

from typing import Any

from rft import hookimpl
from rft.algorithm import rl_preset
from rft_plugin_ppo.advantages import GAEArgs, gae_advantages

__all__ = ["GAEArgs", "PRESET", "gae_advantages"]

PRESET = rl_preset("ppo", group=False, use_critic=True)
"""PPO: GAE with a critic, clipped surrogate, k2 KL loss (Trinity-RFT's defaults)."""


@hookimpl
def register_algorithms() -> dict[str, Any]:
    return {"ppo": PRESET}


@hookimpl
def register_advantage_fns() -> dict[str, Any]:
    return {"ppo": gae_advantages, "gae": gae_advantages}
