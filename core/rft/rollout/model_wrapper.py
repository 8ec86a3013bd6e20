"""What a workflow talks to: an inference engine that answers with experiences.

    exps = model.chat(task.chat_messages(), n=4, temperature=1.0)
    text = model.decode(exps[0].response_tokens)

Every call returns :class:`~rft.experience.Experience` objects carrying the prompt and
response ids, the sampling log-probs and the weights version. A response whose prompt was
left-truncated gets an all-zero action mask: it is kept (and counted) but not trained on.

The workflows of a batch share their engine calls: the runner hands each workflow's view a
:class:`~rft.engines.call_batching.CallSlot` (:attr:`ModelWrapper.calls`), its seat at the
batch's :class:`~rft.engines.call_batching.CallBatcher` (one engine call serves every
workflow waiting on the model); requests of the view's session on the OpenAI endpoint go
through the same slot.

With ``enable_history`` every call is also recorded (:mod:`rft.rollout.history`):
``model.extract_experience_from_history()`` drains the record, ``merge_turns=True`` joins
the calls of each multi-turn conversation into one experience. ``model.get_openai_client()``
talks to the same engine through the explorer's OpenAI-compatible endpoint
(:mod:`rft.endpoint.openai_server`), recorded in the same history.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from rft.errors import RftError
from rft.experience import Experience
from rft.engines.engine import Completion, InferenceEngine, SamplingArgs
from rft.rollout.history import History
from rft.rollout.history import merge_turns as merge_history
from rft.engines.call_batching import (CallSlot, ChatResults, engine_call,
                                        experiences_from_completions, sampling_args)
from rft.endpoint.openai_server import OpenAIServer
from rft.endpoint.settings import EndpointSettings
from rft.engines.reply_parsing import AssistantReply, ReplyParser

class ModelWrapper:
    """An engine plus default sampling settings, returning experiences.

    :param engine: the inference engine.
    :param defaults: sampling settings used when a call does not override them.
    :param name: the model's name (``/v1/models``; auxiliary models are looked up by it);
        ``None``: the engine's model path.
    :param enable_history: record every call's experiences
        (:meth:`extract_experience_from_history`).

    The explorer gives each workflow its own view (:meth:`for_workflow`): same engine and
    OpenAI endpoint, its own history, and the runner's :class:`CallSlot` it calls the
    engine through.
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
        self.calls: CallSlot | None = None
        """Where this view's engine calls go to be merged with the other workflows' of the
        batch (workflow views the runner gave a slot); ``None``: straight to the engine."""
        self._clients: dict[str, Any] = {}
        self.task_tools: list[dict[str, Any]] | None = None
        """Tools rendered into the prompts of :meth:`chat`, :meth:`chat_batch` and
        :meth:`render` calls that give none (a task's ``format.tools_key`` tools)."""

    # ---- views, history, OpenAI endpoint ------------------------------------------------

    def for_workflow(self, *, enable_history: bool | None = None,
                     tools: Sequence[dict[str, Any]] | None = None,
                     calls: CallSlot | None = None) -> ModelWrapper:
        """A view for one workflow: same engine, defaults and server, its own history and
        its own session on the OpenAI endpoint (calls through :meth:`get_openai_client`
        are recorded in this view's history). ``tools``: the task's tools, offered in the
        view's chat prompts (:attr:`task_tools`; not to OpenAI-endpoint requests, which
        carry their own). ``calls``: the workflow's seat at the runner's call batcher
        (:attr:`calls`), for its direct calls and its endpoint session's alike."""
        view = ModelWrapper(self.engine, self.defaults, name=self.name,
                            enable_history=(self.enable_history if enable_history is None
                                            else enable_history))
        view.task_tools = list(tools) if tools else None
        view.calls = calls
        view.server = self.server
        if self.server is not None:
            view.session_id = self.server.open_session(view)
        return view

    def serve_openai_api(self, host: str = "127.0.0.1", port: int = 0, *,
                         log_requests: bool = False,
                         reply_parser: ReplyParser | None = None,
                         settings: EndpointSettings | None = None) -> OpenAIServer:
        """Start this model's OpenAI-compatible server (``port=0``: a free port;
        ``reply_parser``: its tool-call and reasoning parsers; ``settings``: its API key and
        request limits)."""
        if self.server is not None:
            raise RftError(f"model {self.name!r}: the OpenAI API is already served at "
                           f"{self.server.address}")
        server = OpenAIServer(self, host=host, port=port, log_requests=log_requests,
                              reply_parser=reply_parser, settings=settings)
        server.start()
        self.server = server
        return server

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
        """An ``openai.OpenAI`` client of this view (calls recorded in its history; it
        sends the endpoint's API key, if it has one)."""
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
            key = self.server.api_key if self.server is not None else None
            client = cls(base_url=f"{self.api_address}/v1", api_key=key or "EMPTY",
                         max_retries=0, timeout=None)
            # Trinity-RFT's workflows read client.model_path; openai's classes do not declare it
            setattr(client, "model_path", self.name)  # noqa: B010
            self._clients[kind] = client
        return self._clients[kind]

    def extract_experience_from_history(self, clear_history: bool = True, *,
                                        merge_turns: bool = False) -> list[Experience]:
        """The experiences of every recorded call since the last extraction, in call order.

        :param clear_history: forget them (else the next call returns them again).
        :param merge_turns: join the calls of each multi-turn conversation into one
            experience, action mask 1 on the model's tokens only
            (:func:`rft.rollout.history.merge_turns`).
        :raises RftError: history is off.
        """
        if not self.enable_history:
            raise RftError(f"model {self.name!r}: history is off; set enable_history: true "
                           "on explorer.rollout_model (or the auxiliary model)")
        experiences, cut = self.history.extract_marked(clear=clear_history)
        return merge_history(experiences, cut) if merge_turns else experiences

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
                                             sampling_args(self.defaults, sampling), n,
                                             self.calls))

    def generate_from_ids(self, prompt_ids: Sequence[int], n: int = 1,
                          **sampling: Any) -> list[Experience]:
        """``n`` experiences continuing exactly these prompt token ids (multi-turn)."""
        return self._experiences(engine_call(self.engine, "generate", [list(prompt_ids)],
                                             sampling_args(self.defaults, sampling), n,
                                             self.calls))

    def render(self, messages: Sequence[dict[str, Any]], *,
               add_generation_prompt: bool = True,
               tools: Sequence[dict[str, Any]] | None = None) -> str:
        """The conversation as text through the chat template (with ``tools``, else the
        task's :attr:`task_tools`)."""
        tools = self.task_tools if tools is None else tools
        kwargs = {"tools": list(tools)} if tools else {}
        return self.tokenizer.apply_chat_template(list(messages), tokenize=False,
                                                  add_generation_prompt=add_generation_prompt,
                                                  **kwargs)

    def logprobs(self, experience: Experience, *, temperature: float = 1.0) -> torch.Tensor:
        """(R,) log-probs of an experience's response under the current weights."""
        return self.engine.compute_logprobs([experience.tokens.tolist()],
                                            [experience.prompt_length],
                                            temperature=temperature)[0]

    def chat(self, messages: Sequence[dict[str, Any]], n: int = 1, *,
             tools: Sequence[dict[str, Any]] | None = None,
             **sampling: Any) -> list[Experience]:
        """``n`` experiences for one conversation rendered with the chat template, offering
        ``tools`` (``None``: the task's :attr:`task_tools`; ``[]``: none)."""
        return self.chat_batch([messages], n, tools=tools, **sampling)[0]

    def chat_mm(self, messages: Sequence[dict[str, Any]], images: Sequence[Any], n: int = 1,
                **sampling: Any) -> list[Experience]:
        """``n`` experiences for one conversation with images (a vision-language model):
        rendered and expanded by the model's processor
        (:meth:`~rft.engines.engine.InferenceEngine.render_mm`; the images go before the
        first user turn's text unless a turn has ``{"type": "image"}`` parts), sampled by
        :meth:`~rft.engines.engine.InferenceEngine.generate_mm`; each experience carries
        the prompt's vision inputs (``multi_modal_inputs``) for the trainer."""
        prompt = self.engine.render_mm(messages, images)
        results = self.engine.generate_mm([prompt], sampling_args(self.defaults, sampling), n)
        experiences = experiences_from_completions([c for group in results for c in group])
        for experience in experiences:
            experience.multi_modal_inputs = prompt.multi_modal_inputs
        if self.enable_history:
            self.history.record(experiences)
        return experiences

    def chat_batch(self, conversations: Sequence[Sequence[dict[str, Any]]], n: int = 1, *,
                   tools: Sequence[dict[str, Any]] | None = None,
                   **sampling: Any) -> list[list[Experience]]:
        """Like :meth:`chat` for several conversations at once (one engine call)."""
        tools = self.task_tools if tools is None else tools
        return self.chat_completions(conversations, n, sampling_args(self.defaults, sampling),
                                     tools=tools or None).experiences

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
        as exact token ids (see :mod:`rft.rollout.history`), so that the calls of one
        conversation extend each other token for token.
        """
        conversations = [list(c) for c in conversations]
        if not self.enable_history and not tools:
            results = engine_call(self.engine, "chat", conversations, sampling, n, self.calls)
        else:
            prompts = [(self.history.continuation_ids(self.engine, c, tools)
                        if self.enable_history else None)
                       or self.engine.apply_chat_template(c, tools=tools) for c in conversations]
            results = engine_call(self.engine, "generate", prompts, sampling, n, self.calls)
        replies = [[parse(c) for c in g] if parse is not None else None for g in results]
        flat = experiences_from_completions([c for g in results for c in g])
        experiences, start = [], 0
        for g in results:  # regrouped per conversation
            experiences.append(flat[start: start + len(g)])
            start += len(g)
        if self.enable_history:
            for conversation, group, group_replies, group_experiences in zip(
                    conversations, results, replies, experiences, strict=True):
                self.history.remember(conversation, group, tools=tools, replies=group_replies,
                                      experiences=group_experiences)
            self.history.record([e for g in experiences for e in g])
        return ChatResults(results, experiences, replies)

    def _experiences(self, results: list[list[Completion]]) -> list[Experience]:
        experiences = experiences_from_completions([c for group in results for c in group])
        if self.enable_history:
            self.history.record(experiences)
        return experiences
