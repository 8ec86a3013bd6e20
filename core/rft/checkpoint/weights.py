"""The weights an inference engine loads from a checkpoint: the actor's (``hf/``, else
``trainer.pt``, else a sharded trainer's DCP files) or a LoRA run's adapter."""

from __future__ import annotations

import os

import torch

from rft.adapter import AdapterWeights, LoraSpec, is_adapter_folder
from rft.checkpoint.layout import Checkpoint, CheckpointError, first_line
from rft.errors import RftError
from rft.tensor_wire import NamedTensors

def load_actor_weights(checkpoint: Checkpoint) -> dict[str, torch.Tensor]:
    """The actor's weights of a checkpoint in Hugging Face naming (see the module docstring).

    :raises CheckpointError: no readable weights (one line naming the folder).
    """
    hf_dir = os.path.join(checkpoint.path, "hf")
    try:
        if os.path.isdir(hf_dir):
            return _read_hf_weights(hf_dir)
        trainer_state = torch.load(os.path.join(checkpoint.path, "trainer.pt"),
                                   weights_only=False, map_location="cpu")
    except CheckpointError:
        raise
    except Exception as exc:  # missing (pruned meanwhile), truncated or foreign files
        raise CheckpointError(f"checkpoint {checkpoint.path}: cannot read the actor's weights: "
                              f"{type(exc).__name__}: {first_line(exc)}") from exc
    if isinstance(trainer_state, dict) and trainer_state.get("format") == SHARDED_FORMAT:
        return read_sharded_actor(os.path.join(checkpoint.path, str(trainer_state["dir"])))
    actor = trainer_state.get("actor") if isinstance(trainer_state, dict) else None
    if not isinstance(actor, dict):
        raise CheckpointError(f"checkpoint {checkpoint.path}: neither hf/ nor an 'actor' entry "
                              "in trainer.pt holds the actor's weights")
    return actor


SHARDED_FORMAT = "rft-sharded"
"""``trainer.pt``'s ``format`` when a sharded trainer wrote the checkpoint: its state is in
DCP files (:mod:`rft.trainer.sharded_checkpoint`)."""


def read_sharded_actor(directory: str) -> dict[str, torch.Tensor]:
    """The actor's whole tensors (Hugging Face naming) from the DCP files a sharded trainer
    wrote to ``directory``, read in this process (an engine loading a checkpoint that has
    no ``hf/`` export).

    :raises CheckpointError: unreadable files, or a LoRA run's state (its DCP files hold
        the adapter only: the explorer needs the ``hf/`` export).
    """
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    try:
        metadata = dcp.FileSystemReader(directory).read_metadata()
        actor = {name.removeprefix("actor."): torch.empty(meta.size, dtype=meta.properties.dtype)
                 for name, meta in metadata.state_dict_metadata.items()
                 if name.startswith("actor.") and isinstance(meta, TensorStorageMetadata)}
        if any(".lora_" in name for name in actor):
            raise CheckpointError(f"checkpoint {directory}: a LoRA run's sharded state holds "
                                  "the adapter only; the engine needs the hf/ export")
        dcp.load({"actor": actor}, checkpoint_id=directory, no_dist=True)
    except CheckpointError:
        raise
    except (Exception, dcp.api.CheckpointException) as exc:  # (the latter: a BaseException)
        raise CheckpointError(f"checkpoint {directory}: cannot read the sharded actor: "
                              f"{type(exc).__name__}: {first_line(exc)}") from exc
    return actor


def load_sync_weights(checkpoint: Checkpoint) -> dict[str, torch.Tensor] | AdapterWeights:
    """What an engine loads from a checkpoint: the adapter of a LoRA run, else the actor's
    weights (:func:`load_actor_weights`).

    :raises CheckpointError: nothing readable (one line naming the folder).
    """
    hf_dir = os.path.join(checkpoint.path, "hf")
    try:
        if is_adapter_folder(hf_dir):
            return AdapterWeights.load(hf_dir, key=f"checkpoint {checkpoint.path}")
        if not os.path.isdir(hf_dir):
            trainer_state = torch.load(os.path.join(checkpoint.path, "trainer.pt"),
                                       weights_only=False, map_location="cpu")
            if isinstance(trainer_state, dict) and isinstance(trainer_state.get("lora"), dict):
                spec = LoraSpec.from_plain(trainer_state["lora"])
                actor = trainer_state.get("actor") or {}
                return AdapterWeights(spec, NamedTensors(
                    (name.replace(".default.", "."), tensor) for name, tensor in actor.items()))
    except RftError as exc:
        raise CheckpointError(str(exc)) from exc
    except Exception as exc:  # missing (pruned meanwhile), truncated or foreign files
        raise CheckpointError(f"checkpoint {checkpoint.path}: cannot read the actor's weights: "
                              f"{type(exc).__name__}: {first_line(exc)}") from exc
    return load_actor_weights(checkpoint)


def _read_hf_weights(hf_dir: str) -> dict[str, torch.Tensor]:
    """Every tensor of a Hugging Face model folder (``*.safetensors``, else ``*.bin``)."""
    from safetensors.torch import load_file

    names = sorted(os.listdir(hf_dir))
    shards = [n for n in names if n.endswith(".safetensors")]
    weights: dict[str, torch.Tensor] = {}
    if shards:
        for shard in shards:
            weights.update(load_file(os.path.join(hf_dir, shard)))
        return weights
    bins = [n for n in names if n.endswith(".bin") and n.startswith("pytorch_model")]
    for shard in bins:
        weights.update(torch.load(os.path.join(hf_dir, shard), map_location="cpu",
                                  weights_only=True))
    if not weights:
        raise CheckpointError(f"checkpoint {hf_dir}: no *.safetensors or pytorch_model*.bin")
    return weights
