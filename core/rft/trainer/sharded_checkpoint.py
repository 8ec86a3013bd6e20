"""Sharded checkpoints of the native trainer (``torch.distributed.checkpoint``, DCP).

A checkpoint written by a sharded trainer (``trainer.ranks > 1``) is the usual atomic
``global_step_<N>/`` folder of :mod:`rft.checkpoint`, with

- ``trainer_sharded/``: DCP files — every rank writes its shards of the actor (and
  critic), of their optimizer states, plus the schedulers and the step count, and
  ``rng_rank<r>.pt`` (rank ``r``'s torch RNG states), each hashed (SHA-256) as it is
  written, and ``rank<r>.sha256.json`` listing those digests (``state.json`` takes them:
  the shards are not read back, :data:`rft.checkpoint.DIGESTS_SUFFIX`);
- ``trainer.pt``: a small *marker* (``{"format": "rft-sharded", …}``) instead of the
  full state;
- ``hf/`` when exported: the full actor, gathered tensor by tensor on rank 0 (the other
  ranks hold no full copy) and written as safetensors.

The ranks write their files in the turns of ``trainer.save_strategy`` (all at once,
rank after rank, or node after node: :mod:`rft.trainer.save_turns`,
:class:`TurnTakingWriter`).

The folder is written under its temporary name (``global_step_<N>.partial``) by
:func:`rft.checkpoint.save_checkpoint` and renamed only when complete, so a killed save
never becomes the newest checkpoint. All ranks must see the same file system (one node,
or a shared one across nodes, as veRL requires).

Loading reshards: DCP reads whatever shards the loading ranks need, so a checkpoint of 2
ranks resumes on 1 (a one-process trainer reads it without ``torch.distributed``) and one
of 1 rank on 2 (:func:`load_full_state`: rank 0 reads ``trainer.pt`` and the tensors are
broadcast into the shards with ``set_model_state_dict(broadcast_from_rank0=True)``).
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import torch
from torch.distributed.checkpoint import FileSystemWriter
from torch.distributed.checkpoint.filesystem import FileSystem

from rft.checkpoint import SHARDED_FORMAT, HashingFile, save_hashed, write_digests
from rft.errors import RftError, first_line
from rft.trainer.save_turns import SaveTurn, SaveWindow

if TYPE_CHECKING:
    from rft.trainer.torch_trainer import TorchTrainer

SHARDED_DIR = "trainer_sharded"
"""Folder of the DCP files inside a checkpoint."""

MARKER_FORMAT = SHARDED_FORMAT


def sharded_marker(checkpoint_path: str, world_size: int, global_steps: int) -> dict[str, Any]:
    """What ``trainer.pt`` holds for a sharded checkpoint at ``checkpoint_path`` (its final
    name, after the rename)."""
    return {"format": MARKER_FORMAT, "dir": SHARDED_DIR, "world_size": world_size,
            "global_steps": global_steps,
            "path": os.path.join(os.path.abspath(checkpoint_path), SHARDED_DIR)}


def is_sharded_marker(state: Any) -> bool:
    return isinstance(state, dict) and state.get("format") == MARKER_FORMAT


def marker_dir(state: dict[str, Any]) -> str:
    """The DCP folder a marker points at (its absolute path when it was written)."""
    path = str(state["path"])
    if not os.path.isdir(path):
        raise RftError(f"trainer checkpoint: the sharded state {path} is missing (was the job "
                       "folder moved? resume from the checkpoint folder itself)")
    return path


# ---- DCP state ------------------------------------------------------------------------


def _models(trainer: TorchTrainer) -> list[tuple[str, Any, Any, Any]]:
    """``(prefix, model, optimizer, scheduler)`` of the trained models."""
    out: list[tuple[str, Any, Any, Any]] = [
        ("actor", trainer.actor, trainer.optimizer, trainer.scheduler)]
    if trainer.critic is not None:
        out.append(("critic", trainer.critic, trainer.critic_optimizer, trainer.critic_scheduler))
    return out


def _options(trainer: TorchTrainer, **kwargs: Any) -> Any:
    """DCP's state-dict options; with LoRA the frozen base weights are left out (the model
    at ``model_path`` holds them) and loading is not strict about them."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    lora = trainer.lora is not None
    return StateDictOptions(ignore_frozen_params=lora, strict=not lora, **kwargs)


def _dcp_state(trainer: TorchTrainer) -> dict[str, Any]:
    from torch.distributed.checkpoint.state_dict import get_state_dict

    state: dict[str, Any] = {"global_steps": trainer.global_steps}
    for prefix, model, optimizer, scheduler in _models(trainer):
        model_state, optimizer_state = get_state_dict(model, optimizer, options=_options(trainer))
        state[prefix] = model_state
        state[f"{prefix}_optimizer"] = optimizer_state
        state[f"{prefix}_scheduler"] = scheduler.state_dict()
    return state


