"""``storage_type: queue`` between an ``explore`` process and a ``train`` process: the
queue is a named, detached Ray actor on a Ray cluster both processes join.

Each side joins the cluster (``RAY_ADDRESS`` or ``cluster.ray_address``; never a private
one: it would end with the process that started it, queue included) and reaches the actor
named ``experience_buffer.name`` in the run's Ray namespace (``ray_namespace``, by default
``<project>/<name>``), creating it when it is not there. The actor is the experience
buffer actor of mode ``both`` (:class:`~rft.distributed.buffer_actor.BufferService`)
holding a :class:`~rft.buffer.leased_queue.LeasedQueueStorage`, so that the queue keeps
the guarantees of the ``sql`` buffer across crashes of either process:

- **FIFO, leased reads.** The trainer reads step ``s`` as leases of ``s``; they become
  final when the checkpoint covering ``s`` is saved. A trainer killed after reading
  resumes from its newest checkpoint ``N`` and gets the reads of steps after ``N`` back,
  in the same order; a read still waiting in the actor for the killed trainer is cut off
  (reader sessions), so it takes nothing.
- **Idempotent writes.** The explorer writes step ``s`` under the key ``explore step
  <s> of <job dir>`` (:func:`~rft.buffer.storage.explore_step_key`): an explorer killed after writing a step, before recording it, redoes the step and
  the queue keeps the first write.
- **Both sides agree after a crash** as over SQLite: the explorer's position is its
  ``explorer_state.json``, the trainer's its checkpoint, and the queue outlives both.
- **Cleanup.** Each side tells the actor when its stage has finished; the side that
  finishes last stops it. A side that fails or is killed leaves it to its restart.
- **A queue that is gone** (the cluster was stopped or restarted, the actor killed) is one
  line: at start-up, a side with progress (an explorer that wrote, a trainer resuming from
  a checkpoint) that finds a new, empty queue stops, naming it; during the run, a call to a
  dead actor stops the run, naming it. What the queue held is lost — ``sql`` is the buffer
  that survives the cluster.
"""

from __future__ import annotations

import logging
import sys
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from rft.buffer.factory import BufferOpener
from rft.buffer.leased_queue import LeasedQueueStorage, QueueTotals
from rft.buffer.storage import ExperienceStorage
from rft.config import Stage
from rft.config.plan import RunPlan
from rft.config.schema import ExperienceBufferConfig, RftConfig
from rft.distributed.buffer_actor import BUFFER_CONCURRENCY, BufferService
from rft.distributed.cluster import ray_cluster
from rft.distributed.ray_join import configured_address, join_address
from rft.distributed.timeline import timeline_file
from rft.errors import RftError, ray_error_line
from rft.experience import Experience
from rft.modes.explore import read_progress
from rft.modes.stage import StageResult
from rft.modes.train import trainer_total_steps

log = logging.getLogger("rft.distributed.shared_queue")

SIDES = ("explorer", "trainer")
"""The two processes that share the queue."""

CALL_TIMEOUT_S = 120.0
"""How long a call other than a read waits for the queue actor (a read: its own timeout
plus this)."""


def shares_queue(config: RftConfig, train_only: bool = False) -> bool:
    """Whether this stage's side talks to the shared queue actor: mode ``explore``, or
    ``train`` with an algorithm that reads an explorer's experiences, over a ``queue``."""
    storage = config.buffer.trainer_input.experience_buffer
    return (storage is not None and storage.storage_type == "queue"
            and (config.mode == "explore" or (config.mode == "train" and not train_only)))


class SharedQueueService(BufferService):
    """The shared queue actor: :class:`BufferService` over a
    :class:`~rft.buffer.leased_queue.LeasedQueueStorage`, with reader sessions and the
    record of which side has finished."""

    def __init__(self, config: ExperienceBufferConfig) -> None:
        # not BufferService's __init__: the storage is the leased queue, whatever the config
        self.storage: LeasedQueueStorage = LeasedQueueStorage(config.name, config.path)
        self.finished: set[str] = set()

    def read_session(self, count: int, timeout: float, lease: int | None,
                     reader: str) -> list[Experience]:
        return self.storage.read_leased(count, timeout, lease, reader)

    def recover_session(self, step: int, reader: str) -> tuple[int, int]:
        return self.storage.recover_leases(step, reader)

    def totals(self) -> QueueTotals:
        return self.storage.totals()

    def side_finished(self, side: str) -> bool:
        """Record that ``side``'s stage has finished; whether both sides have."""
        self.finished.add(side)
        return self.finished >= set(SIDES)


