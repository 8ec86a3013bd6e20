"""A ``both`` stage's start: its actors started (and joined in the weight-broadcast group),
then resumed from the newest readable checkpoint when continuing."""

from __future__ import annotations

import logging
import os
import sys

from rft.config import Stage
from rft.errors import RftError
from rft.modes.both.progress import Progress
from rft.modes.builders import steps_over_tasks
from rft.modes.runtime import BothActors, Call, Ref
from rft.modes.stage import Resumed, StageResult

log = logging.getLogger("rft.modes.both")


def start_actors(stage: Stage, actors: BothActors, *, broadcasting: bool) -> int:
    """Start the buffer, the explorer and (for the steps the explorer's tasks make) the
    trainer; print where a sharded trainer's ranks run; return the stage's steps."""
    actors.start_buffer()
    actors.start_explorer()
    train_size = actors.get(actors.call("explorer", "train_size"),
                            Call("explorer", "start-up", 0))
    steps = steps_over_tasks(stage.config, train_size)
    if steps <= 0:
        raise RftError("buffer.total_steps: the run has no step to do (empty data or 0 steps)")
    actors.start_trainer(steps, broadcasting=broadcasting)
    placement = actors.get(actors.call("trainer", "placement"), Call("trainer", "start-up", 0))
    if placement is not None:
        print(f"rft: {placement}", file=sys.stderr, flush=True)
    actors.get(actors.call("buffer", "counts"), Call("buffer", "start-up", 0))
    if broadcasting:
        join_weight_group(stage, actors)
    return steps


def join_weight_group(stage: Stage, actors: BothActors) -> None:
    """``sync_method: nccl``: the trainer (rank 0) and the engine holders join one group."""
    set_up = Call("explorer", "weight-group set-up", 0)
    world = 1 + actors.get(actors.call("explorer", "weight_group_ranks"), set_up)
    address = actors.get(actors.call("trainer", "host_weight_group", world,
                                     stage.config.synchronizer.sync_timeout),
                         Call("trainer", "weight-group set-up", 0))
    joins = [(actors.call("trainer", "join_weight_group"),
              Call("trainer", "weight-group set-up", 0)),
             (actors.call("explorer", "join_weight_group", address), set_up)]
    for ref, call in joins:
        actors.get(ref, call)
    log.info("weight-broadcast group: %d ranks over %s at %s:%d", world, address.backend,
             address.host, address.port)


def resume(stage: Stage, actors: BothActors, progress: Progress, result: StageResult, *,
           broadcasting: bool) -> Resumed:
    """Continue from the newest readable checkpoint (when continuing): the trainer, the
    buffer (leases settled, contents and counters), the explorer's run state and rollout
    record (the steps after the checkpoint forgotten; all of them on a fresh start); the
    explorer loads the checkpoint's weights at its first step."""
    found = actors.get(actors.call("trainer", "resume"), Call("trainer", "resume", 0))
    step = found.step if found is not None else 0
    # a durable buffer (sql) hands out again what was read after the checkpoint
    actors.get(actors.call("buffer", "recover_leases", step), Call("buffer", "resume", step))
    # the rollout record (monitor.rollout_record) forgets the explore steps that are redone
    actors.get(actors.call("explorer", "rewind_record", step), Call("explorer", "resume", step))
    if found is None:
        return Resumed()
    for line in found.skipped:
        log.warning("resume: %s", line)
    state = found.state
    counters = {"written": state.experiences_written, "read": state.experiences_read}
    actors.get(actors.call("buffer", "load_state_dict",
                           found.buffer if found.buffer is not None else counters),
               Call("buffer", "resume", step))
    actors.get(actors.call("explorer", "restore", state), Call("explorer", "resume", step))
    p = progress
    p.explored = p.trained = p.last_saved = p.resumed = step
    p.explored_state[step] = state.explorer_part()
    # the explorer holds the initial model: its next step syncs to the checkpoint's
    # weights first, as the uninterrupted run's did (and reports it alike)
    p.handed_out[step] = resumed_weights(stage, actors, step, found.path,
                                         broadcasting=broadcasting)
    result.eval_before = state.eval_before
    log.info("resumed from %s", found.path)
    return Resumed(step, result.eval_before, initial_weights=False,
                   eval_after=state.eval_after, checkpoint=found.path)


def resumed_weights(stage: Stage, actors: BothActors, step: int, path: str, *,
                    broadcasting: bool) -> Ref:
    """What the resumed explorer loads first: the checkpoint itself when it holds the
    ``hf/`` export (``sync_method: checkpoint``, as handed out), a broadcast of the
    trainer's weights (``nccl``), else the trainer's weights through the object store
    (a sharded checkpoint without ``hf/`` is no engine's to read)."""
    checkpoint_sync = stage.config.synchronizer.sync_method == "checkpoint"
    if checkpoint_sync and os.path.isdir(os.path.join(path, "hf")):
        return path
    if broadcasting:
        return actors.call("trainer", "snapshot_weights", step)
    return actors.call("trainer", "weights")


__all__ = ["join_weight_group", "resume", "resumed_weights", "start_actors"]
