"""Continuous batching of concurrent calls on one vLLM engine (partial rollouts, #35).

With ``synchronizer.partial_rollout`` the :class:`~rft.engines.vllm_engine.VLLMEngine`
steps vLLM's ``llm_engine`` itself. :class:`SharedStepper` lets several ``generate`` calls
(workflow threads) share those engine steps instead of running one after the other: a
call queues its requests, which join at the next engine step, and waits for its own
requests only. The
thread that steps is whichever waiting call takes the *driver* role first (a hand-over
role, held for one engine step at a time): it adds the queued requests, steps the engine
once, files every output
under its request and wakes the others, which see whether their requests ended. So a call
whose short requests arrive while another call's long requests are decoding gets its
answer after its own tokens, not after the long ones (on a CPU, a step of 16 rows costs
about what one of 4 costs).

An exception from an engine step (vLLM's own failure, e.g. a kernel error) leaves the
engine's state unknown: every call with requests in the engine raises
:class:`~rft.errors.EngineFailedError` naming it, and so does every later call and
:meth:`SharedStepper.exclusive` (no call waits for a step that will not come).

A weight sync's interrupt (``engine.interrupt``) is seen by the driver after its step: it
aborts the unfinished requests of *every* call, drains the abort, and every call returns
what its requests had (``None`` for a request aborted before it was scheduled) with the
numbers of its interrupted requests; :mod:`rft.engines.partial_rollout` resumes them.

What steps the engine in another way (``LLM.generate`` of the scoring calls, sleep and
wake-up) runs inside :meth:`SharedStepper.exclusive`: it waits until no call has requests
in the engine and holds new calls back meanwhile, since ``LLM.generate`` steps until the
engine has no request left and would take other calls' outputs.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from rft.errors import EngineFailedError


@dataclass
class _StepperCall:
    """The requests of one ``generate`` call in the engine."""

    ids: list[str]
    ended: set[str] = field(default_factory=set)
    """Its requests that finished or were aborted."""
    interrupted: set[str] = field(default_factory=set)
    """Its requests aborted by an interrupt."""
    error: BaseException | None = None
    """The engine refused one of its requests (raised by its call)."""

    def done(self) -> bool:
        return len(self.ended) == len(self.ids)


class SharedStepper:
    """Engine steps shared by the concurrent calls of one engine (module docstring).

    :param engine: vLLM's ``LLMEngine`` (``LLM.llm_engine``).
    :param interrupt: set by a weight sync: every unfinished request is aborted.
    :param lock: the engine's lock, held while the engine is stepped or requests are added.
    """

    def __init__(self, engine: Any, interrupt: threading.Event,
                 lock: threading.RLock) -> None:
        self._engine = engine
        self._interrupt = interrupt
        self._lock = lock
        self._cond = threading.Condition()
        self._driving = False
        self._exclusive = False
        self._calls: dict[str, _StepperCall] = {}
        """Each request's call, for the requests in the engine."""
        self._latest: dict[str, Any] = {}
        """The last (cumulative) output of each request in the engine."""
        self._queued: list[tuple[_StepperCall, list[Any], list[Any], Any]] = []
        """Calls whose requests join at the next engine step (requests, params, LoRA)."""
        self._numbers = itertools.count()
        self.steps = 0
        """Engine steps made so far."""
        self.shared_steps = 0
        """Engine steps that served requests of more than one call."""
        self.failed: EngineFailedError | None = None
        """Set when an engine step raised: every call since raises it."""

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        """No call's request in the engine while the body runs (new calls wait); the
        engine's lock is held."""
        with self._cond:
            self._cond.wait_for(lambda: self.failed is not None
                                or (not self._exclusive and not self._calls))
            if self.failed is not None:
                raise self.failed
            self._exclusive = True
        try:
            with self._lock:
                yield
        finally:
            with self._cond:
                self._exclusive = False
                self._cond.notify_all()

    def run(self, requests: Sequence[Any], params: Sequence[Any], lora: Any = None
            ) -> tuple[list[Any | None], set[int]]:
        """Add ``requests`` (with their ``params``, cumulative outputs) and step the engine,
        with the other calls' requests, until each of them ended; their outputs in request
        order (``None``: aborted before it was scheduled) and the positions of the
        requests an interrupt aborted."""
        from vllm.sampling_params import RequestOutputKind

        call = _StepperCall([f"partial-{next(self._numbers)}" for _ in requests])
        for param in params:
            param.output_kind = RequestOutputKind.CUMULATIVE  # each step: every token so far
        with self._cond:
            self._cond.wait_for(lambda: not self._exclusive)
            if self.failed is not None:
                raise self.failed
            for request_id in call.ids:
                self._calls[request_id] = call
            self._queued.append((call, list(requests), list(params), lora))
            self._cond.notify_all()
        try:
            self._until_done(call)
            with self._cond:
                if call.error is not None:
                    raise call.error
                outputs = [self._latest.get(r) for r in call.ids]
                interrupted = {i for i, r in enumerate(call.ids) if r in call.interrupted}
            return outputs, interrupted
        finally:
            with self._cond:
                for request_id in call.ids:
                    self._calls.pop(request_id, None)
                    self._latest.pop(request_id, None)
                self._cond.notify_all()

    def _until_done(self, call: _StepperCall) -> None:
        """Take the driver role whenever it is free, until ``call``'s requests ended."""
        while True:
            with self._cond:
                self._cond.wait_for(lambda: call.done() or not self._driving)
                if call.done():
                    return
                self._driving = True
            try:
                self._step()
            except Exception as exc:  # noqa: BLE001 - the engine's own failure: every call's
                raise self._fail(exc) from exc
            finally:
                with self._cond:
                    self._driving = False
                    self._cond.notify_all()

    def _step(self) -> None:
        """(The driver.) Add the queued requests, one engine step; on an interrupt, abort
        every unfinished request and drain the abort."""
        engine = self._engine
        with self._lock:
            self._add_queued()
            outputs = engine.step() if engine.has_unfinished_requests() else []
            with self._cond:
                self.steps += 1
                if len({id(self._calls.get(o.request_id)) for o in outputs}) > 1:
                    self.shared_steps += 1
                self._file(outputs)
                unfinished = ([r for r, c in self._calls.items() if r not in c.ended]
                              if self._interrupt.is_set() else [])
            if not unfinished:
                return
            engine.abort_request(unfinished)
            while engine.has_unfinished_requests():  # drain the abort
                drained = engine.step()
                with self._cond:
                    for output in drained:
                        if output.request_id in self._calls and output.outputs:
                            self._latest.setdefault(output.request_id, output)
            with self._cond:
                for request_id in unfinished:
                    owner = self._calls[request_id]
                    owner.ended.add(request_id)
                    owner.interrupted.add(request_id)

    def _fail(self, exc: Exception) -> EngineFailedError:
        """(The driver, after an engine step raised ``exc``.) Every call in the engine ends
        with :attr:`failed`, which is returned; their requests are aborted as far as the
        engine still can."""
        first_line = (str(exc).splitlines() or [""])[0]
        error = EngineFailedError(f"vllm engine: an engine step failed ({type(exc).__name__}: "
                                  f"{first_line}); the engine's state is lost and the run "
                                  "stops")
        with self._cond:
            if self.failed is None:
                self.failed = error
            error = self.failed
            for call in self._calls.values():  # queued calls' requests are listed there too
                call.error = error
                call.ended.update(call.ids)
            self._queued = []
            unfinished = list(self._calls)
            self._cond.notify_all()
        try:
            with self._lock:
                self._engine.abort_request(unfinished)
        except Exception:  # noqa: BLE001, S110 - the engine is broken already
            pass
        return error

    def _add_queued(self) -> None:
        """(The driver, under the engine's lock.) The queued calls' requests into the
        engine; a call whose request the engine refuses ends with the error."""
        with self._cond:
            queued, self._queued = self._queued, []
        for call, requests, params, lora in queued:
            added: list[str] = []
            try:
                for request_id, request, param in zip(call.ids, requests, params, strict=True):
                    self._engine.add_request(request_id, request, param, lora_request=lora)
                    added.append(request_id)
            except Exception as exc:  # noqa: BLE001 - the call's own error, raised by it
                if added:
                    self._engine.abort_request(added)
                with self._cond:
                    call.error = exc
                    call.ended.update(call.ids)

    def _file(self, outputs: Sequence[Any]) -> None:
        """(Under the condition.) Each output under its request; finished ones end."""
        for output in outputs:
            owner = self._calls.get(output.request_id)
            if owner is None:
                continue
            self._latest[output.request_id] = output
            if output.finished:
                owner.ended.add(output.request_id)


__all__ = ["SharedStepper"]
