"""rft-plugin-grpo-verl: Trinity-RFT's ``grpo_verl`` — GRPO whose advantages are computed
in the trainer, veRL's way.

Registered names: algorithm ``grpo_verl`` (the GRPO preset); advantage fn ``grpo_verl``
(Trinity-RFT's name for veRL's ``compute_grpo_outcome_advantage``: the ``grpo`` function
of rft-plugin-grpo under a second name). Nothing new is computed here.

In Trinity-RFT, ``grpo`` computes group advantages in the explorer and ``grpo_verl`` in
the trainer. rft computes ``grpo`` advantages in the trainer already, so both presets
train the same way.
"""

from __future__ import annotations

from typing import Any

from rft import hookimpl
from rft.algorithm import rl_preset
from rft_plugin_grpo import grpo_advantages

__all__ = ["PRESET"]

PRESET = rl_preset("grpo")
"""GRPO computed in the trainer: ``grpo`` advantages, clipped surrogate ``ppo``, k2 KL
loss against a reference model, the ``default`` entropy term, 2 rollouts per task
(Trinity-RFT's ``grpo_verl`` defaults, identical to its ``grpo``)."""


@hookimpl
def register_algorithms() -> dict[str, Any]:
    return {"grpo_verl": PRESET}


@hookimpl
def register_advantage_fns() -> dict[str, Any]:
    return {"grpo_verl": grpo_advantages}
