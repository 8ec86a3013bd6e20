"""The interface every trainer backend implements (``trainer.trainer_type``).

A backend is registered through ``register_trainers`` as ``{name: class}``; the class is
built as ``cls(plan)`` from the stage's :class:`~rft.config.plan.TrainerPlan` (the
``model`` / ``algorithm`` / ``trainer`` sections, the preset, the resolved loss functions
and the step count) and then driven by the run::

    trainer = run_plan.trainer.implementation(run_plan.trainer_plan(total_steps))
    for step in ...:
        metrics = trainer.train_step(experiences)   # {"actor/pg_loss": ..., ...}
        synchronizer.push(trainer.named_weights())
        checkpoint.save(trainer.write_checkpoint(folder))  # trainer.pt: state_dict()
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any, ClassVar

import torch

from rft.adapter import AdapterWeights
from rft.config.plan import TrainerPlan
from rft.config.schema import RftConfig
from rft.experience import Experience


class Trainer(ABC):
    """One optimisation step per batch of experiences, with checkpointable state."""

    plan: TrainerPlan
    """What the trainer was built from."""
    global_steps: int
    """Training steps done so far (0 before the first ``train_step``)."""
    last_advantages: Mapping[str, float] = MappingProxyType({})
    """The sequence advantage ``Σ_t A_t m_t / Σ_t m_t`` of each experience of the last
    :meth:`train_step`, by ``eid.uid`` (what the rollout record shows,
    :mod:`rft.monitor.rollout_record`); empty where the backend does not report them."""
    supports_lora: ClassVar[bool] = False
    """The backend trains ``model.lora_configs`` adapters (validation refuses them
    otherwise); it then implements :meth:`adapter_weights`."""

    @classmethod
    def check_config(cls, config: RftConfig) -> tuple[list[str], list[str]]:
        """What this backend finds wrong with a config, at validation (before anything is
        built): ``(problems, warnings)``, each a one-line ``dotted.key: message`` (a
        missing dependency, a ``trainer.trainer_config`` key it does not know, …). The
        default finds nothing; validation calls it on the selected ``trainer_type``."""
        return [], []

    def __init__(self, plan: TrainerPlan) -> None:
        self.plan = plan
        self.global_steps = 0

    @abstractmethod
    def train_step(self, experiences: Sequence[Experience]) -> dict[str, float]:
        """Learn from one batch; return metrics under veRL's names (``actor/pg_loss``,
        ``critic/score/mean``, ``timing_s/update_actor``, …). Increments
        :attr:`global_steps`.

        :raises rft.errors.RftError: malformed experiences (one line naming the culprit).
        """

    @abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume: model(s), optimizer(s), scheduler(s), step."""

    @abstractmethod
    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""

    def write_checkpoint(self, directory: str) -> dict[str, Any]:
        """The trainer's part of the checkpoint folder ``directory`` (``global_step_<N>``,
        written under its temporary name and renamed when complete: see
        :mod:`rft.checkpoint`); returns what the folder's ``trainer.pt`` holds.

        The default writes no file and returns :meth:`state_dict` (the whole state in
        ``trainer.pt``). A backend with its own on-disk layout (veRL's ``actor/`` and
        ``critic/`` folders) writes its files under ``directory`` and returns a small
        marker saying what it wrote; those files are then part of the atomic checkpoint
        (renamed, pruned by ``trainer.max_checkpoints_to_keep`` and moved aside with it).
        rft's own metadata (step, counters, random generators, explorer state) stays in
        ``state.json`` whatever the backend writes.

        :raises rft.errors.RftError: the files cannot be written (one line).
        """
        return self.state_dict()

    def read_checkpoint(self, directory: str, trainer_state: dict[str, Any]) -> None:
        """Resume from the checkpoint folder ``directory`` (its final name), whose
        ``trainer.pt`` held ``trainer_state`` (what :meth:`write_checkpoint` returned).
        The default is :meth:`load_state_dict` of ``trainer_state``; a backend that
        overrides :meth:`write_checkpoint` reads its files back here.

        :raises rft.errors.RftError: a missing, truncated or foreign checkpoint (one line
            naming the file).
        """
        self.load_state_dict(trainer_state)

    @abstractmethod
    def named_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """The actor's weights as ``(name, tensor)`` in Hugging Face naming, each shared
        tensor once (the synchronizer pushes them to the inference engines)."""

    def adapter_weights(self) -> AdapterWeights | None:
        """With LoRA: the adapter (what a weight sync moves instead of
        :meth:`named_weights`); ``None``: full fine-tuning (the default)."""
        return None

    def save_pretrained(self, path: str) -> None:
        """Write the actor in Hugging Face format (for the next stage, engines, users)."""
        raise NotImplementedError(f"{type(self).__name__} cannot save Hugging Face weights")

    def close(self) -> None:
        """Release devices and processes; the default does nothing."""
