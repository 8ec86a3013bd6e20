"""Settings of the native trainer, gathered from the config in one place.

Besides the ``trainer`` section, the native trainer reads a few keys of the veRL tree in
``trainer.trainer_config`` (so one YAML serves both backends) and its own
``trainer.trainer_config.torch`` mapping (the tree's keys that mirror rft fields, e.g.
``actor_rollout_ref.actor.grad_clip``, were reconciled with those fields at validation and
left it: :mod:`rft.config.verl_keys`):

- ``actor_rollout_ref.actor.ppo_mini_batch_size``: prompts per optimizer step (the
  mini-batch is that × ``repeat_times`` rows); default ``buffer.train_batch_size`` rows,
  one update per step.
- ``actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu``: rows per forward/backward
  when ``trainer.use_dynamic_bsz`` is false; default the whole mini-batch.
- ``actor_rollout_ref.actor.ppo_epochs``: passes over the batch per step; default 1.
- ``critic.cliprange_value``: clip range of the value loss; default 0.5.
- ``critic.optim.lr``: critic learning rate; default ``algorithm.optimizer.lr``.
- ``torch.device``: ``auto`` (CUDA when available), ``cpu``, ``cuda``, ``cuda:1``, ….
- ``torch.dtype``: autocast dtype of forward passes (master weights stay float32):
  ``float32`` (CPU default) or ``bfloat16`` (CUDA default).
- ``trainer.prefix_sharing``: ``auto`` packs the rows of a micro-batch as a prefix tree
  (:mod:`rft.trainer.packed_forward`) where the model and batch allow it; ``off``: the
  model's plain forward.
- ``torch.use_rollout_logprobs``: take ``old_log_prob`` from the experiences'
  ``logprobs`` (``rollout_log_prob``) instead of recomputing it with the actor; default
  false (veRL).

Memory controls (veRL's keys; they change memory, not results):

- ``actor_rollout_ref.model.enable_gradient_checkpointing`` /
  ``critic.model.enable_gradient_checkpointing``: recompute each decoder layer's
  activations in the backward pass (Hugging Face ``gradient_checkpointing_enable``,
  non-reentrant).
- ``actor_rollout_ref.actor.fsdp_config.param_offload``,
  ``actor_rollout_ref.ref.fsdp_config.param_offload``,
  ``critic.model.fsdp_config.param_offload``: keep the sharded parameters (and with them
  gradients and optimizer state) in host memory, copied to the device layer by layer
  (FSDP2's ``CPUOffloadPolicy``). Sharded trainers (``trainer.ranks > 1``) only.
- ``…fsdp_config.optimizer_offload``: keep the optimizer state in host memory between
  steps (moved to the device for the step only).
- ``actor_rollout_ref.actor.entropy_from_logits_with_chunking``: compute per-token
  entropies over chunks of ``torch.entropy_chunk_size`` positions (default 2048).
- Mixed precision: ``torch.dtype`` ``bfloat16`` (CUDA default) computes in bfloat16 with
  float32 master weights; on sharded trainers FSDP2's ``MixedPrecisionPolicy`` casts the
  gathered parameters to bfloat16 and reduces gradients in float32. On CPU the default is
  float32 throughout.

``trainer.max_token_len_per_gpu`` (the token budget of a dynamic micro-batch, per rank)
defaults to Trinity-RFT's ``⌈2 · model.max_model_len / sp⌉``, raised to hold a whole
mini-batch up to veRL's 16384 tokens (:mod:`rft.config.token_budget`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from rft.config.plan import TrainerPlan
from rft.config.schema import resolved_grad_clip
from rft.config.token_budget import derived_budget
from rft.errors import RftError

_DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16,
           "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}


def lookup(tree: dict[str, Any] | None, dotted: str, default: Any = None) -> Any:
    """``tree["a"]["b"]`` for ``"a.b"``; ``default`` when any level is missing or None."""
    node: Any = tree or {}
    for part in dotted.split("."):
        if not isinstance(node, dict) or node.get(part) is None:
            return default
        node = node[part]
    return node


@dataclass
class TorchTrainerOptions:
    """Resolved batch sizes, device and numerics of one :class:`TorchTrainer`."""

    mini_batch_size: int
    """Rows per optimizer step."""
    micro_batch_size: int | None
    """Rows per forward/backward with fixed micro-batches; ``None``: the mini-batch."""
    use_dynamic_bsz: bool
    """Form micro-batches by token budget instead of by rows."""
    max_token_len: int | None
    """Token budget of a dynamic micro-batch; ``None``: no limit."""
    ppo_epochs: int
    """Passes over the batch per training step."""
    grad_clip: float | None
    """Max gradient norm (actor and critic)."""
    cliprange_value: float
    """Clip range of the value loss."""
    critic_lr: float
    """Peak learning rate of the critic."""
    device: torch.device
    dtype: torch.dtype | None
    """Autocast dtype of forward passes; ``None``/float32: full precision."""
    temperature: float
    """Sampling temperature: logits are divided by it before log-probs (veRL)."""
    loss_scale_factor: float | None
    """Constant of ``seq-mean-token-sum-norm``: ``model.max_response_tokens``; ``None``:
    the batch's padded response width."""
    total_steps: int | None
    """Training steps of the LR schedule."""
    use_rollout_logprobs: bool
    """Take ``old_log_prob`` from the experiences (``rollout_log_prob``) instead of
    recomputing it."""
    gradient_checkpointing: bool = False
    """Recompute the actor's activations in the backward pass."""
    critic_gradient_checkpointing: bool = False
    """Recompute the critic's activations in the backward pass."""
    param_offload: bool = False
    """Actor parameters (sharded) in host memory (FSDP2 ``CPUOffloadPolicy``)."""
    ref_param_offload: bool = False
    """Reference-model parameters (sharded) in host memory."""
    critic_param_offload: bool = False
    """Critic parameters (sharded) in host memory."""
    optimizer_offload: bool = False
    """Actor optimizer state in host memory between steps."""
    critic_optimizer_offload: bool = False
    """Critic optimizer state in host memory between steps."""
    entropy_chunk_size: int | None = None
    """Positions per chunk of the entropy computation; ``None``: all at once."""
    prefix_sharing: bool = True
    """``trainer.prefix_sharing: auto``: log-prob and critic value forwards run shared
    prefixes once."""

    @classmethod
    def from_plan(cls, plan: TrainerPlan) -> TorchTrainerOptions:
        t = plan.trainer
        tree = t.trainer_config or {}
        repeat_times = plan.algorithm.repeat_times or 1
        mini = lookup(tree, "actor_rollout_ref.actor.ppo_mini_batch_size")
        mini_rows = int(mini) * repeat_times if mini else plan.train_batch_size
        micro = lookup(tree, "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu")
        device = _device(str(lookup(tree, "torch.device", "auto")))
        dtype_name = lookup(tree, "torch.dtype", "bfloat16" if device.type == "cuda" else "float32")
        if str(dtype_name) not in _DTYPES:
            raise RftError(f"trainer.trainer_config.torch.dtype: unknown dtype {dtype_name!r}; "
                           f"expected one of {', '.join(_DTYPES)}")
        epochs = int(lookup(tree, "actor_rollout_ref.actor.ppo_epochs", 1))
        if epochs <= 0:
            raise RftError(f"trainer.trainer_config.actor_rollout_ref.actor.ppo_epochs: must be "
                           f"> 0, got {epochs}")
        if t.max_token_len_per_gpu is not None and t.max_token_len_per_gpu <= 0:
            raise RftError(f"trainer.max_token_len_per_gpu: must be > 0, got "
                           f"{t.max_token_len_per_gpu}")
        temperature = plan.model.temperature if plan.model.temperature > 0 else 1.0
        max_token_len = t.max_token_len_per_gpu
        if max_token_len is None and plan.model.max_model_len:
            max_token_len = derived_budget(plan.model.max_model_len,
                                           math.ceil(mini_rows / max(1, t.ranks or 1)),
                                           t.ulysses_sequence_parallel_size).tokens
        chunking = bool(lookup(tree, "actor_rollout_ref.actor.entropy_from_logits_with_chunking",
                               False))
        return cls(
            mini_batch_size=mini_rows,
            micro_batch_size=int(micro) if micro else None,
            use_dynamic_bsz=t.use_dynamic_bsz,
            prefix_sharing=t.prefix_sharing == "auto",
            max_token_len=max_token_len,
            ppo_epochs=epochs,
            grad_clip=resolved_grad_clip(t, plan.algorithm.optimizer),
            cliprange_value=float(lookup(tree, "critic.cliprange_value", 0.5)),
            critic_lr=float(lookup(tree, "critic.optim.lr", plan.algorithm.optimizer.lr)),
            device=device,
            dtype=_DTYPES[str(dtype_name)],
            temperature=temperature,
            loss_scale_factor=plan.model.max_response_tokens,
            total_steps=plan.total_steps,
            use_rollout_logprobs=bool(lookup(tree, "torch.use_rollout_logprobs", False)),
            gradient_checkpointing=bool(lookup(
                tree, "actor_rollout_ref.model.enable_gradient_checkpointing", False)),
            critic_gradient_checkpointing=bool(lookup(
                tree, "critic.model.enable_gradient_checkpointing", False)),
            param_offload=bool(lookup(tree, A + "fsdp_config.param_offload", False)),
            ref_param_offload=bool(lookup(tree, "actor_rollout_ref.ref.fsdp_config.param_offload",
                                          False)),
            critic_param_offload=bool(lookup(tree, "critic.model.fsdp_config.param_offload",
                                             False)),
            optimizer_offload=bool(lookup(tree, A + "fsdp_config.optimizer_offload", False)),
            critic_optimizer_offload=bool(lookup(
                tree, "critic.model.fsdp_config.optimizer_offload", False)),
            entropy_chunk_size=(int(lookup(tree, "torch.entropy_chunk_size", 2048))
                                if chunking else None),
        )


A = "actor_rollout_ref.actor."
"""Prefix of the actor's keys in ``trainer_config``. The keys this trainer reads are
listed in :data:`rft.config.support.TRAINER_CONFIG_HONOURED` (validation warns about
every other key set there)."""


def param_offload(tree: dict[str, Any] | None) -> bool:
    """Some model of ``trainer.trainer_config`` ``tree`` is sharded with FSDP2's
    ``CPUOffloadPolicy`` (a ``fsdp_config.param_offload`` of the actor, reference or
    critic)."""
    return (bool(lookup(tree, A + "fsdp_config.param_offload", False))
            or bool(lookup(tree, "actor_rollout_ref.ref.fsdp_config.param_offload", False))
            or bool(lookup(tree, "critic.model.fsdp_config.param_offload", False)))


def _device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError as exc:
        raise RftError(f"trainer.trainer_config.torch.device: {exc}") from exc
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RftError(f"trainer.trainer_config.torch.device: {name!r} but CUDA is not "
                       "available here")
    return device
