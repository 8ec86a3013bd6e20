"""Alignment harness: replay one recorded training step through rft and through veRL.

    from rft.alignment import (record_step, load_snapshot, replay_with_rft,
                               reference_update_with_verl, compare_updates)

    metrics, _ = record_step(trainer, experiences, "snap/step_7")   # during a run
    snapshot = load_snapshot("snap/step_7")
    ours = replay_with_rft(snapshot)                  # rft's TorchTrainer update
    theirs = reference_update_with_verl(snapshot)     # veRL 0.9.1's ppo_loss + AdamW
    worst = max(compare_updates(ours, theirs).values())

Modules: :mod:`~rft.alignment.snapshot` (what a snapshot holds, saving / loading),
:mod:`~rft.alignment.record` (the hook on :class:`~rft.trainer.torch_trainer.TorchTrainer`),
:mod:`~rft.alignment.replay` (rft replay, comparison), :mod:`~rft.alignment.verl_reference`
(the veRL reference; veRL is imported there lazily, inside the function). See
``docs/alignment.md``.
"""

from __future__ import annotations

from rft.alignment.record import record_step, snapshot_of
from rft.alignment.replay import (build_actor, compare_updates, parameter_changes,
                                  replay_with_rft, rft_trainer)
from rft.alignment.snapshot import StepSettings, StepSnapshot, load_snapshot, save_snapshot
from rft.alignment.verl_reference import reference_update_with_verl

__all__ = [
    "StepSettings", "StepSnapshot", "build_actor", "compare_updates", "load_snapshot",
    "parameter_changes", "record_step", "reference_update_with_verl", "replay_with_rft",
    "rft_trainer", "save_snapshot", "snapshot_of",
]
