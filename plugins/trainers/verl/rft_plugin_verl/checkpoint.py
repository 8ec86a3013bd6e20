"""Checkpoints of ``trainer_type: verl`` in veRL's own layout, inside rft's checkpoint folder.

rft's checkpoint of step ``N`` is ``<job dir>/global_step_<N>/`` (written atomically by
:mod:`rft.checkpoint`); the job dir plays the part of veRL's ``trainer.default_local_dir``,
so the folder has the layout of veRL 0.9.1's ``RayPPOTrainer._save_checkpoint``::

    global_step_<N>/
        actor/                    veRL's checkpoint manager of the actor's engine
            model_world_size_<W>_rank_<r>.pt, optim_world_size_<W>_rank_<r>.pt,
            extra_state_world_size_<W>_rank_<r>.pt (LR scheduler, random generators),
            fsdp_config.json, huggingface/ (config, tokenizer)
        critic/                   the same for the critic, when the algorithm has one
        trainer.pt                rft's marker (:func:`save`), not the models
        state.json, hf/, …        rft's own metadata and exports, as for every trainer

The files under ``actor/`` / ``critic/`` are written and read by veRL's workers
(``save_checkpoint`` / ``load_checkpoint`` of ``ActorRolloutRefWorker`` and
``TrainingWorker``, or of their worker groups): nothing here serialises veRL's
internals. The reference model is not saved (it never changes; it is rebuilt from
``model.model_path``). veRL's own rotation (``max_ckpt_to_keep``) is not used: rft's
``trainer.max_checkpoints_to_keep`` prunes whole ``global_step_<N>`` folders.

The marker in ``trainer.pt`` lists every file veRL wrote with its size, so that resuming
from a folder with a missing or truncated file is one line naming the file, before veRL
reads anything.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from rft.errors import RftError

LAYOUT_FORMAT = "rft-verl-layout"
"""``trainer.pt``'s ``format`` when it marks a checkpoint in veRL's layout."""

ROLES = ("actor", "critic")
"""Sub-folders of a checkpoint, in veRL's names (``str(Role.Critic)`` is ``critic``)."""


def save(directory: str, workers: Mapping[str, Any], *, global_steps: int,
         ranks: int) -> dict[str, Any]:
    """Have each worker in ``workers`` (role → veRL worker or worker group) write its
    checkpoint to ``<directory>/<role>``; return the marker ``trainer.pt`` holds:
    ``{"format", "global_steps", "ranks", "roles", "files": {path: bytes}}``.

    :raises RftError: a worker cannot write (one line naming the folder and the cause).
    """
    for role, worker in workers.items():
        path = os.path.join(directory, role)
        try:
            worker.save_checkpoint(path, hdfs_path=None, global_step=global_steps,
                                   max_ckpt_to_keep=None)
        except Exception as exc:  # veRL raises OSError, RuntimeError, AssertionError, …
            raise RftError(f"checkpoint {path}: veRL cannot write the {role}'s checkpoint: "
                           f"{_cause(exc)}") from exc
    return {"format": LAYOUT_FORMAT, "global_steps": int(global_steps), "ranks": int(ranks),
            "roles": list(workers), "files": _manifest(directory, list(workers))}


def load(directory: str, marker: Any, workers: Mapping[str, Any], *, ranks: int) -> int:
    """Check the checkpoint folder ``directory`` against its ``marker`` (:func:`check`),
    have each worker read ``<directory>/<role>``, and return the step count it holds.

    :raises RftError: a foreign, incomplete or unreadable checkpoint (one line).
    """
    check(directory, marker, list(workers), ranks=ranks)
    for role, worker in workers.items():
        path = os.path.join(directory, role)
        try:
            worker.load_checkpoint(path, hdfs_path=None, del_local_after_load=False)
        except Exception as exc:  # torch.load's / load_state_dict's errors, …
            raise RftError(f"checkpoint {path}: veRL cannot load the {role}'s checkpoint: "
                           f"{_cause(exc)}") from exc
    return int(marker["global_steps"])


def check(directory: str, marker: Any, roles: list[str], *, ranks: int) -> None:
    """That ``marker`` (``trainer.pt``'s content) is this module's, written by the same
    number of ranks for the same roles, and that every file it lists is in ``directory``
    with its size.

    :raises RftError: the first problem, one line naming the checkpoint or the file.
    """
    where = os.path.join(directory, "trainer.pt")
    if not isinstance(marker, dict) or marker.get("format") != LAYOUT_FORMAT:
        written = marker.get("format") if isinstance(marker, dict) else type(marker).__name__
        raise RftError(f"checkpoint {where}: not a checkpoint of trainer_type 'verl' in veRL's "
                       f"layout (format {written!r}); resume with the trainer that wrote it")
    if sorted(marker.get("roles", [])) != sorted(roles):
        raise RftError(f"checkpoint {directory}: holds {', '.join(marker.get('roles', []))}, "
                       f"this run trains {', '.join(roles)} (a different algorithm?)")
    if int(marker.get("ranks", 1)) != ranks:
        raise RftError(f"checkpoint {directory}: written by {marker.get('ranks')} trainer "
                       f"rank(s); veRL's FSDP checkpoint is read by as many ranks (this run: "
                       f"{ranks})")
    files = marker.get("files")
    if not isinstance(files, dict) or not files:
        raise RftError(f"checkpoint {where}: the marker lists no veRL files")
    for name, size in sorted(files.items()):
        path = os.path.join(directory, name)
        try:
            found = os.path.getsize(path)
        except OSError:
            raise RftError(f"checkpoint {path}: missing (veRL wrote it at step "
                           f"{marker.get('global_steps')})") from None
        if found != size:
            raise RftError(f"checkpoint {path}: {found} bytes, veRL wrote {size} (truncated "
                           "or overwritten)")


def _manifest(directory: str, roles: list[str]) -> dict[str, int]:
    """``{path relative to directory: size in bytes}`` of every file under the roles'
    folders."""
    files: dict[str, int] = {}
    for role in roles:
        for folder, _, names in os.walk(os.path.join(directory, role)):
            for name in names:
                path = os.path.join(folder, name)
                files[os.path.relpath(path, directory)] = os.path.getsize(path)
    return files


def _cause(exc: BaseException) -> str:
    """``Type: first line`` of an exception."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}".rstrip(": ")


__all__ = ["LAYOUT_FORMAT", "ROLES", "check", "load", "save"]