class HashingFileSystem(FileSystem):
    """DCP's local file system, hashing (SHA-256) every file as it is written
    (:class:`rft.checkpoint.HashingFile`): :attr:`digests` ``{file name: hex}``, renames
    followed (``.metadata.tmp`` → ``.metadata``)."""

    def __init__(self) -> None:
        super().__init__()
        self.digests: dict[str, str] = {}

    @contextlib.contextmanager
    def create_stream(self, path: str | os.PathLike[str], mode: str) -> Iterator[Any]:
        if mode != "wb":
            with super().create_stream(path, mode) as stream:
                yield stream
            return
        with HashingFile(os.fspath(path)) as stream:
            yield stream
        self.digests[os.path.basename(os.fspath(path))] = stream.digest.hexdigest()

    def rename(self, path: str | os.PathLike[str], new_path: str | os.PathLike[str]) -> None:
        super().rename(path, new_path)
        digest = self.digests.pop(os.path.basename(os.fspath(path)), None)
        if digest is not None:
            self.digests[os.path.basename(os.fspath(new_path))] = digest


class TurnTakingWriter(FileSystemWriter):
    """DCP's file-system writer (one thread) that writes only in its rank's turn, then
    ``also()`` (the rank's other files), and records when (:attr:`window`); every file it
    writes is hashed as it is written (:attr:`digests`)."""

    def __init__(self, path: str, turn: SaveTurn, also: Callable[[], None] = lambda: None
                 ) -> None:
        super().__init__(path, thread_count=1)
        self.fs: HashingFileSystem = HashingFileSystem()
        self.turn = turn
        self.also = also
        self.window: tuple[float, float] | None = None

    @property
    def digests(self) -> dict[str, str]:
        """``{file name: SHA-256}`` of the files this writer wrote."""
        return self.fs.digests

    def write_data(self, plan: Any, planner: Any) -> Any:
        result: Any = None
        failure: BaseException | None = None
        for turn in range(self.turn.turns):
            if turn == self.turn.turn:
                start = time.time()
                try:
                    result = super().write_data(plan, planner)
                    result.wait()
                    self.also()
                except Exception as exc:  # noqa: BLE001 (raised after the last turn)
                    failure = exc
                self.window = (start, time.time())
            if self.turn.barrier is not None and self.turn.turns > 1:
                self.turn.barrier()
        if failure is not None:
            raise failure
        return result


def save_sharded(trainer: TorchTrainer, directory: str, turn: SaveTurn | None = None
                 ) -> SaveWindow:
    """Write ``trainer``'s state to ``directory`` (every rank calls it): its shards and
    random generators in its ``turn`` of ``trainer.save_strategy``
    (:mod:`rft.trainer.save_turns`; ``None``: at once); returns when it wrote them."""
    import torch.distributed.checkpoint as dcp

    rank = _rank(trainer)
    turn = turn or SaveTurn()
    rng_name = f"rng_rank{rank}.pt"
    rng_digest: dict[str, str] = {}

    def save_rng() -> None:
        rng_digest[rng_name] = save_hashed(_rng_state(), directory, rng_name)

    writer = TurnTakingWriter(directory, turn, also=save_rng)
    try:
        os.makedirs(directory, exist_ok=True)
        dcp.save(_dcp_state(trainer), storage_writer=writer, no_dist=trainer.ranks is None)
        # the digests of this rank's files, hashed as they were written: the checkpoint's
        # listing takes them instead of reading the shards back (rft.checkpoint)
        write_digests(directory, f"rank{rank}", {**writer.digests, **rng_digest})
    except OSError as exc:
        raise RftError(f"checkpoint {directory}: cannot write: {exc.strerror or exc}") from exc
    except dcp.api.CheckpointException as exc:  # a rank's write failed (DCP gathers them)
        failed = "; ".join(f"rank {r}: {first_line(e)}"
                           for r, (e, _) in sorted(exc.failures.items()))
        raise RftError(f"checkpoint {directory}: cannot write the sharded trainer state "
                       f"({failed})") from exc
    start, end = writer.window or (0.0, 0.0)
    return SaveWindow(rank, turn.turn, start, end)


