"""What a workflow talks to: an inference engine that answers with experiences.

    exps = model.chat(task.chat_messages(), n=4, temperature=1.0)
    text = model.decode(exps[0].response_tokens)

Every call returns :class:`~rft.experience.Experience` objects carrying the prompt and
response ids, the sampling log-probs and the weights version. A response whose prompt was
left-truncated gets an all-zero action mask: it is kept (and counted) but not trained on.

Workflows run in threads by the runner (``concurrent_mode: multi-threading``) share their
engine calls through a :class:`CallBatcher`: a call waits until every running workflow is
either waiting on the model or done, then one engine call serves all of them (on CPU, one
``generate`` of 4 prompts × 8 rows costs about as much as one of 1 prompt × 8 rows).

With ``enable_history`` every call is also recorded (:mod:`rft.explorer.history`):
``model.extract_experience_from_history()`` drains the record, ``merge_turns=True`` joins
the calls of each multi-turn conversation into one experience. ``model.get_openai_client()``
talks to the same engine through the explorer's OpenAI-compatible endpoint
(:mod:`rft.explorer.openai_server`), recorded in the same history.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import torch

from rft.errors import RftError
from rft.experience import Experience
from rft.explorer.engine import Completion, InferenceEngine, SamplingArgs
from rft.explorer.history import History
from rft.explorer.history import merge_turns as merge_history
from rft.explorer.reply_parsing import AssistantReply, ReplyParser

if TYPE_CHECKING:
    from rft.explorer.openai_server import OpenAIServer

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
            self._cond.notify_all()
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
        bad prompt fails its own workflow only."""
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
                if len(group) == 1:
                    c.error = exc
                    break
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


