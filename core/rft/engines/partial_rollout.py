"""Partial rollouts: a weight sync that does not wait for the requests in flight.

With ``synchronizer.partial_rollout`` the rollout engine's calls go through a
:class:`PartialRollouts` gate (:func:`enable_partial_rollouts`; every rollout call passes
:func:`rft.engines.call_batching.direct_call`, which hands it to :meth:`PartialRollouts.call`).
A weight sync (:meth:`PartialRollouts.sync`):

1. sets the engine's :attr:`~rft.engines.engine.InferenceEngine.interrupt`: an
   :attr:`~rft.engines.engine.InferenceEngine.interruptible` engine stops its rows at the
   next decode step (``hf``: the decode loop; ``vllm``: the unfinished requests are
   aborted) and returns them with ``Completion.interrupted`` and the tokens and log-probs
   produced so far; new calls wait at the gate;
2. waits (at most ``synchronizer.sync_timeout``) until no engine call is in flight, then
   loads the weights (the new version);
3. opens the gate: each interrupted completion is continued with the new weights from
   prompt + the tokens already produced, with what is left of its token budget
   (``max_tokens − k``, ``min_tokens − k``), and the parts are joined — token ids and
   log-probs concatenated, ``token_versions`` recording the version of every token.

So a sample's log-probs are, part by part, those of the weights that produced each part
(what the trainer's off-policy correction needs), and ``model_version`` of a joined
completion is the version of its first token (the oldest). A stop string that straddles
the interruption is not seen (each part checks its own text); an engine that is not
interruptible (``external``, ``hf`` with a repetition penalty) finishes its calls before
the sync loads the weights, as without partial rollouts.
"""

from __future__ import annotations

import dataclasses
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch

from rft.engines.engine import Completion, InferenceEngine, SamplingArgs
from rft.errors import RftError

_GATES: weakref.WeakKeyDictionary[InferenceEngine, PartialRollouts] = weakref.WeakKeyDictionary()
"""The gate of each engine with partial rollouts."""