def load_sharded(trainer: TorchTrainer, directory: str) -> None:
    """Read the DCP state at ``directory`` into ``trainer`` (any number of ranks wrote it;
    every rank calls this)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_state_dict

    state = _dcp_state(trainer)
    try:
        dcp.load(state, checkpoint_id=directory, no_dist=trainer.ranks is None)
    except (Exception, dcp.api.CheckpointException) as exc:  # DCP: several types (a BaseException)
        raise RftError(f"checkpoint {directory}: cannot read the sharded trainer state: "
                       f"{first_line(exc)}") from exc
    for prefix, model, optimizer, scheduler in _models(trainer):
        set_state_dict(model, optimizer, model_state_dict=state[prefix],
                       optim_state_dict=state[f"{prefix}_optimizer"], options=_options(trainer))
        scheduler.load_state_dict(state[f"{prefix}_scheduler"])
    trainer.global_steps = int(state["global_steps"])
    rng = os.path.join(directory, f"rng_rank{_rank(trainer)}.pt")
    if os.path.isfile(rng):  # resharded onto more ranks: the new ones keep their own
        _set_rng_state(torch.load(rng, weights_only=False))


def _rank(trainer: TorchTrainer) -> int:
    return 0 if trainer.ranks is None else trainer.ranks.rank


def _rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["cpu"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


# ---- the one-process format (trainer.pt) ----------------------------------------------


def _parameter_names(model: torch.nn.Module) -> list[str]:
    """Names of the optimizer's parameters, in its order (the trainable ones of
    ``model.parameters()``: all of them without LoRA)."""
    return [name for name, p in model.named_parameters() if p.requires_grad]


def native_to_named(optimizer_state: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """``optimizer.state_dict()`` (parameters by index) → keyed by parameter name."""
    return {"state": {names[int(i)]: value for i, value in optimizer_state["state"].items()},
            "param_groups": [{**group, "params": [names[int(i)] for i in group["params"]]}
                             for group in optimizer_state["param_groups"]]}


def named_to_native(optimizer_state: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """The inverse of :func:`native_to_named`."""
    index = {name: i for i, name in enumerate(names)}
    return {"state": {index[name]: value for name, value in optimizer_state["state"].items()},
            "param_groups": [{**group, "params": [index[name] for name in group["params"]]}
                             for group in optimizer_state["param_groups"]]}


def full_state(trainer: TorchTrainer) -> dict[str, Any] | None:
    """The state of a sharded trainer in the one-process format (``TorchTrainer.state_dict``
    of one process), gathered on rank 0 in host memory (``None`` on the other ranks, which
    hold no full copy). Every rank calls it."""
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        get_optimizer_state_dict,
    )

    options = _options(trainer, full_state_dict=True, cpu_offload=True)
    state: dict[str, Any] = {"global_steps": trainer.global_steps}
    if trainer.lora is not None:
        state["lora"] = trainer._lora_spec().to_plain()
    for prefix, model, optimizer, scheduler in _models(trainer):
        names = _parameter_names(model)
        model_state = get_model_state_dict(model, options=options)
        if trainer.lora is not None and prefix == "actor":  # the adapter only
            keep = set(names)
            model_state = {k: v for k, v in model_state.items() if k in keep}
        optimizer_state = get_optimizer_state_dict(model, optimizer, options=options)
        key = "optimizer" if prefix == "actor" else f"{prefix}_optimizer"
        state[prefix] = model_state
        state[key] = named_to_native(optimizer_state, names) if optimizer_state else {}
        state["scheduler" if prefix == "actor" else f"{prefix}_scheduler"] = scheduler.state_dict()
    return state if _rank(trainer) == 0 else None


def load_full_state(trainer: TorchTrainer, state: dict[str, Any] | None) -> None:
    """Load a one-process state (rank 0 passes it, the other ranks ``None`` or the same)
    into the shards of every rank (broadcast from rank 0). Every rank calls it."""
    from torch.distributed.checkpoint.state_dict import (
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    assert trainer.ranks is not None
    rank0 = trainer.ranks.rank == 0
    if rank0:
        required = ["global_steps", "actor", "optimizer", "scheduler"]
        if trainer.critic is not None:
            required += ["critic", "critic_optimizer", "critic_scheduler"]
        missing = [k for k in required if state is None or k not in state]
        header = {"missing": missing}
    else:
        header = {}
    header = trainer.ranks.gather_objects(header, "checkpoint keys")[0]
    if header["missing"]:
        raise RftError(f"trainer checkpoint: missing {', '.join(header['missing'])}")
    options = _options(trainer, full_state_dict=True, broadcast_from_rank0=True)
    small: dict[str, Any] = {}
    for prefix, model, optimizer, _ in _models(trainer):
        opt_key = "optimizer" if prefix == "actor" else f"{prefix}_optimizer"
        sched_key = "scheduler" if prefix == "actor" else f"{prefix}_scheduler"
        model_state = state[prefix] if rank0 and state is not None else {}
        set_model_state_dict(model, model_state, options=options)
        optimizer_state = (native_to_named(state[opt_key], _parameter_names(model))
                           if rank0 and state is not None else {})
        set_optimizer_state_dict(model, optimizer, optimizer_state, options=options)
        if rank0 and state is not None:
            small[sched_key] = state[sched_key]
    if rank0 and state is not None:
        small["global_steps"] = state["global_steps"]
    small = trainer.ranks.gather_objects(small, "checkpoint schedulers")[0]
    for prefix, _, _, scheduler in _models(trainer):
        key = "scheduler" if prefix == "actor" else f"{prefix}_scheduler"
        scheduler.load_state_dict(small[key])
    trainer.global_steps = int(small["global_steps"])


def load_checkpoint_folder(trainer: TorchTrainer, path: str) -> None:
    """Resume a (sharded) trainer from the checkpoint folder ``path``: its
    ``trainer_sharded/`` when there is one, else rank 0 reads ``trainer.pt`` (the
    one-process format). Every rank calls it."""
    sharded = os.path.join(path, SHARDED_DIR)
    if os.path.isdir(sharded):
        load_sharded(trainer, sharded)
        return
    state = None
    if trainer.is_rank0:
        from rft.checkpoint import Checkpoint, load_checkpoint

        state, _ = load_checkpoint(Checkpoint(0, path))
    if trainer.ranks is None:
        assert state is not None
        trainer.load_state_dict(state)
    else:
        load_full_state(trainer, state)


# ---- Hugging Face export ----------------------------------------------------------------


def save_pretrained_from_shards(trainer: TorchTrainer, path: str,
                                max_shard_size: str = "5GB") -> None:
    """Write the actor of a sharded trainer as a Hugging Face folder: gathered tensor by
    tensor, rank 0 keeps a host copy of each and writes them (safetensors, sharded like
    ``save_pretrained``); the other ranks only take part. Every rank calls it."""
    state: dict[str, torch.Tensor] = {}
    for name, tensor in trainer.gathered_weights(keep=False):
        if tensor is not None:
            state[name] = tensor.to("cpu", copy=True).contiguous()
        del tensor
    if trainer.is_rank0:
        write_hf_folder(trainer.actor, state, path, max_shard_size)


def _hf_config(model: torch.nn.Module) -> Any:
    """A Hugging Face model's ``config`` (``nn.Module`` types a missing attribute as a tensor
    or a module, so it is read by name)."""
    return getattr(model, "config")  # noqa: B009


def write_hf_folder(model: torch.nn.Module, state: dict[str, torch.Tensor], path: str,
                    max_shard_size: str = "5GB") -> None:
    """Config, generation config and ``state`` as safetensors (with an index when
    sharded) in ``path``, as ``save_pretrained`` writes them."""
    from huggingface_hub import split_torch_state_dict_into_shards
    from safetensors.torch import save_file

    os.makedirs(path, exist_ok=True)
    config = copy.deepcopy(_hf_config(model))
    config.architectures = [_model_class_name(model)]
    config.save_pretrained(path)
    generation = getattr(model, "generation_config", None)
    if generation is not None:
        generation.save_pretrained(path)
    split = split_torch_state_dict_into_shards(state, max_shard_size=max_shard_size,
                                               filename_pattern="model{suffix}.safetensors")
    for filename, names in split.filename_to_tensors.items():
        save_file({name: state[name] for name in names}, os.path.join(path, filename),
                  metadata={"format": "pt"})
    if split.is_sharded:
        with open(os.path.join(path, "model.safetensors.index.json"), "w",
                  encoding="utf-8") as handle:
            json.dump({"metadata": split.metadata, "weight_map": split.tensor_to_filename},
                      handle, indent=2)


def _model_class_name(model: torch.nn.Module) -> str:
    """The model's own class (FSDP2 makes ``FSDP<Class>`` subclasses)."""
    from torch.distributed.fsdp import FSDPModule

    for cls in type(model).__mro__:
        if cls is not FSDPModule and not issubclass(cls, FSDPModule):
            return cls.__name__
    return type(model).__name__


__all__ = ["SHARDED_DIR", "TurnTakingWriter", "full_state", "is_sharded_marker",
           "load_checkpoint_folder", "load_full_state", "load_sharded", "marker_dir",
           "named_to_native", "native_to_named", "save_pretrained_from_shards", "save_sharded",
           "sharded_marker", "write_hf_folder"]
