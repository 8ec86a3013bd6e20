"""The reference update: the recorded step computed with veRL 0.9.1's own loss functions.

veRL is imported inside :func:`reference_update_with_verl` only; rft never needs it.

For every optimizer update of the recorded step (``ppo_epochs`` passes over consecutive
mini-batches of ``mini_batch_size`` rows, each mini-batch in one forward pass):

1. forward the padded rows (same ``input_ids`` / ``attention_mask`` / ``position_ids``);
   ``logits / temperature`` in float32;
2. lay the outputs out as veRL's no-padding ("rmpad") tensors: the real tokens of all
   rows concatenated, ``(nnz, V)``, labels = the token ids rolled left by one
   (``torch.roll(ids, -1)``), then ``log_probs = verl.utils.torch_functional
   .logprobs_from_logits`` and, when ``entropy_coef ≠ 0``, ``entropy_from_logits``,
   both ``(nnz,)``. veRL itself runs the packed sequence through varlen flash
   attention; on any device the padded forward gives the same per-token outputs;
3. ``loss = verl.workers.utils.losses.ppo_loss(ActorConfig, {"log_probs", "entropy"},
   TensorDict)`` with the mini-batch's ``batch_num_tokens = Σ response_mask`` and
   ``global_batch_size`` = its rows, ``dp_size = 1`` (veRL's semantics)::

       loss = agg(pg_loss) − entropy_coeff · agg(entropy) + kl_loss_coef · agg(kl)

4. ``loss.backward()``; ``clip_grad_norm_(max_norm=grad_clip)``; ``AdamW.step()`` on the
   snapshot's optimizer state (skipped when the norm is not finite, as veRL does).

Supported: ``rollout`` batches, the ``ppo`` policy loss (veRL ``vanilla``), any veRL KL
estimator as the KL loss, the ``default`` / ``none`` entropy loss, float32.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from rft.alignment.record import actor_parameters
from rft.alignment.replay import ModelFactory, build_actor
from rft.alignment.snapshot import StepSettings, StepSnapshot
from rft.errors import RftError

if TYPE_CHECKING:
    from tensordict import TensorDict


def _check_supported(settings: StepSettings, tensors: dict[str, torch.Tensor]) -> None:
    where = "alignment: the veRL reference"
    if settings.experience_format != "rollout":
        raise RftError(f"{where} covers rollout batches, got {settings.experience_format!r}")
    if settings.policy_loss != "ppo":
        raise RftError(f"{where} covers the 'ppo' policy loss (veRL vanilla), got "
                       f"{settings.policy_loss!r}")
    if settings.entropy_loss not in ("default", "none"):
        raise RftError(f"{where} covers the 'default' entropy loss, got "
                       f"{settings.entropy_loss!r}")
    if settings.dtype not in ("torch.float32", "float32"):
        raise RftError(f"{where} runs in float32; the step was recorded with {settings.dtype}")
    if "advantages" not in tensors:
        raise RftError(f"{where} needs the batch's advantages; the snapshot has none")
    if settings.kl_coef != 0 and "ref_log_prob" not in tensors:
        raise RftError(f"{where} needs reference log-probs for the KL loss; the snapshot "
                       "has none")


def actor_config(settings: StepSettings, rows: int) -> Any:
    """veRL's ``ActorConfig`` with the snapshot's loss settings (``rows`` per mini-batch).

    rft ``ppo`` args → veRL: ``clip_range`` → ``clip_ratio``, ``clip_range_low`` /
    ``clip_range_high`` (``None``: ``clip_range``) → ``clip_ratio_low`` / ``_high``,
    ``clip_ratio_c`` → ``clip_ratio_c``.
    """
    from verl.workers.config import ActorConfig

    args = settings.policy_loss_args
    clip = float(args.get("clip_range", 0.2))
    low, high = args.get("clip_range_low"), args.get("clip_range_high")
    return ActorConfig(
        strategy="fsdp", ppo_mini_batch_size=rows, ppo_micro_batch_size_per_gpu=rows,
        use_dynamic_bsz=False, rollout_n=1, ppo_epochs=1,
        clip_ratio=clip, clip_ratio_low=clip if low is None else float(low),
        clip_ratio_high=clip if high is None else float(high),
        clip_ratio_c=float(args.get("clip_ratio_c", 3.0)),
        loss_agg_mode=settings.loss_agg_mode, loss_scale_factor=settings.loss_scale_factor,
        entropy_coeff=settings.entropy_coef,
        # a zero coefficient: rft runs no reference model (its KL term adds exactly 0)
        use_kl_loss=settings.kl_coef != 0, kl_loss_coef=settings.kl_coef,
        kl_loss_type=settings.kl_loss if settings.kl_loss != "none" else "low_var_kl",
    )


def _mini_batches(num_rows: int, size: int) -> Iterator[torch.Tensor]:
    """Consecutive row indices, ``size`` per mini-batch (``≤ 0``: all rows)."""
    size = size if size > 0 else num_rows
    for start in range(0, num_rows, size):
        yield torch.arange(start, min(start + size, num_rows))


def mini_batch_data(snapshot: StepSnapshot, rows: torch.Tensor) -> TensorDict:
    """The ``TensorDict`` ``ppo_loss`` reads for the mini-batch ``rows`` ``(b,)``."""
    from tensordict import TensorDict
    from verl.utils import tensordict_utils as tu

    t = {k: v.index_select(0, rows) for k, v in snapshot.tensors.items() if v.dim() > 0}
    width = snapshot.prompt_width
    mask = t["response_mask"].float()  # (b, R)
    fields = {
        "prompts": t["input_ids"][:, :width],  # (b, P)
        "responses": t["input_ids"][:, width:],  # (b, R)
        "attention_mask": t["attention_mask"],  # (b, P + R)
        "response_mask": mask,  # (b, R)
        "advantages": t["advantages"].float(),  # (b, R)
    }
    if "old_log_prob" in t:
        fields["old_log_probs"] = t["old_log_prob"].float()  # (b, R)
    if "ref_log_prob" in t:
        fields["ref_log_prob"] = t["ref_log_prob"].float()  # (b, R)
    data = TensorDict(fields, batch_size=[len(rows)])
    tu.assign_non_tensor(data, dp_size=1, batch_num_tokens=float(mask.sum().item()),
                         global_batch_size=float(len(rows)))
    return data


def verl_model_output(model: nn.Module, snapshot: StepSnapshot, rows: torch.Tensor, *,
                      temperature: float, with_entropy: bool) -> dict[str, torch.Tensor]:
    """``{"log_probs": (nnz,), "entropy": (nnz,)}`` in veRL's no-padding layout."""
    from verl.utils.torch_functional import entropy_from_logits, logprobs_from_logits

    device = next(model.parameters()).device
    input_ids = snapshot.tensors["input_ids"].index_select(0, rows).to(device)  # (b, L)
    attention = snapshot.tensors["attention_mask"].index_select(0, rows).to(device)  # (b, L)
    positions = snapshot.tensors["position_ids"].index_select(0, rows).to(device)  # (b, L)
    logits = model(input_ids=input_ids, attention_mask=attention, position_ids=positions,
                   use_cache=False).logits.float()  # (b, L, V)
    logits = logits / temperature
    real = attention.bool()  # (b, L)
    logits_rmpad = logits[real]  # (nnz, V)
    labels = torch.roll(input_ids[real], shifts=-1, dims=0)  # (nnz,)
    output = {"log_probs": logprobs_from_logits(logits_rmpad, labels)}  # (nnz,)
    if with_entropy:
        output["entropy"] = entropy_from_logits(logits_rmpad)  # (nnz,)
    return output