class PartialRollouts:
    """The weight-sync gate of one engine (see the module docstring).

    :param engine: the rollout engine.
    :param sync_timeout: seconds a sync waits for the calls in flight to stop, and a call
        waits for a sync to end (``synchronizer.sync_timeout``).
    """

    def __init__(self, engine: InferenceEngine, *, sync_timeout: float) -> None:
        self.engine = engine
        self.sync_timeout = sync_timeout
        self._cond = threading.Condition()
        self._in_flight = 0
        self._syncing = False
        self._sync_lock = threading.Lock()
        self.interrupted_rows = 0
        """Completions interrupted by a sync so far (each interruption counted)."""
        self.resumed_tokens = 0
        """Tokens produced after a resumption so far."""

    # ---- the calls -----------------------------------------------------------------------

    @contextmanager
    def _engine_call(self) -> Iterator[None]:
        """One engine call in flight: waits while a sync loads weights."""
        with self._cond:
            if not self._cond.wait_for(lambda: not self._syncing, self.sync_timeout):
                raise RftError(f"partial rollouts: an engine call waited more than "
                               f"{self.sync_timeout:g} s for a weight sync to end "
                               "(synchronizer.sync_timeout)")
            self._in_flight += 1
        try:
            yield
        finally:
            with self._cond:
                self._in_flight -= 1
                self._cond.notify_all()

    def call(self, kind: str, items: list[Any], sampling: SamplingArgs,
             n: int) -> list[list[Completion]]:
        """``engine.chat`` (``kind == "chat"``) or ``engine.generate``, every completion a
        sync interrupted continued with the new weights until it ends."""
        method = self.engine.chat if kind == "chat" else self.engine.generate
        with self._engine_call():
            groups = method(items, sampling, n)
        while True:
            cut = [(g, i) for g, group in enumerate(groups) for i, c in enumerate(group)
                   if c.interrupted]
            if not cut:
                return groups
            with self._cond:
                self.interrupted_rows += len(cut)
            for (g, i), joined in zip(cut, self._resume([groups[g][i] for g, i in cut],
                                                        sampling), strict=True):
                groups[g][i] = joined

    def _resume(self, cut: list[Completion], sampling: SamplingArgs) -> list[Completion]:
        """Continue interrupted completions (one engine call per distinct remaining
        budget) and join each to its continuation."""
        by_budget: dict[tuple[int | None, int, int], list[int]] = {}
        for index, completion in enumerate(cut):
            rest = self._rest(completion, sampling)
            key = (rest.max_tokens, rest.min_tokens, rest.resumed_tokens)
            by_budget.setdefault(key, []).append(index)
        joined: list[Completion | None] = [None] * len(cut)
        for (max_tokens, min_tokens, resumed), indices in by_budget.items():
            rest = dataclasses.replace(sampling, max_tokens=max_tokens, min_tokens=min_tokens,
                                       resumed_tokens=resumed)
            prompts = [cut[i].prompt_token_ids + cut[i].token_ids for i in indices]
            with self._engine_call():
                continued = self.engine.generate(prompts, rest, 1)
            for i, prompt, (after,) in zip(indices, prompts, continued, strict=True):
                if after.prompt_token_ids != prompt:  # cannot be: the budget was left room
                    raise RftError(
                        f"partial rollouts: the engine truncated a resumed prompt of "
                        f"{len(prompt)} tokens to {len(after.prompt_token_ids)}")
                joined[i] = self._join(cut[i], after, sampling)
        with self._cond:
            self.resumed_tokens += sum(len(c.token_ids) for c in joined if c is not None) \
                - sum(len(c.token_ids) for c in cut)
        return [c for c in joined if c is not None]

    def _rest(self, completion: Completion, sampling: SamplingArgs) -> SamplingArgs:
        """The sampling arguments of a continuation: the token budget (and minimum) less
        the ``k`` tokens already produced, which do not count toward the prompt limit."""
        (original,) = self.engine.prepare_prompts([completion.prompt_token_ids], sampling)
        done = len(completion.token_ids)
        return dataclasses.replace(sampling, max_tokens=max(1, original.max_new_tokens - done),
                                   min_tokens=max(0, sampling.min_tokens - done),
                                   resumed_tokens=done)

    def _join(self, before: Completion, after: Completion, sampling: SamplingArgs) -> Completion:
        """One completion of an interrupted part and its continuation (see the module
        docstring)."""
        logprobs = None
        if before.logprobs is not None and after.logprobs is not None:
            logprobs = torch.cat([before.logprobs, after.logprobs])  # (k + m,)
        token_ids = before.token_ids + after.token_ids
        if isinstance(after.stop_reason, str):  # cut at a stop string: its own text
            text = self._decode(before.token_ids, sampling) + after.text
        else:
            text = self._decode(token_ids, sampling)
        return Completion(
            prompt_token_ids=before.prompt_token_ids, token_ids=token_ids, logprobs=logprobs,
            text=text, finish_reason=after.finish_reason,
            prompt_truncated=before.prompt_truncated, model_version=before.model_version,
            stop_reason=after.stop_reason, interrupted=after.interrupted,
            token_versions=versions_of(before) + versions_of(after))

    def _decode(self, token_ids: list[int], sampling: SamplingArgs) -> str:
        return str(self.engine.tokenizer.decode(
            token_ids, skip_special_tokens=sampling.skip_special_tokens))

    # ---- the sync ------------------------------------------------------------------------

    def sync(self, load: Callable[[], None], version: int) -> float:
        """Interrupt the calls in flight, run ``load`` (which loads weights ``version``)
        once none is left, then let the calls go on; returns the seconds the calls were
        held. One line (:class:`RftError`) when the calls do not stop within
        ``sync_timeout`` (nothing is loaded and the calls go on with the old weights) or
        when ``load`` fails (the gate is reopened either way: no call waits on a dead
        sync)."""
        with self._sync_lock:  # one sync at a time
            started = time.monotonic()
            with self._cond:
                self._syncing = True
                self.engine.interrupt.set()
                stopped = self._cond.wait_for(lambda: self._in_flight == 0, self.sync_timeout)
                if not stopped:
                    in_flight = self._in_flight
                    self._reopen()
                    raise RftError(
                        f"synchronizer: weight sync to version {version} timed out after "
                        f"{self.sync_timeout:g} s: {in_flight} engine call(s) of "
                        f"{type(self.engine).__name__} did not stop (synchronizer.sync_timeout)")
            try:
                load()
            except RftError:
                raise
            except Exception as exc:  # an engine that died while loading
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                raise RftError(f"synchronizer: loading weights version {version} into "
                               f"{type(self.engine).__name__} failed: "
                               f"{type(exc).__name__}: {first}") from exc
            finally:
                with self._cond:
                    self._reopen()
            return time.monotonic() - started

    def _reopen(self) -> None:
        """Under ``self._cond``: the sync is over, the waiting calls go on."""
        self._syncing = False
        self.engine.interrupt.clear()
        self._cond.notify_all()

    def metrics(self) -> dict[str, float]:
        """``rollout/partial/interrupted`` and ``rollout/partial/resumed_tokens`` so far."""
        with self._cond:
            return {"rollout/partial/interrupted": float(self.interrupted_rows),
                    "rollout/partial/resumed_tokens": float(self.resumed_tokens)}


def versions_of(completion: Completion) -> list[int]:
    """The version of each of ``completion.token_ids``."""
    if completion.token_versions is not None:
        return list(completion.token_versions)
    return [completion.model_version] * len(completion.token_ids)


def enable_partial_rollouts(engine: InferenceEngine, *, sync_timeout: float) -> PartialRollouts:
    """Route ``engine``'s rollout calls through a new :class:`PartialRollouts` gate."""
    gate = PartialRollouts(engine, sync_timeout=sync_timeout)
    engine.partial_rollouts = True
    _GATES[engine] = gate
    return gate


def gate_of(engine: InferenceEngine) -> PartialRollouts | None:
    """The partial-rollout gate of ``engine`` (``None``: its calls are not interrupted)."""
    return _GATES.get(engine)


def run_call(engine: InferenceEngine, kind: str, items: Sequence[Any], sampling: SamplingArgs,
             n: int) -> list[list[Completion]] | None:
    """The call through ``engine``'s gate, or ``None`` when it has none."""
    gate = _GATES.get(engine)
    return None if gate is None else gate.call(kind, list(items), sampling, n)


__all__ = ["PartialRollouts", "enable_partial_rollouts", "gate_of", "run_call", "versions_of"]
