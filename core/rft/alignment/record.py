"""Recording a step of the native trainer as a :class:`~rft.alignment.snapshot.StepSnapshot`.

The hook point is :meth:`TorchTrainer._update_actor`: it receives the batch after every
no-gradient preparation (padding, old / reference log-probs, KL penalty, advantages) and
is where the actor's loss, backward and optimizer steps happen. :func:`record_step` runs
an ordinary :meth:`TorchTrainer.train_step` with a one-shot wrapper around that method on
the trainer *instance* (restored afterwards; the class is untouched), so the training run
continues exactly as without recording::

    from rft.alignment import record_step
    metrics, snapshot = record_step(trainer, experiences, "snapshots/step_42")
"""

from __future__ import annotations

import copy
import dataclasses
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from rft.alignment.snapshot import StepSettings, StepSnapshot, save_snapshot
from rft.errors import RftError
from rft.experience import Experience
from rft.trainer.batching import TensorBatch
from rft.trainer.loss import args_dict

if TYPE_CHECKING:
    from rft.trainer.torch_trainer import TorchTrainer


def _name(selected: Any) -> str:
    return "none" if selected is None else str(selected.name)


def step_settings(trainer: TorchTrainer, tensors: TensorBatch) -> StepSettings:
    """The loss and optimizer settings ``trainer`` applies to the batch ``tensors``."""
    fns, options = trainer.fns, trainer.options
    group = trainer.optimizer.param_groups[0]
    return StepSettings(
        algorithm_type=trainer.plan.algorithm.algorithm_type,
        experience_format=trainer.preset.experience_format,
        loss_agg_mode=fns.loss_agg_mode,
        policy_loss=_name(fns.policy_loss), policy_loss_args=args_dict(fns.policy_loss),
        kl_loss=_name(fns.kl_loss), kl_loss_args=args_dict(fns.kl_loss),
        kl_penalty=_name(fns.kl_penalty),
        entropy_loss=_name(fns.entropy), entropy_loss_args=args_dict(fns.entropy),
        lr=float(group["lr"]), betas=[float(b) for b in group["betas"]],
        eps=float(group["eps"]), weight_decay=float(group["weight_decay"]),
        grad_clip=options.grad_clip, temperature=options.temperature,
        loss_scale_factor=float(options.loss_scale_factor or tensors.response_width),
        mini_batch_size=options.mini_batch_size, micro_batch_size=options.micro_batch_size,
        use_dynamic_bsz=options.use_dynamic_bsz, max_token_len=options.max_token_len,
        ppo_epochs=options.ppo_epochs, total_steps=options.total_steps,
        dtype=str(options.dtype or torch.float32),
    )


def plan_sections(trainer: TorchTrainer) -> dict[str, Any]:
    """The config sections the trainer was built from, as a plain config (the rest takes
    its defaults when the snapshot is replayed)."""
    plan = trainer.plan
    return {"model": dataclasses.asdict(plan.model),
            "algorithm": dataclasses.asdict(plan.algorithm),
            "trainer": dataclasses.asdict(plan.trainer),
            "buffer": {"train_batch_size": plan.train_batch_size}}


def _cpu_clone(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.detach().to("cpu", copy=True) for k, v in tensors.items()}


def snapshot_of(trainer: TorchTrainer, tensors: TensorBatch) -> StepSnapshot:
    """Copy the trainer's actor / optimizer state and the prepared batch ``tensors``
    (deep copies: the coming update mutates the optimizer state in place)."""
    model_config = getattr(trainer.actor, "config", None)
    if model_config is None or not hasattr(model_config, "to_dict"):
        raise RftError("alignment: the actor has no Hugging Face config; a step snapshot "
                       "needs one to rebuild the model")
    optimizer_state = copy.deepcopy(trainer.optimizer.state_dict())
    return StepSnapshot(
        prompt_width=tensors.prompt_width,
        tensors=_cpu_clone(tensors.tensors),
        actor_state=_cpu_clone(trainer.actor.state_dict()),
        optimizer_state=_to_cpu(optimizer_state),
        settings=step_settings(trainer, tensors),
        config=plan_sections(trainer),
        model_config=model_config.to_dict(),
        global_steps=trainer.global_steps,
    )


def _to_cpu(value: Any) -> Any:
    """``value`` with every tensor moved to the CPU (nested dicts / lists)."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, dict):
        return {k: _to_cpu(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_to_cpu(v) for v in value]
    return value


def actor_parameters(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """``{name: parameter}`` copies on the CPU (``named_parameters``: tied weights once)."""
    return {name: p.detach().to("cpu", copy=True) for name, p in model.named_parameters()}


def record_step(trainer: TorchTrainer, experiences: Sequence[Experience],
                directory: str | os.PathLike[str] | None = None, *,
                keep_result: bool = True) -> tuple[dict[str, float], StepSnapshot]:
    """Run ``trainer.train_step(experiences)`` and snapshot the actor update it made.

    :param directory: where to write the snapshot (:func:`save_snapshot`); ``None``:
        keep it in memory only.
    :param keep_result: also keep the actor's parameters after the update
        (``snapshot.actor_after``), to check that a replay reproduces the recorded step.
    :return: the step's metrics and the snapshot.
    :raises RftError: a trainer with a critic (the snapshot covers the actor update only).
    """
    if getattr(trainer, "critic", None) is not None:
        raise RftError("alignment: recording a step of an algorithm with a critic (PPO) is "
                       "not supported; the snapshot covers the actor update only")
    captured: list[StepSnapshot] = []
    update = trainer._update_actor  # bound method (or an earlier instance wrapper)
    shadowed = "_update_actor" in vars(trainer)

    def recording_update(tensors: TensorBatch) -> dict[str, float]:
        if not captured:
            captured.append(snapshot_of(trainer, tensors))
        return update(tensors)

    # the recorder stands in for the method on this instance (put back below)
    trainer._update_actor = recording_update  # type: ignore[method-assign]
    try:
        metrics = trainer.train_step(experiences)
    finally:
        if shadowed:
            trainer._update_actor = update  # type: ignore[method-assign]
        else:
            del trainer._update_actor
    if not captured:
        raise RftError("alignment: the trainer step made no actor update to record")
    snapshot = captured[0]
    if keep_result:
        snapshot.actor_after = actor_parameters(trainer.actor)
    if directory is not None:
        save_snapshot(snapshot, directory)
    return metrics, snapshot
