"""rft's loss maths as veRL's loss-function hook.

veRL's ``TrainingWorker`` computes the loss of each micro-batch with the function given to
its ``set_loss_fn`` (``ActorRolloutRefWorker.set_loss_fn`` forwards it to the actor):
``loss_fn(model_output, data, dp_group) -> (loss, metrics)``, ``model_output`` holding the
no-padding ``log_probs`` (and ``entropy`` / ``values``), ``data`` the micro-batch with the
mini-batch-wide ``batch_num_tokens``, ``global_batch_size`` and ``dp_size``. veRL's own
hook is ``verl.workers.utils.losses.ppo_loss`` (veRL's policy loss, KL and entropy terms);
the verl trainer installs :class:`ActorLoss` and :class:`CriticLoss` instead, so the
functions resolved from the YAML — ``algorithm.policy_loss_fn``, ``kl_loss_fn``,
``entropy_loss_fn`` (through :func:`rft.trainer.loss.actor_loss`, the native trainer's
assembly) and rft's clipped value loss — are what veRL's worker differentiates:

    actor:   loss = agg(w · pg_loss) − entropy_term + kl_coef · agg(kl)
    critic:  loss = agg(max((V − R)², (clip(V, V_old ± ε) − R)²)) / 2

with ``w`` the off-policy importance weights of ``algorithm.rollout_correction.rollout_is``
(veRL's ``rollout_is_weights``, the batch's ``(b, T)`` field of that name; 1 without
them), the response mask without the tokens its ``rollout_rs`` rejected, and ``agg``
:class:`rft.contracts.AggContext` over the **mini-batch's** token and sequence counts
(veRL's ``global_batch_info``), so micro-batch losses add up to the mini-batch loss.
Metrics keep rft's (veRL's) names; those normalised by the mini-batch counts are veRL
``SUM`` metrics (added over micro-batches), the rest ``MEAN``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from rft.builtin.policy_loss import clipped_value_loss
from rft.config.plan import LossPlan
from rft.contracts import AggContext
from rft.trainer.loss import LossInputs, actor_loss

RESPONSE_FIELDS = ("response_mask", "old_log_probs", "advantages", "ref_log_prob", "is_expert",
                   "teacher_log_prob", "values", "returns", "rollout_is_weights")
"""Per-row tensors of veRL's batch the hooks read (padded ``(b, T)``; ``is_expert``
``(b,)``), where present."""


def agg_context(data: Any, mode: str, loss_scale_factor: float | None) -> AggContext:
    """The mini-batch aggregation of a veRL micro-batch: ``loss_agg_mode`` with veRL's
    ``batch_num_tokens`` (Σ response mask over the mini-batch and data-parallel ranks),
    ``global_batch_size`` (rows of the mini-batch) and ``dp_size``; the
    ``seq-mean-token-sum-norm`` divisor is ``model.max_response_tokens`` or, unset, the
    batch's response width (the native trainer's)."""
    from verl.utils import tensordict_utils as tu

    scale = loss_scale_factor or float(tu.get_non_tensor_data(data, "max_response_len", -1))
    return AggContext(mode, float(data["batch_num_tokens"]), float(data["global_batch_size"]),
                      scale if scale > 0 else None, int(data["dp_size"]))


def padded(model_output: dict[str, Any], data: Any) -> tuple[dict[str, torch.Tensor],
                                                              dict[str, torch.Tensor]]:
    """``(outputs, inputs)``: the model outputs (``log_probs``, ``entropy``, ``values``)
    and the batch's response fields, padded to ``(b, T)``."""
    from verl.workers.utils.padding import no_padding_2_padding

    outputs = {name: no_padding_2_padding(value, data)  # (b, T)
               for name, value in model_output.items()
               if name in ("log_probs", "entropy", "values") and value is not None}
    present = [name for name in RESPONSE_FIELDS if name in data.keys()]  # noqa: SIM118 (TensorDict)
    inputs = dict(data.select(*present).to_padded_tensor().items())
    return outputs, inputs


def _metrics(summed: dict[str, float], averaged: dict[str, float]) -> dict[str, Any]:
    from verl.utils.metric import AggregationType, Metric

    out: dict[str, Any] = {k: Metric(AggregationType.SUM, v) for k, v in summed.items()}
    out.update({k: Metric(AggregationType.MEAN, v) for k, v in averaged.items()})
    return out


@dataclass
class ActorLoss:
    """veRL loss hook of the actor: rft's policy loss, KL loss and entropy loss."""

    fns: LossPlan
    """The loss functions the config resolved."""
    loss_scale_factor: float | None
    """``model.max_response_tokens`` (``None``: the batch's response width)."""

    def __call__(self, model_output: dict[str, Any], data: Any, dp_group: Any = None
                 ) -> tuple[torch.Tensor, dict[str, Any]]:
        from verl.utils import tensordict_utils as tu

        outputs, inputs = padded(model_output, data)
        log_prob = outputs["log_probs"]  # (b, T)
        mask = inputs["response_mask"].to(log_prob.dtype)  # (b, T)
        agg = agg_context(data, self.fns.loss_agg_mode, self.loss_scale_factor)
        is_expert = inputs.get("is_expert")
        out = actor_loss(self.fns, LossInputs(
            log_prob=log_prob, response_mask=mask, old_log_prob=inputs.get("old_log_probs"),
            advantages=inputs.get("advantages"), entropy=outputs.get("entropy"),
            ref_log_prob=inputs.get("ref_log_prob"),
            is_expert_mask=is_expert.bool() if is_expert is not None else None,
            teacher_log_prob=inputs.get("teacher_log_prob"),
            rollout_is_weights=inputs.get("rollout_is_weights"),
            global_step=tu.get_non_tensor_data(data, "global_step", None)), agg)
        return out.loss, _metrics(out.summed, out.averaged)


@dataclass
class CriticLoss:
    """veRL loss hook of the critic: rft's clipped value loss (veRL's formula)."""

    loss_agg_mode: str
    """``algorithm.loss_agg_mode``."""
    cliprange_value: float
    """``critic.cliprange_value``."""
    loss_scale_factor: float | None
    """As :attr:`ActorLoss.loss_scale_factor`."""

    def __call__(self, model_output: dict[str, Any], data: Any, dp_group: Any = None
                 ) -> tuple[torch.Tensor, dict[str, Any]]:
        outputs, inputs = padded(model_output, data)
        vpreds = outputs["values"]  # (b, T)
        mask = inputs["response_mask"].to(vpreds.dtype)  # (b, T)
        agg = agg_context(data, self.loss_agg_mode, self.loss_scale_factor)
        vf_loss, vf_clipfrac = clipped_value_loss(
            vpreds, inputs["values"], inputs["returns"], mask,
            cliprange_value=self.cliprange_value, loss_agg_mode=agg.mode, **agg.kwargs())
        with torch.no_grad():
            vpred_mean = ((vpreds * mask).sum() / mask.sum().clamp(min=1)).item()
        return vf_loss, _metrics({"critic/vf_loss": vf_loss.detach().item()},
                                 {"critic/vf_clipfrac": float(vf_clipfrac.item()),
                                  "critic/vpred_mean": vpred_mean})