class SharedQueue:
    """One side's handle on the shared queue actor of a stage (created on first use)."""

    def __init__(self, plan: RunPlan, side: str) -> None:
        self.config: ExperienceBufferConfig = plan.experience_buffer
        self.name = self.config.name
        self.namespace = plan.config.ray_namespace
        self.side = side
        self._actor: Any = None

    def where(self) -> str:
        """``queue actor 'exp' (Ray namespace 'p/n')``, for messages."""
        return f"queue actor {self.name!r} (Ray namespace {self.namespace!r})"

    def actor(self, create: bool = True) -> Any:
        """The actor, created when it is not there (``create``); ``None`` when it is not
        there and ``create`` is false."""
        import ray

        if self._actor is None:
            if not create:
                try:
                    self._actor = ray.get_actor(self.name, namespace=self.namespace)
                except ValueError:
                    return None
                return self._actor
            remote = ray.remote(SharedQueueService).options(
                name=self.name, namespace=self.namespace, lifetime="detached",
                get_if_exists=True, num_cpus=0, max_concurrency=BUFFER_CONCURRENCY)
            self._actor = remote.remote(self.config)
        return self._actor

    def call(self, what: str, submit: Callable[[Any], Any], timeout: float = CALL_TIMEOUT_S,
             create: bool = True) -> Any:
        """The result of the call ``submit`` makes on the actor (``what``: its name in
        messages), with Ray's failures as one line naming the queue; an
        :class:`~rft.errors.RftError` the actor raised (a read's timeout) as it is."""
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

        try:
            return ray.get(submit(self.actor(create)), timeout=timeout)
        except GetTimeoutError:
            raise RftError(f"experience buffer {self.name!r}: the {self.where()} did not "
                           f"answer within {timeout:g} s (is the Ray cluster alive?)") from None
        except RayTaskError as exc:
            cause = exc.cause if exc.cause is not None else exc
            if isinstance(cause, RftError):
                raise cause from None
            raise RftError(f"experience buffer {self.name!r}: {self.where()}, {what}: "
                           f"{ray_error_line(cause)}") from None
        except RayActorError as exc:
            raise RftError(f"experience buffer {self.name!r}: the {self.where()} died: "
                           f"{ray_error_line(exc).rstrip('.')}; the experiences it held are "
                           "lost (a queue lives in memory; storage_type 'sql' survives)") from None

    def totals(self) -> QueueTotals:
        """What the queue holds and has handed out."""
        totals: QueueTotals = self.call("totals", lambda actor: actor.totals.remote())
        return totals

    def check_kept(self, what: str, kept: Callable[[QueueTotals], bool]) -> None:
        """A side with progress (``what`` it did with the queue) needs the queue it used:
        the actor must be there (it is not created again) and ``kept`` its totals.

        :raises RftError: it is gone (one line: the queue, what was lost, what to do).
        """
        if self.actor(create=False) is None or not kept(self.totals()):
            raise RftError(
                f"experience buffer {self.name!r}: {what} the {self.where()}, but that queue "
                "is gone, with what it held (its Ray cluster stopped or restarted, or the "
                "actor was killed); start the run afresh under another name, or use "
                "storage_type 'sql', which survives the cluster")

    def open(self, plan: RunPlan) -> ExperienceStorage:
        """The stage body's experience buffer (a :data:`BufferOpener`)."""
        if self.side == "trainer":
            return SharedQueueReader(self, trainer_total_steps(plan.config))
        progress = (read_progress(plan.job_dir)
                    if plan.config.continue_from_checkpoint else None)
        return SharedQueueWriter(self, progress.experiences_written if progress else 0)

    def finish(self) -> None:
        """This side's stage has finished: record it; the side finishing last stops the
        actor."""
        import ray

        if self.actor(create=False) is None:  # stopped already (a finished stage rerun)
            return
        if self.call("finish", lambda actor: actor.side_finished.remote(self.side),
                     create=False):
            self.call("close", lambda actor: actor.close.remote(), create=False)
            ray.kill(self._actor)
            log.info("both sides have finished: %s stopped", self.where())