def reference_update_with_verl(snapshot: StepSnapshot, *,
                               model_factory: ModelFactory | None = None
                               ) -> dict[str, torch.Tensor]:
    """The recorded update recomputed with veRL's ``ppo_loss`` (see the module docstring).

    :return: ``{name: parameter}`` after the update (CPU copies, ``named_parameters``).
    :raises RftError: settings the reference does not cover.
    """
    from verl.workers.utils.losses import ppo_loss
    from verl.workers.utils.padding import no_padding_2_padding

    settings = snapshot.settings
    _check_supported(settings, snapshot.tensors)
    model = build_actor(snapshot, model_factory)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings.lr,
                                  betas=(settings.betas[0], settings.betas[1]),
                                  eps=settings.eps, weight_decay=settings.weight_decay)
    optimizer.load_state_dict(copy.deepcopy(snapshot.optimizer_state))
    num_rows = int(snapshot.tensors["input_ids"].shape[0])
    clip = settings.grad_clip if settings.grad_clip is not None else math.inf
    for _ in range(settings.ppo_epochs):
        for rows in _mini_batches(num_rows, settings.mini_batch_size):
            data = mini_batch_data(snapshot, rows)
            output = verl_model_output(model, snapshot, rows,
                                       temperature=settings.temperature,
                                       with_entropy=settings.entropy_coef != 0)
            if "old_log_probs" not in data.keys():  # on-policy: old = current, detached
                data["old_log_probs"] = no_padding_2_padding(
                    output["log_probs"].detach(), data)  # (b, R)
            loss, _ = ppo_loss(actor_config(settings, len(rows)), output, data)
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=clip)
            if torch.isfinite(grad_norm):
                optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    return actor_parameters(model)
