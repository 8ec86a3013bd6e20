"""Engine calls shared by concurrent callers: sampling overrides, chat results, and the
:class:`CallBatcher` that merges the calls of the workflows (and endpoint requests)
running at once into one engine call.

Workflows run in threads by the runner (``concurrent_mode: multi-threading``) share their
engine calls through a :class:`CallBatcher`: a call waits until every running workflow is
either waiting on the model or done, then one engine call serves all of them (on CPU, one
``generate`` of 4 prompts × 8 rows costs about as much as one of 1 prompt × 8 rows).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch

from rft.errors import RftError
from rft.experience import Experience
from rft.engines.engine import Completion, InferenceEngine, SamplingArgs
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
                       action_mask=m, model_version=c.model_version, response_text=c.text,
                       info={"finish_reason": c.finish_reason,
                             "prompt_truncated": c.prompt_truncated})
            for c, t, m in zip(completions, tokens, masks.split(responses), strict=True)]


@dataclass
class _Call:
    """One workflow's engine call waiting in a :class:`CallBatcher`."""

    engine: InferenceEngine
    kind: str
    """``"generate"`` (token-id prompts) or ``"chat"`` (conversations)."""
    items: list[Any]
    sampling: SamplingArgs
    n: int
    order: tuple[int, int]
    """(participant, sequence number): the position of its prompts in the merged call."""
    created: float = field(default_factory=time.monotonic)
    done: bool = False
    result: list[list[Completion]] | None = None
    error: BaseException | None = None

    def joins(self, other: _Call) -> bool:
        return (self.engine is other.engine and self.kind == other.kind
                and self.n == other.n and self.sampling == other.sampling)


class CallBatcher:
    """Merges the engine calls of workflows running concurrently into one call.

    The runner creates one per batch of tasks: ``tasks`` tasks run on at most ``workers``
    threads, so ``min(workers, unfinished tasks)`` workflows can be running. A call waits
    until that many calls are waiting (every running workflow is blocked on the model),
    or until the oldest has waited ``max_wait`` seconds (a workflow busy elsewhere), then
    the waiting calls with equal engine, kind, ``n`` and sampling arguments become one
    engine call, their prompts ordered by participant (task order), so that the merged
    calls, hence the engine's seeds, do not depend on thread timing. Calls with an
    explicit ``seed`` are not merged.
    """

    _local = threading.local()

    def __init__(self, tasks: int, workers: int, *, max_wait: float = 0.5) -> None:
        self._cond = threading.Condition()
        self._unfinished = tasks
        self._workers = max(1, workers)
        self._pending: list[_Call] = []
        self._sequence = 0
        self.max_wait = max_wait

    @classmethod
    def current(cls) -> tuple[CallBatcher, int] | None:
        """The batcher and participant number of the calling thread, if any."""
        return getattr(cls._local, "slot", None)

    @contextmanager
    def participant(self, order: int) -> Iterator[None]:
        """Route the model calls of this thread (one workflow attempt) through the batcher."""
        previous = getattr(self._local, "slot", None)
        self._local.slot = (self, order)
        try:
            yield
        finally:
            self._local.slot = previous

    def task_done(self) -> None:
        """One task finished (after its retries): fewer workflows to wait for."""
        with self._cond:
            self._unfinished -= 1
            self._cond.notify_all()
        self._flush_if_ready()

    def call(self, engine: InferenceEngine, kind: str, items: list[Any], sampling: SamplingArgs,
             n: int, participant: int) -> list[list[Completion]]:
        with self._cond:
            self._sequence += 1
            request = _Call(engine, kind, items, sampling, n, (participant, self._sequence))
            self._pending.append(request)
            # no notify: only this caller's arrival changed readiness, and it flushes
            # next (waking every waiter on every arrival cost O(workers²) thread switches)
        while True:
            self._flush_if_ready()
            with self._cond:
                if request.done:
                    break
                self._cond.wait(timeout=self.max_wait / 4)
        if request.error is not None:
            raise request.error
        assert request.result is not None
        return request.result

    def _flush_if_ready(self) -> None:
        with self._cond:
            if not self._pending:
                return
            running = min(self._workers, max(self._unfinished, 0))
            waited = time.monotonic() - min(c.created for c in self._pending)
            if len(self._pending) < running and waited < self.max_wait:
                return
            calls, self._pending = sorted(self._pending, key=lambda c: c.order), []
        groups: list[list[_Call]] = []
        for c in calls:
            group = next((g for g in groups if g[0].joins(c)), None)
            if group is None:
                groups.append([c])
            else:
                group.append(c)
        for group in groups:
            self._run(group)

    def _run(self, group: list[_Call]) -> None:
        """One engine call for the group; if it raises, one call per request, so that a
        bad prompt fails its own workflow only (a fatal error, such as an unreachable
        server, goes to every request at once)."""
        first = group[0]
        method = first.engine.chat if first.kind == "chat" else first.engine.generate
        try:
            results = method([item for c in group for item in c.items], first.sampling, first.n)
            start = 0
            for c in group:
                c.result = results[start:start + len(c.items)]
                start += len(c.items)
        except Exception as exc:  # noqa: BLE001 - handed to the callers
            for c in group:
                if len(group) == 1 or getattr(exc, "fatal", False):
                    c.error = exc  # a fatal error (server down) is every request's
                    continue
                try:
                    c.result = method(c.items, c.sampling, c.n)
                except Exception as single:  # noqa: BLE001
                    c.error = single
        finally:
            with self._cond:
                for c in group:
                    if c.result is None and c.error is None:
                        c.error = RftError("model call abandoned: the engine call serving it "
                                           "was interrupted")
                    c.done = True
                self._cond.notify_all()


def engine_call(engine: InferenceEngine, kind: str, items: list[Any], sampling: SamplingArgs,
                n: int) -> list[list[Completion]]:
    """``engine.chat`` / ``engine.generate``, through the thread's batcher when it has one."""
    slot = CallBatcher.current()
    if slot is None or sampling.seed is not None:
        method = engine.chat if kind == "chat" else engine.generate
        return method(items, sampling, n)
    batcher, participant = slot
    return batcher.call(engine, kind, items, sampling, n, participant)
