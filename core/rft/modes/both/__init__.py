"""Mode ``both``: explorer, trainer and experience buffer as Ray actors.

The coordinator (:mod:`rft.modes.both.coordinator`, in the launching process) owns no
model. It starts the actors through the runtime it is handed
(:class:`~rft.modes.runtime.BothActors`; on Ray: :mod:`rft.distributed.both_actors`), then
drives them with non-blocking calls::

    explorer actor:  [sync v] explore 1 → [sync v] explore 2 → …   writes → buffer actor
    trainer actor:   train 1 → [hand out weights] → train 2 → …       reads ← buffer actor
    weights:         trainer → Ray object store → explorer (``sync_method: memory``)
                     trainer → broadcast group → explorer / replicas (``nccl``)
                     trainer → checkpoint → explorer (``checkpoint``)

- Train step ``t`` is started once explore step ``t`` is done (its data is there), so a
  waiting trainer never holds weights the explorer waits for.
- Before each explore step the sync policy (:mod:`rft.modes.sync_policy`) says
  whether the explorer first loads handed-out weights, waits for them, or asks for them.
- When the explorer is idle (waiting, or done) the buffer is told no writer is active, so
  a batch that came out short (failed tasks) is trained as it is.
- Monitors, evaluation schedule, checkpoints and ``summary.json`` work as in colocate
  (one :class:`~rft.modes.stage.StageLifecycle` decides what is due).

Resuming (``continue_from_checkpoint``): a checkpoint of step ``t`` holds the trainer (and
its process's random generators), the explorer's state after explore step ``t`` (task
selectors, engine seed sequence, random generators, experiences written) and the
experience buffer's state when the explorer had written nothing past step ``t``. The
trainer resumes from the newest *readable* checkpoint, the buffer settles its leases with
it (``sql``: reads after ``t`` are handed out again; a redone explore step does not write
twice), the explorer gets the checkpoint's weights and state and goes on at step ``t + 1``,
and the monitors forget what was logged after ``t``. A checkpoint is written after the
evaluation due at its step, and before the trainer's next step. With ``sync_style:
fixed``, ``sync_offset: 0`` and checkpoints at sync points the resumed run is, on CPU,
the uninterrupted one bit for bit (``docs/faults.md`` says what holds otherwise).

No silent hangs: the explorer waits at most ``synchronizer.sync_timeout`` for weights, the
trainer at most ``experience_buffer.max_read_timeout`` for experiences, and a dead actor
ends the run at once with a one-line error naming it (after the trainer's last completed
step is checkpointed, when the trainer is alive).

The package: :mod:`~rft.modes.both.progress` (where the run is, the calls in flight),
:mod:`~rft.modes.both.setup` (actors started, resumed), :mod:`~rft.modes.both.checkpoints`
(what a checkpoint holds and when it is written), :mod:`~rft.modes.both.coordinator` (the
loop: what to start, what a finished call leads to, the end).
"""

from __future__ import annotations

from rft.checkpoint import check_writable
from rft.config import Stage
from rft.errors import RftError
from rft.modes.both.coordinator import Coordinator
from rft.modes.run_state import check_resumable
from rft.modes.runtime import Distributed
from rft.modes.stage import StageResult


def run_both(stage: Stage, runtime: Distributed) -> StageResult:
    """Run one ``both`` stage on the run's cluster (``runtime``; see the module
    docstring)."""
    config = stage.config
    keep, offset = config.trainer.max_checkpoints_to_keep, config.synchronizer.sync_offset
    if config.synchronizer.sync_method == "checkpoint" and keep is not None and keep < offset + 2:
        raise RftError(f"trainer.max_checkpoints_to_keep: {keep} could delete a checkpoint before "
                       f"the explorer loads it (sync_offset {offset}); keep at least {offset + 2}")
    check_writable(stage.plan.job_dir)
    check_resumable(stage.plan.job_dir, config.continue_from_checkpoint)
    with runtime.cluster(stage):
        return Coordinator(stage, runtime.both_actors(stage)).run()


__all__ = ["run_both"]