class ModelWrapper:
    """An engine plus default sampling settings, returning experiences.

    :param engine: the inference engine.
    :param defaults: sampling settings used when a call does not override them.
    :param name: the model's name (``/v1/models``; auxiliary models are looked up by it);
        ``None``: the engine's model path.
    :param enable_history: record every call's experiences
        (:meth:`extract_experience_from_history`).

    The explorer gives each workflow its own view (:meth:`for_workflow`): same engine and
    OpenAI endpoint, its own history.
    """

    def __init__(self, engine: InferenceEngine, defaults: SamplingArgs | None = None, *,
                 name: str | None = None, enable_history: bool = False) -> None:
        self.engine = engine
        self.defaults = defaults or SamplingArgs()
        self.name = name or str(getattr(engine, "model_path", "model"))
        self.enable_history = enable_history
        self.history = History()
        self.server: OpenAIServer | None = None
        """The OpenAI-compatible server of this model, once :meth:`serve_openai_api` ran."""
        self.session_id: str | None = None
        """This view's session on the server (workflow views only)."""
        self._clients: dict[str, Any] = {}

    # ---- views, history, OpenAI endpoint ------------------------------------------------

    def for_workflow(self, *, enable_history: bool | None = None) -> ModelWrapper:
        """A view for one workflow: same engine, defaults and server, its own history and
        its own session on the OpenAI endpoint (calls through :meth:`get_openai_client`
        are recorded in this view's history)."""
        view = ModelWrapper(self.engine, self.defaults, name=self.name,
                            enable_history=(self.enable_history if enable_history is None
                                            else enable_history))
        view.server = self.server
        if self.server is not None:
            view.session_id = self.server.open_session(view)
        return view

    def serve_openai_api(self, host: str = "127.0.0.1", port: int = 0, *,
                         log_requests: bool = False,
                         reply_parser: ReplyParser | None = None) -> OpenAIServer:
        """Start this model's OpenAI-compatible server (``port=0``: a free port;
        ``reply_parser``: its tool-call and reasoning parsers)."""
        from rft.explorer.openai_server import OpenAIServer

        if self.server is not None:
            raise RftError(f"model {self.name!r}: the OpenAI API is already served at "
                           f"{self.server.address}")
        self.server = OpenAIServer(self, host=host, port=port, log_requests=log_requests,
                                   reply_parser=reply_parser)
        self.server.start()
        return self.server

    def close(self) -> None:
        """Stop the OpenAI server this wrapper started (views leave it running)."""
        if self.server is not None and self.session_id is None:
            self.server.stop()
        self.server = None
        self._clients.clear()

    @property
    def api_address(self) -> str:
        """Root address of this view on the OpenAI endpoint (``…/v1`` is the API);
        raises :class:`RftError` when the endpoint is off."""
        if self.server is None:
            raise RftError(f"model {self.name!r} has no OpenAI API: set enable_openai_api: "
                           "true on explorer.rollout_model (or the auxiliary model)")
        root = self.server.address
        return f"{root}/sessions/{self.session_id}" if self.session_id else root

    @property
    def model_path(self) -> str:
        """The model name the endpoint serves (Trinity-RFT's ``client.model_path``)."""
        return self.name

    def get_openai_client(self) -> Any:
        """An ``openai.OpenAI`` client of this view (calls recorded in its history)."""
        return self._client("sync")

    def get_openai_async_client(self) -> Any:
        """An ``openai.AsyncOpenAI`` client of this view."""
        return self._client("async")

    def _client(self, kind: str) -> Any:
        if kind not in self._clients:
            try:
                import openai
            except ImportError as exc:
                raise RftError("get_openai_client needs the openai package: pip install "
                               f"openai ({exc})") from exc
            cls = openai.OpenAI if kind == "sync" else openai.AsyncOpenAI
            client = cls(base_url=f"{self.api_address}/v1", api_key="EMPTY", max_retries=0,
                         timeout=None)
            client.model_path = self.name  # type: ignore[attr-defined]
            self._clients[kind] = client
        return self._clients[kind]

    def extract_experience_from_history(self, clear_history: bool = True, *,
                                        merge_turns: bool = False) -> list[Experience]:
        """The experiences of every recorded call since the last extraction, in call order.

        :param clear_history: forget them (else the next call returns them again).
        :param merge_turns: join the calls of each multi-turn conversation into one
            experience, action mask 1 on the model's tokens only
            (:func:`rft.explorer.history.merge_turns`).
        :raises RftError: history is off.
        """
        if not self.enable_history:
            raise RftError(f"model {self.name!r}: history is off; set enable_history: true "
                           "on explorer.rollout_model (or the auxiliary model)")
        experiences = self.history.extract(clear=clear_history)
        return merge_history(experiences) if merge_turns else experiences

    # ---- calls --------------------------------------------------------------------------

    @property
    def tokenizer(self) -> Any:
        return self.engine.tokenizer

    @property
    def model_version(self) -> int:
        return self.engine.model_version

    def decode(self, token_ids: Sequence[int] | torch.Tensor, *,
               skip_special_tokens: bool = True) -> str:
        ids = token_ids.tolist() if isinstance(token_ids, torch.Tensor) else list(token_ids)
        return self.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)

    def generate(self, prompts: Sequence[str], n: int = 1, **sampling: Any) -> list[Experience]:
        """``n`` experiences per raw-text prompt (no chat template), prompt-major order."""
        ids = [self.tokenizer.encode(p, add_special_tokens=False) for p in prompts]
        return self._experiences(engine_call(self.engine, "generate", ids,
                                             sampling_args(self.defaults, sampling), n))

    def generate_from_ids(self, prompt_ids: Sequence[int], n: int = 1,
                          **sampling: Any) -> list[Experience]:
        """``n`` experiences continuing exactly these prompt token ids (multi-turn)."""
        return self._experiences(engine_call(self.engine, "generate", [list(prompt_ids)],
                                             sampling_args(self.defaults, sampling), n))

    def render(self, messages: Sequence[dict[str, Any]], *,
               add_generation_prompt: bool = True) -> str:
        """The conversation as text through the chat template."""
        return self.tokenizer.apply_chat_template(list(messages), tokenize=False,
                                                  add_generation_prompt=add_generation_prompt)

    def logprobs(self, experience: Experience, *, temperature: float = 1.0) -> torch.Tensor:
        """(R,) log-probs of an experience's response under the current weights."""
        return self.engine.compute_logprobs([experience.tokens.tolist()],
                                            [experience.prompt_length],
                                            temperature=temperature)[0]

    def chat(self, messages: Sequence[dict[str, Any]], n: int = 1,
             **sampling: Any) -> list[Experience]:
        """``n`` experiences for one conversation rendered with the chat template."""
        return self.chat_batch([messages], n, **sampling)[0]

    def chat_batch(self, conversations: Sequence[Sequence[dict[str, Any]]], n: int = 1,
                   **sampling: Any) -> list[list[Experience]]:
        """Like :meth:`chat` for several conversations at once (one engine call)."""
        return self.chat_completions(conversations, n,
                                     sampling_args(self.defaults, sampling)).experiences

    def chat_completions(self, conversations: Sequence[Sequence[dict[str, Any]]], n: int,
                         sampling: SamplingArgs, *,
                         tools: Sequence[dict[str, Any]] | None = None,
                         parse: Callable[[Completion], AssistantReply] | None = None
                         ) -> ChatResults:
        """The engine's completions for conversations, their experiences (recorded when
        history is on; the same objects) and, with ``parse``, the replies it makes of them
        (the OpenAI endpoint's messages).

        ``tools`` (OpenAI function specs) are rendered into the prompts by the chat
        template. With history on, a conversation that continues a recorded reply is sent
        as exact token ids (see :mod:`rft.explorer.history`), so that the calls of one
        conversation extend each other token for token.
        """
        conversations = [list(c) for c in conversations]
        if not self.enable_history and not tools:
            results = engine_call(self.engine, "chat", conversations, sampling, n)
        else:
            prompts = [(self.history.continuation_ids(self.engine, c, tools)
                        if self.enable_history else None)
                       or self.engine.apply_chat_template(c, tools=tools) for c in conversations]
            results = engine_call(self.engine, "generate", prompts, sampling, n)
        replies = [[parse(c) for c in g] if parse is not None else None for g in results]
        experiences = [[experience_from_completion(c) for c in g] for g in results]
        if self.enable_history:
            for conversation, group, group_replies in zip(conversations, results, replies,
                                                          strict=True):
                self.history.remember(conversation, group, tools=tools, replies=group_replies)
            self.history.record([e for g in experiences for e in g])
        return ChatResults(results, experiences, replies)

    def _experiences(self, results: list[list[Completion]]) -> list[Experience]:
        experiences = [experience_from_completion(c) for group in results for c in group]
        if self.enable_history:
            self.history.record(experiences)
        return experiences
