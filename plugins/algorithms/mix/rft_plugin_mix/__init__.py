"""rft-plugin-mix: SFT on expert data mixed into GRPO on rollouts (Trinity-RFT's ``mix``).

Registered names: algorithm ``mix``; policy loss fn ``mix``; sample strategy ``mix``.

- The ``mix`` sample strategy fills ``ceil(expert_data_ratio · train_batch_size)`` rows of
  every batch from an auxiliary buffer of expert (SFT) data
  (``buffer.trainer_input.auxiliary_buffers.<expert_buffer>``) and the rest from the
  experience buffer; with a ratio above 0 it marks each experience with
  ``info["is_expert"]``.
- The ``mix`` policy loss is GRPO's clipped surrogate (the core's ``ppo``) on rollout rows
  and the SFT NLL (rft-plugin-sft) on expert rows, weighted ``1 − μ`` and ``μ``.

Trainer contract: the loss reads ``inputs.is_expert_mask`` ``(B,)`` bool
(:class:`rft.contracts.PolicyLossInputs`), built from ``Experience.info["is_expert"]``.
When it is ``None`` (``expert_data_ratio: 0``, or a trainer that does not fill it) every
row is a rollout and the loss *is* the RL loss.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch

from rft import hookimpl
from rft.algorithm import rl_preset
from rft.buffer.sampling import SampleStrategy
from rft.builtin.policy_loss import PPOArgs, ppo_policy_loss
from rft.builtin.sample_strategies import staleness_metrics
from rft.contracts import PolicyLossInputs
from rft.errors import RftError
from rft.experience import Experience
from rft.ops import masked_mean
from rft_plugin_sft import sft_loss

__all__ = ["MixArgs", "MixSampleArgs", "MixSampleStrategy", "PRESET", "mix_policy_loss"]


@dataclass
class MixArgs:
    """Arguments of the ``mix`` policy loss (``algorithm.policy_loss_fn_args``)."""

    mu: float = 0.1
    """Weight ``μ`` of the SFT loss on expert rows; rollout rows get ``1 − μ``."""
    clip_range: float = 0.2
    """Symmetric clip range of the RL part (see the core ``ppo`` loss)."""
    clip_range_low: float | None = None
    """Lower clip range of the RL part; ``None``: ``clip_range``."""
    clip_range_high: float | None = None
    """Upper clip range of the RL part; ``None``: ``clip_range``."""
    clip_ratio_c: float = 3.0
    """Dual-clip bound of the RL part."""


def mix_policy_loss(inputs: PolicyLossInputs, args: MixArgs
                    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Per token: ``(1 − μ) · ppo_it`` on rollout rows, ``μ · (−log π_it)`` on expert rows.

    ``inputs.is_expert_mask`` ``(B,)`` marks the expert rows; ``None`` means the run has
    no expert data, and the loss is exactly the ``ppo`` loss (no ``1 − μ`` factor). Both
    parts are then aggregated together by the trainer's ``loss_agg_mode``.

    Divergence from Trinity-RFT: Trinity normalises each part by its own share of the
    batch (rows read per part); here both share one aggregation over all response tokens
    (micro-batch additive like every other loss).

    :return: ``pg_loss`` ``(B, T)`` and detached metrics: the ``ppo`` metrics over rollout
        rows (``pg_clipfrac``, ``pg_clipfrac_lower``, ``ppo_kl``) and, with expert rows,
        ``expert/sft_loss`` (masked mean NLL) and ``expert/fraction`` (share of rows).
    """
    mu = args.mu
    if not 0.0 <= mu <= 1.0:
        raise ValueError(f"mu must be within [0, 1], got {mu}")
    clip = PPOArgs(clip_range=args.clip_range, clip_range_low=args.clip_range_low,
                   clip_range_high=args.clip_range_high, clip_ratio_c=args.clip_ratio_c)
    if inputs.is_expert_mask is None:
        return ppo_policy_loss(inputs, clip)
    mask = inputs.response_mask  # (B, T)
    expert = inputs.is_expert_mask.to(device=mask.device, dtype=torch.bool).unsqueeze(-1)  # (B, 1)
    usual_mask = mask * (~expert).to(mask.dtype)  # (B, T)
    expert_mask = mask * expert.to(mask.dtype)  # (B, T)
    rl_loss, metrics = ppo_policy_loss(dataclasses.replace(inputs, response_mask=usual_mask),
                                       clip)  # (B, T)
    nll, _ = sft_loss(dataclasses.replace(inputs, response_mask=expert_mask), None)  # (B, T)
    pg_loss = torch.where(expert, mu * nll, (1 - mu) * rl_loss)  # (B, T)
    with torch.no_grad():
        metrics["expert/sft_loss"] = masked_mean(nll, expert_mask)
        metrics["expert/fraction"] = expert.to(pg_loss.dtype).mean()
    return pg_loss, metrics