class SharedQueueStorage(ExperienceStorage):
    """An :class:`~rft.buffer.storage.ExperienceStorage` forwarding to the shared queue
    (as :class:`~rft.distributed.buffer_actor.RemoteStorage` does to mode ``both``'s
    buffer actor); closing it leaves the actor running (it outlives this process)."""

    def __init__(self, queue: SharedQueue) -> None:
        super().__init__(queue.name)
        self.queue = queue

    def available(self) -> int:
        return self.queue.totals().available

    def writers_idle(self) -> None:
        """Nothing: the explorer is another process."""

    def close(self) -> None:
        """Nothing: the queue outlives this process (:meth:`SharedQueue.finish`)."""

    def _append(self, experiences: list[Experience]) -> None:  # pragma: no cover
        raise AssertionError("the shared queue's storage forwards write()")

    def _available(self) -> int:  # pragma: no cover
        raise AssertionError("the shared queue's storage forwards available()")

    def _take(self, count: int) -> list[Experience]:  # pragma: no cover
        raise AssertionError("the shared queue's storage forwards read()")


class SharedQueueWriter(SharedQueueStorage):
    """The explorer's side: writes, keyed. ``written_before``: what the explorer recorded
    as written before this process (its ``explorer_state.json``)."""

    def __init__(self, queue: SharedQueue, written_before: int) -> None:
        super().__init__(queue)
        self.written_before = written_before
        self._checked = False

    def write(self, experiences: Sequence[Experience], key: str | None = None) -> None:
        if not self._checked and self.written_before > 0:
            self.queue.check_kept(f"this explorer wrote {self.written_before} experiences to",
                                  lambda totals: totals.appended >= self.written_before)
        self._checked = True
        with self._lock:
            key = key if key is not None else self._next_key()
        self.queue.call("write", lambda actor: actor.write.remote(list(experiences), key))
        with self._lock:
            self.written += len(experiences)

    def _read(self, count: int, timeout: float) -> list[Experience]:  # pragma: no cover
        raise RftError(f"experience buffer {self.name!r}: the explorer does not read it")


class SharedQueueReader(SharedQueueStorage):
    """The trainer's side: leased reads in a reader session of its own. ``steps``: the
    stage's train steps (a finished stage run again does not recreate a stopped queue)."""

    def __init__(self, queue: SharedQueue, steps: int) -> None:
        super().__init__(queue)
        self.steps = steps
        self.reader = uuid.uuid4().hex

    def recover_leases(self, step: int) -> tuple[int, int]:
        """Settle the leases with the checkpoint of ``step`` and open this trainer's reader
        session; a trainer resuming from a checkpoint must find the queue it read from."""
        if step >= self.steps and self.queue.actor(create=False) is None:
            return 0, 0  # a finished stage run again: its queue was stopped
        if step > 0:  # reads of steps <= step were final once global_step_<step> was saved
            self.queue.check_kept(f"this trainer resumes from global_step_{step}, trained on "
                                  "what it read from",
                                  lambda totals: totals.final + totals.leased > 0)
        made_final, returned = self.queue.call(
            "resume", lambda actor: actor.recover_session.remote(step, self.reader))
        return made_final, returned

    def _read(self, count: int, timeout: float) -> list[Experience]:
        lease = self._lease
        taken = self.queue.call(
            "read", lambda actor: actor.read_session.remote(count, timeout, lease, self.reader),
            timeout=timeout + CALL_TIMEOUT_S)
        with self._lock:
            self.read_count += len(taken)
        return taken

    def commit_leases(self, step: int) -> int:
        return int(self.queue.call("commit", lambda actor: actor.commit_leases.remote(step)))

    def write(self, experiences: Sequence[Experience], key: str | None = None) -> None:
        raise RftError(f"experience buffer {self.name!r}: the trainer does not write it")


def join_shared_cluster(config: RftConfig) -> None:
    """Fail in one line when there is no Ray cluster to join: a private one would end with
    this process, and the queue with it."""
    address, key = configured_address(config.cluster.ray_address)
    if address == "local" or (address == "auto" and join_address(address, key) is None):
        raise RftError(
            f"{key}: {address}: storage_type 'queue' in mode {config.mode!r} lives in a Ray "
            "actor that the explore and train processes share, on a Ray cluster that "
            "outlives both: start one (ray start --head) and give its address, or leave "
            "auto to join the one on this machine")


def run_sharing_queue(stage: Stage, side: str,
                      run: Callable[[BufferOpener], StageResult]) -> StageResult:
    """Run ``side``'s stage (``run``, given the opener of its buffer) on the shared queue
    (see the module docstring)."""
    join_shared_cluster(stage.config)
    with ray_cluster(stage.config, timeline_file(stage.plan)):
        queue = SharedQueue(stage.plan, side)
        print(f"rft: experience buffer {queue.name!r} is the {queue.where()}",
              file=sys.stderr, flush=True)
        result = run(queue.open)
        queue.finish()
    return result
