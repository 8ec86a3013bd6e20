"""Replaying a :class:`~rft.alignment.snapshot.StepSnapshot` through rft's own trainer,
and comparing two updates.

:func:`replay_with_rft` rebuilds a :class:`~rft.trainer.torch_trainer.TorchTrainer` from
the snapshot's stage config (algorithm functions resolved by the plugin registry, as
validation does), puts the snapshot's weights into a fresh model and its optimizer state
into the trainer's optimizer, and runs the trainer's actor update (loss assembly of
:mod:`rft.trainer.loss`, backward, grad clipping, optimizer step) on the recorded batch.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import torch
from torch import nn

from rft.alignment.record import actor_parameters
from rft.alignment.snapshot import StepSnapshot
from rft.errors import RftError
from rft.trainer.batching import TensorBatch

if TYPE_CHECKING:
    from rft.plugins import PluginRegistry
    from rft.trainer.torch_trainer import TorchTrainer

ModelFactory = Callable[[], nn.Module]
"""Builds an (untrained) actor whose ``state_dict`` keys match the snapshot's."""


def build_actor(snapshot: StepSnapshot, model_factory: ModelFactory | None = None) -> nn.Module:
    """A fresh float32 model holding the snapshot's weights (before the update).

    Default: ``AutoModelForCausalLM.from_config`` of the recorded Hugging Face config (no
    files needed); pass ``model_factory`` for models that need remote code.
    """
    if model_factory is not None:
        model = model_factory()
    else:
        from transformers import AutoConfig, AutoModelForCausalLM

        fields = dict(snapshot.model_config)
        model_type = fields.pop("model_type", None)
        if not model_type:
            raise RftError("alignment snapshot: model_config has no model_type; pass "
                           "model_factory to rebuild the model")
        config = AutoConfig.for_model(model_type, **fields)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    try:
        model.load_state_dict(snapshot.actor_state)
    except RuntimeError as exc:
        raise RftError(f"alignment snapshot: the actor weights do not fit the model: "
                       f"{str(exc).splitlines()[0]}") from exc
    return model.float()


def tensor_batch(snapshot: StepSnapshot) -> TensorBatch:
    """The recorded batch as a :class:`TensorBatch` (copies: a replay never alters it)."""
    return TensorBatch(snapshot.prompt_width,
                       {k: v.clone() for k, v in snapshot.tensors.items()})


def rft_trainer(snapshot: StepSnapshot, *, registry: PluginRegistry | None = None,
                model_factory: ModelFactory | None = None) -> TorchTrainer:
    """A :class:`TorchTrainer` in the snapshot's state, ready for the recorded update.

    The stage config is converted back to :class:`~rft.config.schema.RftConfig` and its
    ``algorithm`` section resolved with :func:`rft.config.derive.derive_algorithm` and
    :func:`rft.config.check_algorithm.check_algorithm`
    against ``registry`` (default: ``PluginRegistry.create()``, installed plugins
    included); the model path need not exist any more.
    """
    from rft.config.convert import to_dataclass
    from rft.config.schema import RftConfig
    from rft.config.plan import TrainerPlan
    from rft.config.check_algorithm import check_algorithm
    from rft.config.derive import derive_algorithm
    from rft.config.findings import Findings
    from rft.plugins import PluginRegistry
    from rft.trainer.torch_trainer import TorchTrainer

    problems: list[str] = []
    config = to_dataclass(RftConfig, copy.deepcopy(snapshot.config), "", problems)
    found = Findings(registry or PluginRegistry.create())
    choice = None
    if not problems:
        config = dataclasses.replace(config, algorithm=derive_algorithm(
            config.algorithm, found.registry, found))
        choice = check_algorithm(config, found)
    problems += found.problems
    loss = choice.loss if choice is not None and not problems else None
    if problems or loss is None or choice is None:
        raise RftError(f"alignment snapshot: its config does not resolve here: "
                       f"{(problems or ['no policy loss'])[0]}")
    plan = TrainerPlan(model=config.model, algorithm=config.algorithm, trainer=config.trainer,
                       preset=choice.preset, loss=loss,
                       train_batch_size=config.buffer.train_batch_size or 1,
                       total_steps=snapshot.settings.total_steps)
    trainer = TorchTrainer(plan, model=build_actor(snapshot, model_factory))
    trainer.optimizer.load_state_dict(copy.deepcopy(snapshot.optimizer_state))
    trainer.global_steps = snapshot.global_steps
    return trainer


def replay_with_rft(snapshot: StepSnapshot, *, registry: PluginRegistry | None = None,
                    model_factory: ModelFactory | None = None) -> dict[str, torch.Tensor]:
    """Run the recorded actor update again through rft's trainer code path.

    :return: ``{name: parameter}`` after the update (CPU copies, ``named_parameters``).
    """
    trainer = rft_trainer(snapshot, registry=registry, model_factory=model_factory)
    trainer._update_actor(tensor_batch(snapshot))
    return actor_parameters(trainer.actor)


def compare_updates(a: Mapping[str, torch.Tensor],
                    b: Mapping[str, torch.Tensor]) -> dict[str, float]:
    """``{name: max |a[name] − b[name]|}`` over the parameters of two updates.

    :raises RftError: the two sets of names or a parameter's shapes differ.
    """
    if set(a) != set(b):
        only = sorted(set(a) ^ set(b))
        raise RftError(f"alignment: the updates name different parameters, e.g. {only[0]!r}")
    diffs: dict[str, float] = {}
    for name, tensor in a.items():
        other = b[name]
        if tensor.shape != other.shape:
            raise RftError(f"alignment: parameter {name!r} has shape {tuple(tensor.shape)} in "
                           f"one update and {tuple(other.shape)} in the other")
        delta = tensor.detach().double().cpu() - other.detach().double().cpu()
        diffs[name] = float(delta.abs().max()) if delta.numel() else 0.0
    return diffs


def parameter_changes(snapshot: StepSnapshot,
                      after: Mapping[str, torch.Tensor]) -> dict[str, float]:
    """``{name: max |after − before|}``: how far an update moved each parameter."""
    before = {name: snapshot.actor_state[name] for name in after}
    return compare_updates(before, after)
