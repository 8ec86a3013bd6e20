"""Call history of a model wrapper: every call as an experience, and multi-turn merging.

With ``enable_history`` a :class:`~rft.rollout.model_wrapper.ModelWrapper` records each
sampled response (from ``generate`` / ``chat`` or from the OpenAI-compatible endpoint) as
an :class:`~rft.experience.Experience`; ``extract_experience_from_history()`` drains them.

Multi-turn conversations
------------------------
An agent sends the whole conversation again at every turn. Rendering it through the chat
template would re-tokenise the model's earlier replies, which need not give the ids the
model sampled. So when a conversation continues a recorded call — its messages start with
that call's messages followed by an assistant message whose content is the recorded reply,
or (from the OpenAI endpoint) the reply's parsed content and tool calls, and it offers the
same tools — the prompt is built from exact ids instead::

    prompt = earlier prompt ids + earlier reply ids (as sampled) + environment ids

where the environment ids are what the chat template renders after the reply (the rest of
the assistant turn, the new user / tool messages, the generation prompt). Each call's
prompt then extends the previous call's tokens, and :func:`merge_turns` joins the calls of
one conversation into one experience whose action mask is 1 on the model's tokens only.

A turn whose prompt is longer than ``max_prompt_tokens`` is left-truncated by the engine
(``enable_prompt_truncation``): its tokens no longer extend the earlier turns, and its
action mask is all 0 (it is not trained). Such a *cut turn* that continues a recorded turn
is left out of the merge, so the conversation stays one experience holding the turns up to
the last whole one; the first cut is named in one warning per process.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from rft.experience import Experience
from rft.engines.engine import Completion, InferenceEngine, render_text
from rft.engines.reply_parsing import AssistantReply

log = logging.getLogger("rft.rollout.history")

_warned_cut = False
"""A cut turn was warned about in this process (:meth:`History.remember`)."""
_warn_lock = threading.Lock()

REPLY_SENTINEL = "\u0000rft-reply\u0000"
"""Placeholder rendered in place of a recorded reply to find where the template puts it."""

MAX_TURNS_REMEMBERED = 512
"""Recorded replies a history keeps for continuing conversations (oldest dropped first)."""


@dataclass(frozen=True)
class RecordedTurn:
    """One sampled reply to a chat call, remembered to continue its conversation."""

    messages: tuple[tuple[tuple[str, Any], ...], ...]
    """The call's messages (frozen, for comparison)."""
    prompt_ids: tuple[int, ...]
    response_ids: tuple[int, ...]
    text: str
    """The reply as the engine decoded it: what a client sends back as assistant content."""
    tools: tuple[Any, ...] = ()
    """The tools the call offered (frozen): a continuation must offer the same."""
    reply: AssistantReply | None = None
    """The reply as the OpenAI endpoint parsed it (content, reasoning, tool calls), which
    a client may send back instead of the text."""
    turn: int = 1
    """Position of the call in its conversation (1: the first)."""
    truncated: bool = False
    """The call's prompt was left-truncated: its ids do not continue the conversation, so
    no later prompt is built from them (it is remembered for :attr:`turn` counting)."""

    def is_reply(self, message: dict[str, Any]) -> bool:
        """True when an assistant message carries this reply: its text verbatim, or the
        parsed reply (:meth:`AssistantReply.matches`)."""
        if message.get("role") != "assistant":
            return False
        if message.get("content") == self.text and not message.get("tool_calls"):
            return True
        return self.reply is not None and self.reply.matches(message)


def freeze_messages(messages: Sequence[dict[str, Any]]) -> tuple[tuple[tuple[str, Any], ...], ...]:
    """Messages as nested tuples (hashable, comparable); list contents become tuples."""
    return tuple(tuple(sorted((k, _freeze(v)) for k, v in m.items())) for m in messages)


