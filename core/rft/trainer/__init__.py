"""Trainers: the abstract interface and the native ``torch`` backend.

    from rft.trainer import Trainer, TorchTrainer

:mod:`rft.trainer.loss` documents how the selected plugin functions are called and
assembled into the loss; :mod:`rft.trainer.optim` the optimizer and LR schedule;
:mod:`rft.trainer.options` the settings read from the config. ``TorchTrainer``'s step is
split by job: :mod:`rft.trainer.row_plan` (mini- / micro-batches, rank shares),
:mod:`rft.trainer.rollout_prep` (no gradient) and :mod:`rft.trainer.policy_updates`
(actor and critic updates). With ``trainer.ranks > 1``
``TorchTrainer(plan)`` is a :class:`~rft.trainer.ranks.RankedTrainer`: FSDP2 ranks as Ray
actors (:mod:`rft.trainer.parallel`, :mod:`rft.trainer.fsdp`,
:mod:`rft.trainer.sharded_checkpoint`, :mod:`rft.trainer.weight_gather`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rft.trainer.base import Trainer

if TYPE_CHECKING:
    from rft.trainer.torch_trainer import TorchTrainer


def __getattr__(name: str) -> Any:
    # TorchTrainer pulls in transformers on first use only.
    if name == "TorchTrainer":
        from rft.trainer.torch_trainer import TorchTrainer

        return TorchTrainer
    raise AttributeError(f"module 'rft.trainer' has no attribute {name!r}")


__all__ = ["TorchTrainer", "Trainer"]
