"""Mode ``serve``: the rollout model on the OpenAI API; live requests become experiences.

One process serves the explorer's rollout model on the OpenAI-compatible endpoint
(:mod:`rft.endpoint.openai_server`, with its API key and request bounds: the rollout
model's ``openai_api_*`` fields) and records every chat completion as experience
candidates; clients attach rewards with ``POST /feedback`` and release an episode with
``POST /commit`` (:mod:`rft.endpoint.episodes`) through the experience operators
(``data_processor.experience_pipeline``, when there are any) to the experience buffer.
Uncommitted responses are never trained; at most ``explorer.serve_max_pending`` are kept.

Who trains (``synchronizer.sync_method``):

- ``memory`` (default): this process. Whenever the buffer holds a training batch
  (``batch_size × repeat_times`` experiences), one step::

      read the batch (leased to the step) → trainer.train_step → weights into the engine
      (model_version = step; engine calls in flight finish first, new ones wait)
      → monitors (role "trainer", with the serve/* counters)
      → rollout record (``monitor.rollout_record``): the batch the step trained, with the
        trainer's advantages, every ``rollout_record_every``-th step (a serve run has no
        explore step: its steps are the trainer's)

  and a checkpoint every ``trainer.save_interval`` steps and when the run ends. With
  ``synchronizer.streaming_batches`` a batch is whole episodes (an episode is one group,
  ``info["group_size"]`` its size); the episodes a batch had no room for are held back to
  the next step and kept in the checkpoint (``RunState.held_experiences``), as mode
  ``train`` does, so a resumed run trains them once.
- ``checkpoint``: a ``mode: train`` process of the same config reads the ``sql`` buffer
  and saves checkpoints; this process loads the newest one every
  ``explorer.service_status_check_interval`` seconds.

Either way the next responses carry the new ``model_version``. The run ends on SIGTERM /
Ctrl-C (committed episodes are in the buffer: a commit is answered once written), or after
``trainer.total_steps`` (else ``buffer.total_steps``) steps trained here when set. A
trainer that fails is one log line; serving goes on with the weights it has, and commits
keep going to the buffer. ``<job dir>/serve.json`` holds the endpoint's address for
clients (``examples/serve_client.py``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable

from rft.buffer.factory import open_experience_buffer
from rft.buffer.operators import run_pipeline
from rft.buffer.storage import ExperienceStorage
from rft.checkpoint import check_writable, set_rng_state
from rft.config import Stage
from rft.endpoint.engine_gate import EngineGate
from rft.endpoint.episodes import EpisodeLedger
from rft.endpoint.openai_server import OpenAIServer
from rft.endpoint.settings import EndpointSettings
from rft.engines.engine_factory import build_engine, default_sampling
from rft.engines.reply_parsing import reply_parser_of
from rft.experience import Experience
from rft.buffer.streaming import assembler_of
from rft.modes.builders import (
    build_trainer,
    held_state,
    quiet_libraries,
    restore_held,
    resume_checkpoint,
    resumed_state,
    save_stage_checkpoint,
)
from rft.modes.checkpoint_sync import CheckpointSynchronizer
from rft.modes.run_state import RunState, check_resumable
from rft.modes.runtime import Distributed
from rft.modes.stage import StageLifecycle, StageResult
from rft.monitor.rollout_record import recorder_of
from rft.rollout.model_wrapper import ModelWrapper
from rft.synchronizer import MemorySynchronizer

log = logging.getLogger("rft.modes.serve")

ADDRESS_FILE = "serve.json"
"""In the job dir: ``{"address": "http://host:port", "pid": …}`` of the serving process."""

POLL_S = 0.2
"""Seconds between looks at the buffer while waiting for a training batch."""

OPEN_ENDED_STEPS = 1_000_000
"""Steps the trainer is built for when the run has no step count (it serves until
stopped); what depends on it (learning-rate schedules) sees a long run."""


class ServeRun:
    """One serve-mode stage: endpoint, ledger, buffer and, with ``sync_method: memory``,
    the trainer (see the module docstring)."""

    def __init__(self, stage: Stage, lifecycle: StageLifecycle,
                 cleanup: contextlib.ExitStack) -> None:
        plan = self.plan = stage.plan
        config = plan.config
        self.lifecycle = lifecycle
        self.engine = build_engine(config, plan.rollout_model.engine.implementation)
        close = getattr(self.engine, "close", None)
        if close is not None:
            cleanup.callback(close)
        self.model = ModelWrapper(self.engine, default_sampling(config))
        self.storage: ExperienceStorage = open_experience_buffer(plan.experience_buffer,
                                                                 plan.priority_fn)
        cleanup.callback(self.storage.close)
        self.operators = [(chosen.name, chosen.implementation(chosen.args))
                          for chosen in plan.operators]
        self.ledger = EpisodeLedger(self.release, max_pending=config.explorer.serve_max_pending)
        self.gate = EngineGate()
        self.steps = config.trainer.total_steps or config.buffer.total_steps or 0
        """Steps to train here (0: until stopped)."""
        self.trains = config.synchronizer.sync_method == "memory"
        self.trainer_error: str | None = None
        """Why the trainer stopped (serving goes on)."""
        self.step = self.saved_step = 0
        self.weights: MemorySynchronizer | None = None
        self.checkpoints: CheckpointSynchronizer | None = None
        if self.trains:
            self.trainer, self.strategy = build_trainer(
                plan, self.storage, self.steps or OPEN_ENDED_STEPS, self.engine.tokenizer)
            cleanup.callback(self.trainer.close)
            self.weights = MemorySynchronizer(self.trainer, [self.engine])
        else:
            self.checkpoints = CheckpointSynchronizer(plan.job_dir, [self.engine],
                                                      timeout=config.synchronizer.sync_timeout)
        # the batch of each k-th train step here (a separate train process: none recorded)
        self.recorder = recorder_of(config.monitor, plan.job_dir,
                                    lambda ids: self.engine.tokenizer.decode(ids),
                                    explores=self.trains)
        self.check_interval = config.explorer.service_status_check_interval
        rm = config.explorer.rollout_model
        self.server = OpenAIServer(
            self.model, host=rm.openai_api_host, port=rm.openai_api_port,
            log_requests=rm.enable_log_requests,
            reply_parser=reply_parser_of(plan.rollout_model, rm.enable_auto_tool_choice),
            settings=EndpointSettings.of(rm), ledger=self.ledger, gate=self.gate)
        self._cleanup = cleanup

    def open(self) -> None:
        """Resume (the monitors forget what a stopped run logged after its checkpoint),
        then serve and write the address file."""
        self.resume()
        self.lifecycle.rewind(self.step)
        self.server.start()
        self._cleanup.callback(self.server.stop)  # first to close: no commit after the buffer
        self._write_address()

    def release(self, experiences: list[Experience]) -> None:
        """A committed episode: through the experience operators
        (``data_processor.experience_pipeline``), into the buffer."""
        kept, _ = run_pipeline(self.operators, experiences)
        self.storage.write(kept)

    # ---- start ---------------------------------------------------------------------------

    def resume(self) -> None:
        """Go on from the newest checkpoint (trainer, weights, buffer leases), or load the
        separate trainer's newest one (``checkpoint``)."""
        if self.checkpoints is not None:
            self.checkpoints.load_newest()
            return
        loaded = resume_checkpoint(self.plan)
        step = loaded.step if loaded is not None else 0
        _, returned = self.storage.recover_leases(step)
        if self.recorder is not None:  # the record forgets the steps that are redone
            self.recorder.rewind(step)
        if returned:
            log.warning("experience buffer %r: %d experience(s) read after global_step_%d by a "
                        "run that stopped are read again", self.storage.name, returned, step)
        if loaded is None:
            return
        state = resumed_state(loaded)
        self.trainer.read_checkpoint(loaded.checkpoint.path, loaded.trainer_state)
        restore_held(self.strategy, state)
        assert self.weights is not None
        self.weights.sync(state.step)
        if state.rng is not None:
            set_rng_state(state.rng)
        self.step = self.saved_step = state.step
        print(f"[{self.plan.config.name}] serve resumed from {loaded.checkpoint.path} "
              f"(model version {state.step})", flush=True)

    def _write_address(self) -> None:
        path = os.path.join(self.plan.job_dir, ADDRESS_FILE)
        os.makedirs(self.plan.job_dir, exist_ok=True)
        partial = f"{path}.{os.getpid()}.tmp"
        with open(partial, "w", encoding="utf-8") as handle:
            json.dump({"address": self.server.address, "pid": os.getpid()}, handle)
        os.replace(partial, path)
        key = " (API key required)" if self.server.api_key else ""
        print(f"[{self.plan.config.name}] serving {self.model.name} at "
              f"{self.server.address}/v1{key}; POST /feedback, /commit; "
              f"{'training here' if self.trains else 'weights from train checkpoints'}",
              flush=True)

    # ---- the loop ------------------------------------------------------------------------

    @property
    def training(self) -> bool:
        """Trains in this process, and its trainer has not failed."""
        return self.trains and self.trainer_error is None

    def done(self) -> bool:
        return bool(self.steps) and self.step >= self.steps

    def serve(self, stop: threading.Event) -> None:
        """Serve (and train) until ``stop`` is set, SIGTERM / Ctrl-C, or the step count is
        reached; a checkpoint of what was trained since the last one at the end."""
        try:
            next_check = time.monotonic() + self.check_interval
            while not stop.is_set() and not self.done():
                if self.training and self.batch_ready():
                    self.train_step(self.step + 1)
                    continue
                if self.checkpoints is not None and time.monotonic() >= next_check:
                    self.load_checkpoint()
                    next_check = time.monotonic() + self.check_interval
                stop.wait(POLL_S)
        finally:
            if self.trains and self.step > self.saved_step and self.trainer_error is None:
                self.save(self.step, final=True)

    def batch_ready(self) -> bool:
        """The buffer, with the groups the trainer holds back from earlier reads
        (``synchronizer.streaming_batches``), has a training batch."""
        assembler = assembler_of(self.strategy)
        held = assembler.ready_count + assembler.held_count if assembler is not None else 0
        return self.storage.available() + held >= self.plan.train_batch_size

    def train_step(self, step: int) -> None:
        """One training step on the buffer's oldest batch, then the weights into the engine;
        a failure stops training here (one log line), not serving."""
        assert self.weights is not None
        try:
            self.storage.lease_reads(step)
            experiences, metrics = self.strategy.sample(step, self.engine.model_version)
            metrics.update(self.trainer.train_step(experiences))
            with self.gate.updating():
                metrics.update(self.weights.sync(step))
        except Exception as exc:  # noqa: BLE001 - the endpoint keeps serving
            self.trainer_error = f"{type(exc).__name__}: {exc}".splitlines()[0]
            log.error("serve: the trainer failed at step %d (%s); serving goes on with model "
                      "version %d, committed episodes still go to the buffer", step,
                      self.trainer_error, self.engine.model_version)
            return
        self.step = step
        metrics.update(self.ledger.counters())
        self.lifecycle.log("trainer", metrics, step)
        if self.recorder is not None:
            self.recorder.record(step, experiences, self.trainer.last_advantages)
        if self.lifecycle.save_due(step):
            self.save(step, final=False)

    def load_checkpoint(self) -> None:
        """``checkpoint``: the separate trainer's newest checkpoint into the engine."""
        assert self.checkpoints is not None
        try:
            with self.gate.updating():
                metrics = self.checkpoints.load_newest()
        except Exception as exc:  # noqa: BLE001 - a half-written folder: try next time
            log.warning("serve: could not load the newest checkpoint (%s: %s); trying again "
                        "in %g s", type(exc).__name__, exc, self.check_interval)
            return
        if metrics:
            self.step = self.checkpoints.version
            metrics.update(self.ledger.counters())
            self.lifecycle.log("explorer", metrics, self.step)
            log.info("serve: model version %d loaded", self.step)

    def save(self, step: int, *, final: bool) -> None:
        """Checkpoint ``step`` (the HF export with the final one) with the experiences held
        back in incomplete or untaken groups (``synchronizer.streaming_batches``); the
        reads it covers become final (what is held is in the checkpoint, not lost)."""
        always = self.plan.config.trainer.save_hf_checkpoint == "always"
        save_stage_checkpoint(self.plan, self.trainer, step,
                              RunState(experiences_written=self.storage.written,
                                       experiences_read=self.storage.read_count,
                                       held_experiences=held_state(self.strategy)),
                              export_hf=final or always)
        self.storage.commit_leases(step)
        self.saved_step = step

    def finish(self, result: StageResult) -> None:
        result.steps = self.step
        if self.trains and self.saved_step:
            result.final_model_path = os.path.join(self.plan.job_dir,
                                                   f"global_step_{self.saved_step}", "hf")