mix_policy_loss.Args = MixArgs  # type: ignore[attr-defined]


@dataclass
class MixSampleArgs:
    """Arguments of the ``mix`` sample strategy (``algorithm.sample_strategy_args``)."""

    expert_data_ratio: float = 0.5
    """Share of each training batch taken from the expert buffer, within ``[0, 1]``;
    ``ceil(ratio · train_batch_size)`` rows. ``0``: plain RL."""
    expert_buffer: str = "expert"
    """Name of the auxiliary buffer with expert data
    (``buffer.trainer_input.auxiliary_buffers.<name>``). Left at ``expert`` while no
    buffer has that name, Trinity-RFT's default ``sft_dataset`` is used."""
    sft_dataset_name: str | None = None
    """Trinity-RFT's name of ``expert_buffer``; wins when set."""

    def buffer_name(self, configured: Iterable[str]) -> str:
        """The auxiliary buffer to read among the ``configured`` names."""
        if self.sft_dataset_name is not None:
            return self.sft_dataset_name
        names = set(configured)
        if self.expert_buffer == "expert" and "expert" not in names and "sft_dataset" in names:
            return "sft_dataset"
        return self.expert_buffer


class MixSampleStrategy(SampleStrategy):
    """Rollouts from the experience buffer followed by expert rows from an auxiliary
    buffer; with ``expert_data_ratio > 0`` every experience gets ``info["is_expert"]``.

    Metrics: ``sample/staleness_{mean,max}`` (rollouts) and ``sample/expert_count``.
    """

    Args = MixSampleArgs

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        options = self.args or MixSampleArgs()
        if not 0.0 <= options.expert_data_ratio <= 1.0:
            raise RftError("algorithm.sample_strategy_args.expert_data_ratio: must be within "
                           f"[0, 1], got {options.expert_data_ratio}")
        self.expert_count = math.ceil(options.expert_data_ratio * self.batch_size)
        self.expert = None
        if self.expert_count:
            name = options.buffer_name(self.buffers.auxiliary)
            if name not in self.buffers.auxiliary:
                key = ("sft_dataset_name" if options.sft_dataset_name is not None
                       else "expert_buffer")
                raise RftError(
                    f"algorithm.sample_strategy_args.{key}: mix reads expert data "
                    f"from buffer.trainer_input.auxiliary_buffers.{name}, "
                    f"which is not configured (have: "
                    f"{', '.join(self.buffers.auxiliary) or 'none'})")
            self.expert = self.buffers.auxiliary[name]

    def sample(self, step: int, model_version: int) -> tuple[list[Experience], dict[str, float]]:
        usual = self.buffers.experience.read(self.batch_size - self.expert_count, self.timeout)
        metrics = {**staleness_metrics(usual, model_version),
                   "sample/expert_count": float(self.expert_count)}
        if self.expert is None:
            return usual, metrics
        expert = self.expert.read(self.expert_count, self.timeout)
        for exp in usual:
            exp.info["is_expert"] = False
        for exp in expert:
            exp.info["is_expert"] = True
            if exp.reward is None and exp.token_level_reward is None:
                exp.reward = 0.0
        return usual + expert, metrics


PRESET = rl_preset("grpo", policy_loss_fn="mix", sample_strategy="mix", repeat_times=8,
                   entropy_loss_fn="mix")
"""MIX: GRPO advantages on rollouts, SFT on expert rows (Trinity-RFT's defaults)."""


@hookimpl
def register_algorithms() -> dict[str, Any]:
    return {"mix": PRESET}


@hookimpl
def register_policy_loss_fns() -> dict[str, Any]:
    return {"mix": mix_policy_loss}


@hookimpl
def register_sample_strategies() -> dict[str, Any]:
    return {"mix": MixSampleStrategy}
