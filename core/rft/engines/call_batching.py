"""Engine calls shared by concurrent callers: sampling overrides, chat results, and the
:class:`CallBatcher` that merges the calls of the workflows (and endpoint requests)
running at once into one engine call.

The runner (:mod:`rft.rollout.runner`) makes one :class:`CallBatcher` per batch of tasks
(its event loop counts the running workflows) and hands each workflow's :class:`~rft.rollout.model_wrapper.ModelWrapper`
a :class:`CallSlot` (the batcher and the task's place in the batch). A call through a slot
waits until every running workflow is either waiting on the model or done, then one engine
call serves all of them (on CPU, one ``generate`` of 4 prompts × 8 rows costs about as much
as one of 1 prompt × 8 rows).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch

from rft.errors import RftError
from rft.experience import Experience
from rft.engines.engine import Completion, InferenceEngine, SamplingArgs
from rft.engines.partial_rollout import run_call
from rft.engines.reply_parsing import AssistantReply

_SAMPLING_FIELDS = {f.name for f in dataclasses.fields(SamplingArgs)}


def sampling_args(defaults: SamplingArgs, overrides: dict[str, Any]) -> SamplingArgs:
    """``defaults`` with ``overrides`` applied; ``None`` values keep the default.

    ``logprobs`` given as a number (the config's count of top log-probs) means "return
    log-probs"; unknown names raise :class:`RftError`.
    """
    values: dict[str, Any] = {}
    for name, value in overrides.items():
        if value is None or name == "n":
            continue
        if name not in _SAMPLING_FIELDS:
            raise RftError(f"unknown sampling argument {name!r}; known: "
                           f"{', '.join(sorted(_SAMPLING_FIELDS))}")
        if name == "logprobs":
            value = True
        values[name] = tuple(value) if name in ("stop", "stop_token_ids") else value
    return dataclasses.replace(defaults, **values)


class ChatResults(NamedTuple):
    """What :meth:`ModelWrapper.chat_completions` returns, one list per conversation."""

    completions: list[list[Completion]]
    experiences: list[list[Experience]]
    replies: list[list[AssistantReply] | None]
    """The parsed replies (``None`` for each conversation when no parser was given)."""


def experience_from_completion(completion: Completion) -> Experience:
    """One experience per completion (see the module docstring for the mask rule)."""
    response_length = len(completion.token_ids)
    mask = torch.full((response_length,), not completion.prompt_truncated, dtype=torch.bool)
    return Experience(
        tokens=torch.tensor(completion.tokens, dtype=torch.long),
        prompt_length=len(completion.prompt_token_ids),
        logprobs=completion.logprobs,
        action_mask=mask,
        model_version=completion.model_version,
        token_versions=_versions(completion),
        response_text=completion.text,
        info={"finish_reason": completion.finish_reason,
              "prompt_truncated": completion.prompt_truncated},
    )


def experiences_from_completions(completions: Sequence[Completion]) -> list[Experience]:
    """:func:`experience_from_completion` for the completions of one engine call, with
    their tensors built at once: one ``tokens`` tensor and one action-mask tensor for all
    of them, split into per-experience views (issue #23: no tensor construction per
    rollout). Equal, tensor for tensor, to calling :func:`experience_from_completion` on
    each."""
    if not completions:
        return []
    sizes = [len(c.prompt_token_ids) + len(c.token_ids) for c in completions]
    flat: list[int] = []
    for c in completions:
        flat += c.prompt_token_ids
        flat += c.token_ids
    tokens = torch.tensor(flat, dtype=torch.long).split(sizes)  # views of (Σ L,)
    responses = [len(c.token_ids) for c in completions]
    masks = torch.ones(sum(responses), dtype=torch.bool)  # (Σ R,)
    if any(c.prompt_truncated for c in completions):  # rare: cleared row by row
        start = 0
        for c, length in zip(completions, responses, strict=True):
            if c.prompt_truncated:
                masks[start: start + length] = False
            start += length
    return [Experience(tokens=t, prompt_length=len(c.prompt_token_ids), logprobs=c.logprobs,
                       action_mask=m, model_version=c.model_version,
                       token_versions=_versions(c), response_text=c.text,
                       info={"finish_reason": c.finish_reason,
                             "prompt_truncated": c.prompt_truncated})
            for c, t, m in zip(completions, tokens, masks.split(responses), strict=True)]


def _versions(completion: Completion) -> torch.Tensor | None:
    """``(R,)`` int64 per-token versions of a resumed partial rollout, else ``None``."""
    if completion.token_versions is None:
        return None
    return torch.tensor(completion.token_versions, dtype=torch.long)


@dataclass
class _Call:
    """One workflow's engine call waiting in a :class:`CallBatcher`."""

    engine: InferenceEngine
    kind: str
    """``"generate"`` (token-id prompts) or ``"chat"`` (conversations)."""
    items: list[Any]
    sampling: SamplingArgs
    n: int
    participant: int
    """The calling workflow's place in the batch (its task's order)."""
    answer: concurrent.futures.Future[list[list[Completion]]] = field(
        default_factory=concurrent.futures.Future)
    """Set from the thread that makes the engine call; the caller blocks on it."""
    order: tuple[int, int] = (0, 0)
    """(participant, arrival number): the position of its prompts in the merged call."""
    created: float = field(default_factory=time.monotonic)

    def joins(self, other: _Call) -> bool:
        return (self.engine is other.engine and self.kind == other.kind
                and self.n == other.n and self.sampling == other.sampling)


def direct_call(engine: InferenceEngine, kind: str, items: list[Any], sampling: SamplingArgs,
                n: int) -> list[list[Completion]]:
    """``engine.chat`` (``kind == "chat"``) or ``engine.generate``: one call, not merged;
    through the engine's partial-rollout gate when it has one
    (:mod:`rft.engines.partial_rollout`: a weight sync may interrupt it, and it is resumed)."""
    gated = run_call(engine, kind, items, sampling, n)
    if gated is not None:
        return gated
    method = engine.chat if kind == "chat" else engine.generate
    return method(items, sampling, n)


class CallBatcher:
    """Merges the engine calls of the workflows of one batch into as few engine calls as
    their arguments allow.

    It is told how many workflows run (``running``: the batch's runners, ``min(runners,
    tasks)``; the runner's event loop calls :meth:`leave` when a runner has no task left),
    so at most ``min(runners, unfinished tasks)``. A call (:meth:`call`, from a workflow's thread or an endpoint
    request's) waits until that many calls are waiting (every running workflow is blocked
    on the model) or until the oldest has waited ``max_wait`` seconds (a workflow busy
    elsewhere; a timer on the loop); then the waiting calls with equal engine, kind, ``n``
    and sampling arguments become one engine call, their prompts ordered by participant
    (task order), so that the merged calls, hence the engine's seeds, do not depend on
    thread timing. The call that completes the batch makes the engine call on its own
    thread; one released by the loop (a runner left, the timer) is made on a thread of the
    runner's executor. Calls with an explicit ``seed`` are not merged; nor are calls made
    on the loop's own thread (an ``async`` workflow calling the model directly: waiting
    there would stop the loop), nor calls after :meth:`close` (an abandoned attempt that
    goes on).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, executor: concurrent.futures.Executor,
                 *, running: int, max_wait: float = 0.5) -> None:
        self._loop = loop
        self._executor = executor
        self._lock = threading.Lock()
        self._running = running
        self._pending: list[_Call] = []
        self._oldest = 0.0
        """When the oldest waiting call was made (``time.monotonic``)."""
        self._arrivals = 0
        self._timer: asyncio.TimerHandle | None = None
        """On the loop: due when the oldest waiting call has waited ``max_wait``."""
        self._closed = False
        self.max_wait = max_wait

    def slot(self, participant: int) -> CallSlot:
        """The seat of the workflow of the batch's ``participant``-th task."""
        return CallSlot(self, participant)

    def leave(self) -> None:
        """A runner has no task left (on the loop): fewer workflows to wait for."""
        with self._lock:
            self._running -= 1
            groups = self._take_ready()
        self._start(groups)

    def close(self) -> None:
        """The batch ended (on the loop): what waits runs now, later calls go straight to
        the engine."""
        with self._lock:
            self._closed = True
            self._running = 0
            groups = self._take_ready()
        self._start(groups)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def call(self, engine: InferenceEngine, kind: str, items: list[Any], sampling: SamplingArgs,
             n: int, participant: int) -> list[list[Completion]]:
        """The completions of ``items``, merged with the other participants' calls when it
        may be (see the class docstring); blocks the calling thread until they are ready."""
        if sampling.seed is not None or self._on_loop_thread():
            return direct_call(engine, kind, items, sampling, n)
        request = _Call(engine, kind, items, sampling, n, participant)
        with self._lock:
            if self._closed:
                groups, first = [[request]], False
            else:
                self._arrivals += 1
                request.order = (participant, self._arrivals)
                first = not self._pending
                self._oldest = request.created if first else min(self._oldest,
                                                                 request.created)
                self._pending.append(request)
                groups = self._take_ready()
        for group in groups:  # this call completed them: the engine call is made here
            run_group(group)
        if first and not groups:
            try:
                self._loop.call_soon_threadsafe(self._arm_timer)
            except RuntimeError:  # the loop is closed: the runner has ended
                with self._lock:
                    groups = self._take_ready(force=True)
                for group in groups:
                    run_group(group)
        return request.answer.result()

    def _on_loop_thread(self) -> bool:
        try:
            return asyncio.get_running_loop() is self._loop
        except RuntimeError:
            return False

    def _take_ready(self, *, force: bool = False) -> list[list[_Call]]:
        """Under the lock: the waiting calls as groups for one engine call each, when they
        may go (see the class docstring), else ``[]``."""
        if not self._pending:
            return []
        waited = time.monotonic() - self._oldest
        if not force and len(self._pending) < self._running and waited < self.max_wait:
            return []
        calls, self._pending = sorted(self._pending, key=lambda c: c.order), []
        groups: list[list[_Call]] = []
        for c in calls:
            group = next((g for g in groups if g[0].joins(c)), None)
            if group is None:
                groups.append([c])
            else:
                group.append(c)
        return groups

    def _arm_timer(self) -> None:
        """(On the loop.) Release the waiting calls once the oldest has waited
        ``max_wait``."""
        if self._timer is not None:
            return
        with self._lock:
            due = self._oldest + self.max_wait - time.monotonic() if self._pending else None
        if due is not None:
            self._timer = self._loop.call_later(max(due, 0.0), self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        with self._lock:
            groups = self._take_ready()
        self._start(groups)
        self._arm_timer()  # calls of a later round may wait

    def _start(self, groups: list[list[_Call]]) -> None:
        """Each group's engine call on a thread of the runner's executor (the engine
        blocks; released by the loop, no caller's thread is at hand)."""
        for group in groups:
            try:
                self._executor.submit(run_group, group)
            except RuntimeError:  # the runner closed meanwhile
                for c in group:
                    c.answer.set_exception(RftError("model call abandoned: the workflow "
                                                    "runner was closed"))


def run_group(group: list[_Call]) -> None:
    """One engine call for the group; if it raises, one call per request, so that a bad
    prompt fails its own workflow only (a fatal error, such as an unreachable server, goes
    to every request at once). Each request's answer is set, whatever happens."""
    first = group[0]
    try:
        results = direct_call(first.engine, first.kind,
                              [item for c in group for item in c.items], first.sampling, first.n)
        start = 0
        for c in group:
            c.answer.set_result(results[start:start + len(c.items)])
            start += len(c.items)
    except Exception as exc:  # noqa: BLE001 - handed to the callers
        for c in group:
            if c.answer.done():
                continue
            if len(group) == 1 or getattr(exc, "fatal", False):
                c.answer.set_exception(exc)  # a fatal error (server down) is every request's
                continue
            try:
                c.answer.set_result(direct_call(c.engine, c.kind, c.items, c.sampling, c.n))
            except Exception as single:  # noqa: BLE001
                c.answer.set_exception(single)
    finally:
        for c in group:
            if not c.answer.done():
                c.answer.set_exception(RftError("model call abandoned: the engine call "
                                                "serving it was interrupted"))


@dataclass(frozen=True)
class CallSlot:
    """A workflow's seat at a :class:`CallBatcher`: what its
    :class:`~rft.rollout.model_wrapper.ModelWrapper` (and its session on the OpenAI
    endpoint) call the engine through."""

    batcher: CallBatcher
    participant: int
    """The workflow's task's place in the batch (the order of its prompts in merged calls)."""

    def call(self, engine: InferenceEngine, kind: str, items: list[Any],
             sampling: SamplingArgs, n: int) -> list[list[Completion]]:
        """:meth:`CallBatcher.call` as this participant."""
        return self.batcher.call(engine, kind, items, sampling, n, self.participant)


def engine_call(engine: InferenceEngine, kind: str, items: list[Any], sampling: SamplingArgs,
                n: int, slot: CallSlot | None = None) -> list[list[Completion]]:
    """``engine.chat`` / ``engine.generate``, through ``slot``'s batcher when there is one."""
    if slot is None:
        return direct_call(engine, kind, items, sampling, n)
    return slot.call(engine, kind, items, sampling, n)
