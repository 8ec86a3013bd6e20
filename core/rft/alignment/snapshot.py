"""Step snapshots: one training step's inputs and state, written to a directory.

A snapshot holds what :meth:`rft.trainer.torch_trainer.TorchTrainer._update_actor`
consumes — the prepared batch (token ids, masks, old / reference log-probs, advantages,
…) — plus the actor's ``state_dict`` and the optimizer's ``state_dict`` just before the
update, the resolved loss / optimizer settings, the stage config and the model's Hugging
Face config. Optionally also the actor's parameters after the recorded update.

Layout of a snapshot directory (each file written to ``<name>.tmp`` then ``os.replace``d)::

    batch.pt    {"prompt_width": P, "tensors": {name: (B, P+R) or (B, R) or (B,)}}
    state.pt    {"actor": state_dict, "optimizer": state_dict, "actor_after": {...} | None,
                 "global_steps": int}
    meta.json   {"format": 1, "settings": StepSettings, "config": {model, algorithm,
                 trainer, buffer.train_batch_size}, "model_config": config.to_dict()}

The ``.pt`` files hold plain containers and tensors only: they load with
``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from rft.errors import RftError, first_line

FORMAT = 1
"""Version of the snapshot layout written by :func:`save_snapshot`."""

BATCH_FILE = "batch.pt"
STATE_FILE = "state.pt"
META_FILE = "meta.json"

_REQUIRED = {
    BATCH_FILE: ("prompt_width", "tensors"),
    STATE_FILE: ("actor", "optimizer", "global_steps"),
    META_FILE: ("format", "settings", "config", "model_config"),
}


@dataclass
class StepSettings:
    """The algorithm and optimizer settings of the recorded step, resolved by the trainer."""

    algorithm_type: str
    """``algorithm.algorithm_type`` (e.g. ``grpo``)."""
    experience_format: str
    """The preset's ``experience_format`` (``rollout``, ``sft``, ``dpo``)."""
    loss_agg_mode: str
    """How per-token losses were aggregated (veRL ``loss_agg_mode``)."""
    policy_loss: str
    """Name of the policy loss fn (``ppo``: veRL's ``vanilla`` dual-clip surrogate)."""
    policy_loss_args: dict[str, Any]
    """Its arguments (``clip_range``, ``clip_range_low``, ``clip_range_high``, ``clip_ratio_c``)."""
    kl_loss: str
    """KL estimator of the KL loss (``none``: no KL loss)."""
    kl_loss_args: dict[str, Any]
    """Its arguments (``kl_coef``)."""
    kl_penalty: str
    """KL estimator of the reward penalty (already applied to the advantages)."""
    entropy_loss: str
    """Name of the entropy loss fn (``default``: ``entropy_coef · agg(entropy)``; ``none``)."""
    entropy_loss_args: dict[str, Any]
    """Its arguments (``entropy_coef``)."""
    lr: float
    """Learning rate of this step (after the schedule)."""
    betas: list[float]
    """AdamW ``betas``."""
    eps: float
    """AdamW ``eps``."""
    weight_decay: float
    """AdamW decoupled weight decay."""
    grad_clip: float | None
    """Max gradient norm; ``None``: no clipping."""
    temperature: float
    """Logits are divided by it before log-probs."""
    loss_scale_factor: float
    """Constant of ``seq-mean-token-sum-norm`` as the trainer resolved it."""
    mini_batch_size: int
    """Rows per optimizer update (``0``: the whole batch)."""
    micro_batch_size: int | None
    """Rows per forward/backward with fixed micro-batches."""
    use_dynamic_bsz: bool
    """Micro-batches by token budget."""
    max_token_len: int | None
    """Token budget of a dynamic micro-batch."""
    ppo_epochs: int
    """Passes over the batch."""
    total_steps: int | None
    """Training steps of the LR schedule."""
    dtype: str
    """Autocast dtype of forward passes (``torch.float32``: full precision)."""

    @property
    def kl_coef(self) -> float:
        """``kl_coef`` of the KL loss (``0`` when it is ``none``)."""
        return 0.0 if self.kl_loss == "none" else float(self.kl_loss_args.get("kl_coef", 0.0))

    @property
    def entropy_coef(self) -> float:
        """``entropy_coef`` of the entropy loss (``0`` when it is ``none``)."""
        if self.entropy_loss == "none":
            return 0.0
        return float(self.entropy_loss_args.get("entropy_coef", 0.0))


