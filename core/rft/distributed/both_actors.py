"""The Ray actors of mode ``both`` (:class:`~rft.modes.runtime.BothActors` on Ray).

Mode ``both``'s coordinator (:mod:`rft.modes.both`) starts the buffer, explorer and trainer
actors through :class:`RayBothActors` and calls them without waiting; every failure of a
call comes back as one line naming the actor — the one that died (found by its id), the
one whose ``__init__`` refused to start (its own :class:`~rft.errors.RftError` line), or
the one whose method raised.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any, cast

from rft.config import Stage
from rft.distributed.buffer_actor import BUFFER_CONCURRENCY, BufferService
from rft.distributed.placement import actor_gpus, detect_from_ray
from rft.distributed.workers import ExplorerService, TrainerService
from rft.errors import RftError, ray_error_line
from rft.modes.runtime import BROADCAST_GROUP, Call, Ref, Role

log = logging.getLogger("rft.distributed")


class RayBothActors:
    """The actors of one ``both`` stage on the connected Ray cluster.

    :param stage: the validated stage (its plan travels to every actor).
    """

    def __init__(self, stage: Stage) -> None:
        self.plan = stage.plan
        self.config = stage.config
        self.actors: dict[Role, Any] = {}
        """Started actors not known to have died, by role."""

    # ---- start-up ----------------------------------------------------------------------

    def start_buffer(self) -> None:
        # cluster.gpu_per_node unset: from the cluster's resources, a new config and plan
        self.config = detect_from_ray(self.config)
        if self.config is not self.plan.config:
            self.plan = replace(self.plan, config=self.config)
        self._start("buffer", self.plan.experience_buffer.name, BufferService,
                    self.plan.experience_buffer, self.plan.priority_fn,
                    max_concurrency=BUFFER_CONCURRENCY)

    def start_explorer(self) -> None:
        # explorer.env_vars travel in the plan, set by the actor itself (rft.distributed.
        # actor_env): Ray's runtime_env would write their values to a world-readable log
        extra: dict[str, Any] = {}
        if self.config.synchronizer.partial_rollout:  # syncs land beside explore steps
            extra["concurrency_groups"] = {BROADCAST_GROUP: 1}
        self._start("explorer", self.config.explorer.name, ExplorerService, self.plan,
                    self.actors["buffer"], num_gpus=actor_gpus(self.config).explorer, **extra)

    def start_trainer(self, steps: int, *, broadcasting: bool) -> None:
        extra: dict[str, Any] = {}
        if broadcasting:  # broadcasts run beside train steps, in a thread of their own
            extra["concurrency_groups"] = {BROADCAST_GROUP: 1}
        self._start("trainer", self.config.trainer.name, TrainerService, self.plan,
                    self.actors["buffer"], steps, num_gpus=actor_gpus(self.config).trainer,
                    **extra)

    def _start(self, role: Role, name: str, cls: type, *args: Any, **options: Any) -> None:
        import ray

        groups = options.pop("concurrency_groups", None)  # a class option, not a call option
        # concurrency_groups: a documented class option that Ray's overloads of remote() omit
        class_options: dict[str, Any] = {"concurrency_groups": groups}
        remote_cls: Any = ray.remote(**class_options)(cls) if groups else ray.remote(cls)
        try:
            actor = remote_cls.options(name=name, num_cpus=0, **options).remote(*args)
        except ValueError as exc:  # a live actor of that name in this namespace
            raise RftError(f"{role} actor {name!r}: {str(exc).splitlines()[0]} (another run "
                           f"in Ray namespace {self.config.ray_namespace!r}?)") from exc
        self.actors[role] = actor

    # ---- calls -------------------------------------------------------------------------

    def call(self, role: Role, method: str, *args: Any, broadcast: bool = False) -> Ref:
        bound = getattr(self.actors[role], method)
        if broadcast:
            bound = bound.options(concurrency_group=BROADCAST_GROUP)
        ref: Ref = bound.remote(*args)
        return ref

    def ready(self, refs: list[Ref], timeout: float) -> list[Ref]:
        import ray

        done, _ = ray.wait(refs, num_returns=1, timeout=timeout)
        return list(done)

    def settle(self, ref: Ref) -> None:
        import ray

        ray.wait([ref])

    def alive(self, role: Role) -> bool:
        return role in self.actors

    def get(self, ref: Ref, call: Call, timeout: float | None = None) -> Any:
        """``ray.get`` with Ray's failures turned into one-line errors naming the actor."""
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

        try:
            return ray.get(cast(Any, ref), timeout=timeout)  # an ObjectRef (Ref is opaque)
        except GetTimeoutError:
            raise RftError(f"{call.role} {self._name(call.role)!r}: {call.what} "
                           f"{call.step} did not finish within {timeout:g} s") from None
        except RayTaskError as exc:  # before RayActorError: a task that failed because an
            # actor it called died raises an error of both classes (Ray's error class takes
            # its cause's); the caller is alive, the actor it called is not
            cause = exc.cause if exc.cause is not None else exc
            name = self._name(call.role)
            if isinstance(cause, RayActorError):
                raise self._died(cause, call, seen_by=f"{call.role} {name!r}") from None
            raise RftError(f"{call.role} {name!r}, {call.what} {call.step}: "
                           f"{ray_error_line(cause)}") from None
        except RayActorError as exc:
            raise self._died(exc, call) from None

    def _died(self, exc: Exception, call: Call, seen_by: str | None = None) -> RftError:
        """The one-line error of a dead actor, naming the actor that died: the one
        ``exc`` says (by its id), else the one called."""
        refused = _refusal(exc)
        if refused is not None:  # the actor refused to start: its own line names it
            if seen_by is None:
                self.actors.pop(call.role, None)
            return RftError(refused)
        dead_id = getattr(exc, "actor_id", None)
        role = next((r for r, actor in self.actors.items()
                     if dead_id and _actor_id(actor) == dead_id), None)
        if role is None and seen_by is not None:  # an actor of its own (an engine replica)
            return RftError(f"{seen_by}, {call.what} {call.step}: a Ray actor it called "
                            f"died: {ray_error_line(exc)}")
        role = role or call.role
        self.actors.pop(role, None)
        where = (f"(found by {seen_by}, {call.what} {call.step})" if seen_by is not None
                 and role != call.role else f"during {call.what} {call.step}")
        return RftError(f"{role} actor {self._name(role)!r} died {where}: "
                        f"{ray_error_line(exc)}")

    def _name(self, role: Role) -> str:
        c = self.config
        names: dict[Role, str] = {"explorer": c.explorer.name, "trainer": c.trainer.name,
                                  "buffer": self.plan.experience_buffer.name}
        return names[role]

    # ---- clean-up ----------------------------------------------------------------------

    def close(self) -> None:
        import ray

        closing = [actor.close.remote() for actor in self.actors.values()]
        try:
            ray.wait(closing, num_returns=len(closing), timeout=60)
        except Exception:  # noqa: BLE001 (dead actors: nothing left to close)
            pass
        for actor in self.actors.values():
            ray.kill(actor)
        self.actors.clear()


def _actor_id(actor: Any) -> str | None:
    """The hex id of an actor handle (what Ray's actor errors carry)."""
    actor_id = getattr(actor, "_actor_id", None)
    return actor_id.hex() if actor_id is not None else None


def _refusal(exc: BaseException) -> str | None:
    """The message of an :class:`RftError` an actor's ``__init__`` raised (Ray keeps only
    its traceback's text, whose last line is ``rft.errors.<class>: <message>``); ``None``
    when the actor died otherwise."""
    if not getattr(exc, "actor_init_failed", False):
        return None
    lines = str(exc).strip().splitlines()
    last = lines[-1] if lines else ""
    kind, _, message = last.partition(": ")
    return message if kind.startswith("rft.errors.") and message else None


__all__ = ["RayBothActors"]