def _freeze(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    return value


class History:
    """Thread-safe record of one wrapper's calls (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._experiences: list[Experience] = []
        self._turns: deque[RecordedTurn] = deque(maxlen=MAX_TURNS_REMEMBERED)
        self._cut: set[int] = set()
        """``id`` of recorded experiences that are cut turns (see the module docstring)."""

    def __len__(self) -> int:
        with self._lock:
            return len(self._experiences)

    def record(self, experiences: Sequence[Experience]) -> None:
        """Append experiences in call order."""
        with self._lock:
            self._experiences.extend(experiences)

    def remember(self, messages: Sequence[dict[str, Any]], completions: Sequence[Completion],
                 *, tools: Sequence[dict[str, Any]] | None = None,
                 replies: Sequence[AssistantReply] | None = None,
                 experiences: Sequence[Experience] | None = None) -> None:
        """Remember the replies of one chat call (with the tools it offered and the replies
        as the endpoint parsed them) so that a later call can continue them; a cut turn
        among ``experiences`` (the call's, one per completion) is marked and warned about."""
        found = self.continued_turn(messages, tools, include_truncated=True)
        turn = found[0].turn + 1 if found is not None else 1
        frozen, frozen_tools = freeze_messages(messages), _freeze(list(tools or []))
        parsed = list(replies) if replies is not None else [None] * len(completions)
        cut = [c.prompt_truncated for c in completions]
        with self._lock:
            for c, reply in zip(completions, parsed, strict=True):
                self._turns.append(RecordedTurn(frozen, tuple(c.prompt_token_ids),
                                                tuple(c.token_ids), c.text, frozen_tools,
                                                reply, turn, c.prompt_truncated))
            if found is not None and experiences is not None:
                self._cut.update(id(e) for e, is_cut in zip(experiences, cut, strict=True)
                                 if is_cut)
        if found is not None and any(cut):
            _warn_cut_once(turn, len(completions[cut.index(True)].prompt_token_ids))

    def extract(self, clear: bool = True) -> list[Experience]:
        """The recorded experiences in call order; forgotten when ``clear``."""
        return self.extract_marked(clear)[0]

    def extract_marked(self, clear: bool = True) -> tuple[list[Experience], list[bool]]:
        """The recorded experiences in call order and, for each, whether it is a cut turn
        (see the module docstring); forgotten when ``clear``."""
        with self._lock:
            out = list(self._experiences)
            cut = [id(e) in self._cut for e in out]
            if clear:
                self._experiences.clear()
                self._cut.clear()
            return out, cut

    def continued_turn(self, messages: Sequence[dict[str, Any]],
                       tools: Sequence[dict[str, Any]] | None = None, *,
                       include_truncated: bool = False) -> tuple[RecordedTurn, int] | None:
        """The latest recorded reply that ``messages`` (offering ``tools``) continue, with
        the index of the assistant message carrying it; ``None`` when the conversation
        continues none. Replies to cut prompts count only with ``include_truncated``."""
        frozen, frozen_tools = freeze_messages(messages), _freeze(list(tools or []))
        with self._lock:
            turns = list(self._turns)
        best: tuple[RecordedTurn, int] | None = None
        for turn in reversed(turns):
            k = len(turn.messages)
            if turn.truncated and not include_truncated:
                continue
            if (k + 1 >= len(messages) or frozen[:k] != turn.messages
                    or turn.tools != frozen_tools or not turn.is_reply(messages[k])):
                continue
            if best is None or k > best[1]:
                best = (turn, k)
        return best

    def continuation_ids(self, engine: InferenceEngine, messages: Sequence[dict[str, Any]],
                         tools: Sequence[dict[str, Any]] | None = None) -> list[int] | None:
        """Exact prompt ids of a conversation that continues a recorded reply, else ``None``
        (the caller renders it through the chat template as usual). The reply's assistant
        message — text, or parsed content and tool calls — stands for the ids sampled."""
        found = self.continued_turn(messages, tools)
        if found is None:
            return None
        turn, k = found
        before = render_text(engine, messages[:k], add_generation_prompt=True, tools=tools)
        marked = list(messages)
        marked[k] = {"role": "assistant", "content": REPLY_SENTINEL}
        full = render_text(engine, marked, add_generation_prompt=True, tools=tools)
        if not full.startswith(before + REPLY_SENTINEL) or full.count(REPLY_SENTINEL) != 1:
            return None  # the template does not render the reply verbatim where it was sampled
        after = full[len(before) + len(REPLY_SENTINEL):]
        after = _drop_generated_tail(engine, turn, after)
        env_ids = list(engine.tokenizer.encode(after, add_special_tokens=False))
        return list(turn.prompt_ids) + list(turn.response_ids) + env_ids


def _drop_generated_tail(engine: InferenceEngine, turn: RecordedTurn, after: str) -> str:
    """Drop from the template's text after the reply what the reply's ids already contain
    beyond its text (e.g. the EOS token ``<|im_end|>`` that ends the assistant turn)."""
    if not turn.response_ids:
        return after
    last = turn.response_ids[-1]
    if last not in engine.eos_token_ids:
        return after
    tail = engine.tokenizer.decode([last], skip_special_tokens=False)
    return after[len(tail):] if tail and after.startswith(tail) else after


def _warn_cut_once(turn: int, prompt_tokens: int) -> None:
    """One warning per process: a continued conversation's prompt was cut."""
    global _warned_cut
    with _warn_lock:
        if _warned_cut:
            return
        _warned_cut = True
    log.warning("model.max_prompt_tokens: turn %d of a multi-turn conversation was longer "
                "than the limit and was left-truncated to %d tokens; the conversation is kept "
                "as one experience up to turn %d, cut turns are not trained (raise "
                "model.max_prompt_tokens; said once)", turn, prompt_tokens, turn - 1)


def merge_turns(experiences: Sequence[Experience],
                cut: Sequence[bool] | None = None) -> list[Experience]:
    """Join the calls of multi-turn conversations into one experience per conversation.

    An experience *continues* an earlier one when its prompt starts with the earlier one's
    whole token sequence (prompt + response). Following these links from each experience
    that nothing continues back to the first call gives one conversation; it becomes one
    experience with the last call's tokens, the first call's prompt, and over the response
    part: the action mask and log-probs of each call on that call's own response tokens,
    mask 0 and log-prob 0 on everything in between (environment / user / tool tokens).
    Calls that continue nothing and are continued by nothing come back unchanged.

    :param experiences: recorded experiences in call order.
    :param cut: for each, whether it is a cut turn (:meth:`History.extract_marked`): those
        are left out, so that their conversation stays one experience.
    :return: one experience per conversation, in the order of their last calls.
    """
    if cut is not None:
        experiences = [e for e, is_cut in zip(experiences, cut, strict=True) if not is_cut]
    tokens = [e.tokens.tolist() for e in experiences]
    parent: list[int | None] = []
    for i, exp in enumerate(experiences):
        prompt = tokens[i][:exp.prompt_length]
        candidates = [j for j in range(i) if len(tokens[j]) <= len(prompt)
                      and prompt[:len(tokens[j])] == tokens[j]]
        parent.append(max(candidates, key=lambda j: (len(tokens[j]), j)) if candidates else None)
    continued = {p for p in parent if p is not None}
    merged: list[Experience] = []
    for i, exp in enumerate(experiences):
        if i in continued:
            continue
        chain = [i]
        while (up := parent[chain[-1]]) is not None:
            chain.append(up)
        merged.append(exp if len(chain) == 1 else _join([experiences[j] for j in reversed(chain)]))
    return merged


def _join(chain: list[Experience]) -> Experience:
    """One experience from calls each continuing the previous one (first call first)."""
    first, last = chain[0], chain[-1]
    start = first.prompt_length
    length = last.tokens.numel() - start
    mask = torch.zeros(length, dtype=torch.bool)  # (R,)
    logprobs = torch.zeros(length, dtype=torch.float32)  # (R,)
    has_logprobs = all(e.logprobs is not None for e in chain)
    for e in chain:
        lo, hi = e.prompt_length - start, e.tokens.numel() - start
        assert e.action_mask is not None
        mask[lo:hi] = e.action_mask
        if has_logprobs and e.logprobs is not None:  # (all have them)
            logprobs[lo:hi] = e.logprobs
    turns = len(chain)
    versions = None
    if len({e.model_version for e in chain}) > 1 or any(e.token_versions is not None
                                                         for e in chain):
        versions = torch.empty(length, dtype=torch.long)  # (R,)
        end = 0
        for e in chain:  # observation tokens take the version of the turn they precede
            lo, hi = e.prompt_length - start, e.tokens.numel() - start
            versions[end:lo] = e.model_version
            versions[lo:hi] = e.response_versions()
            end = hi
    return Experience(
        tokens=last.tokens.clone(), prompt_length=start,
        logprobs=logprobs if has_logprobs else None, action_mask=mask,
        model_version=min(e.model_version for e in chain),
        token_versions=versions, response_text=last.response_text,
        info={**last.info, "turns": turns,
              "finish_reason": last.info.get("finish_reason")},
        metrics={"multi_turn/turns": float(turns)},
    )


__all__ = ["History", "MAX_TURNS_REMEMBERED", "RecordedTurn", "merge_turns"]