@dataclass
class StepSnapshot:
    """One recorded training step (see the module docstring)."""

    prompt_width: int
    """``P``: responses start at this column of the sequence tensors."""
    tensors: dict[str, torch.Tensor]
    """The batch as ``_update_actor`` received it: ``input_ids``, ``attention_mask``,
    ``position_ids`` (B, P+R); ``response_mask``, ``advantages``, ``returns`` and, when
    computed, ``old_log_prob``, ``ref_log_prob`` (B, R)."""
    actor_state: dict[str, torch.Tensor]
    """Actor ``state_dict`` before the update."""
    optimizer_state: dict[str, Any]
    """Optimizer ``state_dict`` before the update."""
    settings: StepSettings
    config: dict[str, Any]
    """The sections of the stage config the trainer was built from (``model``,
    ``algorithm``, ``trainer``, ``buffer.train_batch_size``), as a mapping."""
    model_config: dict[str, Any]
    """The actor's Hugging Face config (``config.to_dict()``)."""
    global_steps: int = 0
    """Trainer steps done before the recorded one."""
    actor_after: dict[str, torch.Tensor] | None = field(default=None)
    """Actor parameters after the recorded update (``named_parameters``), if kept."""


def _atomic_torch_save(obj: Any, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def _atomic_json(obj: Any, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(obj, handle, indent=1, sort_keys=True)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def save_snapshot(snapshot: StepSnapshot, directory: str | os.PathLike[str]) -> Path:
    """Write ``snapshot`` to ``directory`` (created if needed); return the directory.

    :raises RftError: the directory or a file cannot be written (one line naming it).
    """
    root = Path(directory)
    writes = (
        (root / BATCH_FILE, lambda p: _atomic_torch_save(
            {"prompt_width": snapshot.prompt_width, "tensors": snapshot.tensors}, p)),
        (root / STATE_FILE, lambda p: _atomic_torch_save(
            {"actor": snapshot.actor_state, "optimizer": snapshot.optimizer_state,
             "actor_after": snapshot.actor_after, "global_steps": snapshot.global_steps}, p)),
        (root / META_FILE, lambda p: _atomic_json(
            {"format": FORMAT, "settings": dataclasses.asdict(snapshot.settings),
             "config": snapshot.config, "model_config": snapshot.model_config}, p)),
    )
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RftError(f"alignment snapshot {root}: cannot create: "
                       f"{exc.strerror or exc}") from exc
    for path, write in writes:
        try:
            write(path)
        except (OSError, TypeError, ValueError) as exc:
            raise RftError(f"alignment snapshot {path}: cannot write: "
                           f"{first_line(exc)}") from exc
    return root


def _read(path: Path) -> dict[str, Any]:
    """One snapshot file as a mapping with its required keys, or a one-line RftError."""
    if not path.is_file():
        raise RftError(f"alignment snapshot {path}: missing (not a step snapshot directory?)")
    try:
        if path.suffix == ".json":
            with open(path, encoding="utf-8") as handle:
                data = json.load(handle)
        else:
            data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises several types for truncated / foreign files
        raise RftError(f"alignment snapshot {path} is corrupt or unreadable: "
                       f"{first_line(exc)}") from exc
    if not isinstance(data, dict):
        raise RftError(f"alignment snapshot {path} is corrupt: expected a mapping, got "
                       f"{type(data).__name__}")
    missing = [k for k in _REQUIRED[path.name] if k not in data]
    if missing:
        raise RftError(f"alignment snapshot {path} is corrupt: lacks {', '.join(missing)}")
    return data


def load_snapshot(directory: str | os.PathLike[str]) -> StepSnapshot:
    """Read a snapshot written by :func:`save_snapshot` (tensors on the CPU).

    :raises RftError: a missing, corrupt or incompatible file (one line naming it).
    """
    root = Path(directory)
    meta = _read(root / META_FILE)
    if meta["format"] != FORMAT:
        raise RftError(f"alignment snapshot {root / META_FILE}: format {meta['format']!r}, "
                       f"this rft reads format {FORMAT}")
    try:
        settings = StepSettings(**meta["settings"])
    except TypeError as exc:
        raise RftError(f"alignment snapshot {root / META_FILE} is corrupt: settings: "
                       f"{first_line(exc)}") from exc
    batch = _read(root / BATCH_FILE)
    state = _read(root / STATE_FILE)
    return StepSnapshot(
        prompt_width=int(batch["prompt_width"]), tensors=dict(batch["tensors"]),
        actor_state=state["actor"], optimizer_state=state["optimizer"], settings=settings,
        config=meta["config"], model_config=meta["model_config"],
        global_steps=int(state["global_steps"]), actor_after=state.get("actor_after"))