def run_serve(stage: Stage, stop: threading.Event | None = None,
              on_ready: Callable[[ServeRun], None] | None = None) -> StageResult:
    """Run one serve stage in this process (see the module docstring) until ``stop`` is
    set (default: never), SIGTERM / Ctrl-C, or its step count; ``on_ready`` gets the run
    once it serves (tests)."""
    quiet_libraries()
    plan = stage.plan
    check_writable(plan.job_dir)
    check_resumable(plan.job_dir, plan.config.continue_from_checkpoint)
    lifecycle = StageLifecycle(stage, ("explorer", "trainer"), has_eval=False)
    try:
        with contextlib.ExitStack() as cleanup:
            run = ServeRun(stage, lifecycle, cleanup)
            lifecycle.start(run.steps)
            run.open()
            if on_ready is not None:
                on_ready(run)
            try:
                run.serve(stop or threading.Event())
            finally:
                run.finish(lifecycle.result)
                log.info("serve: %s", ", ".join(f"{k.split('/')[1]} {v:g}" for k, v
                                                in run.ledger.counters().items()))
    finally:
        result = lifecycle.close()
    return result


def run_serve_mode(stage: Stage, runtime: Distributed) -> StageResult:
    """Mode ``serve``: one process, no cluster (``runtime`` unused)."""
    return run_serve(stage)


__all__ = ["ADDRESS_FILE", "ServeRun", "run_serve", "run_serve_mode"]
