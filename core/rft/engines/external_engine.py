"""The ``external`` engine: a model hosted behind any OpenAI-compatible server.

``explorer.rollout_model.engine_type: external`` (or ``model.external_model.enable: true``)
evaluates a hosted model — OpenAI's API, a ``vllm serve`` process, another rft's explorer
endpoint — on rft's tasksets, workflows and rewards (modes ``bench`` and ``explore``); an
auxiliary model with ``engine_type: external`` is a judge or reward model behind such a
server. The settings come from ``model.external_model`` (auxiliary models:
``explorer.auxiliary_models[i].external_model_config``)::

    model:
      external_model:
        base_url_env: OPENAI_BASE_URL   # the variable holding e.g. http://127.0.0.1:8000/v1
        api_key_env: OPENAI_API_KEY     # the variable holding the key (unset: no key)
        model_name: gpt-4o-mini         # null: the one model the server lists

What it does with a call of :meth:`ExternalEngine.chat` (``B`` conversations, ``n``
samples): one ``POST /chat/completions`` per conversation (at most ``max_concurrency`` in
flight) with ``n``, ``temperature``, ``top_p``, ``max_tokens`` (the call's, else
``max_response_tokens``), ``seed`` (the call's, else the engine's next seed; conversation
``i`` of the call gets ``seed + i``), ``stop`` and ``logprobs``. vLLM's extra fields
(``top_k``, ``min_tokens``, ``repetition_penalty``, ``stop_token_ids``, ``ignore_eos``) are
sent only when they differ from their neutral value (``min_tokens`` above 1), because
OpenAI's own API refuses them. The answer's text, finish reason and — when the server returns
them (top-level ``logprobs.content``) — the sampled tokens' log-probs become
:class:`~rft.engines.engine.Completion` s. Log-probs are the server's own (vLLM reports
them before temperature scaling unless its ``logprobs_mode`` says otherwise; rft's endpoint
follows :mod:`rft.engines.engine`'s contract).

Token ids: the server's, with ``extra_engine_args: {return_token_ids: true}`` (vLLM's and
rft's endpoint's extension); else the local tokenizer's when there is one
(``model.model_path`` / the auxiliary model's ``model_path``: the prompt through its chat
template, the response text re-encoded; log-probs are kept only where they align one per
token); else none — experiences then carry the text alone (``response_text``), which is
what evaluation needs. Such experiences are never trained on: validation refuses the
engine as the policy being trained (see :attr:`InferenceEngine.remote
<rft.engines.engine.InferenceEngine.remote>`).

Token-id paths — :meth:`generate` (``ModelWrapper.generate`` / ``generate_from_ids``,
``use_base``), :meth:`compute_logprobs` (teacher-forced verdicts of ``llm_judge_workflow``
and ``math_rm_workflow``), :meth:`update_weights` — raise a one-line
:class:`~rft.errors.RftError` naming the server.

Failures: every request gets ``explorer.max_retry_times`` retries with exponential backoff
on connection errors, timeouts and HTTP 408 / 409 / 429 / 5xx, all of one call within
:data:`BUDGET_SHARE` of ``explorer.max_timeout`` (so that a silent server is reported as
such, not as a workflow timeout). Then a one-line error naming the URL: a
:class:`~rft.errors.ServerUnavailableError` (the runner stops the batch: every later task
would fail the same way) when the server cannot be reached, answers 502 / 503 / 504, or
refuses the key (401 / 403) or the model (404); a plain :class:`~rft.errors.RftError` (that
task fails, the others go on) for a request it refuses (400, 413, 422, 500).
"""

from __future__ import annotations

import concurrent.futures
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar, cast

import torch

from rft.chat_template import model_chat_template
from rft.config.convert import to_dataclass_checked
from rft.config.schema import ExternalModelConfig, RftConfig
from rft.errors import RftError, ServerUnavailableError
from rft.engines.engine import Completion, FinishReason, InferenceEngine, SamplingArgs

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletionMessageParam

T = TypeVar("T")

BUDGET_SHARE = 0.9
"""Share of ``explorer.max_timeout`` that one call (all its attempts) may take."""

RETRY_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})
"""HTTP statuses worth another attempt."""

UNAVAILABLE_STATUS = frozenset({401, 403, 404, 502, 503, 504})
"""HTTP statuses that every later request would get too: the run stops."""

BACKOFF_S = 0.25
"""First pause between attempts; doubled each time, at most :data:`MAX_BACKOFF_S`."""

MAX_BACKOFF_S = 4.0


@dataclass
class ExternalEngineArgs:
    """``extra_engine_args`` of the ``external`` engine."""

    max_concurrency: int = 8
    """Requests in flight at once when one engine call carries several conversations."""
    return_token_ids: bool = False
    """Ask the server for the prompt's and the response's token ids (vLLM's and rft's
    endpoint's ``return_token_ids``; OpenAI's API refuses it)."""
    logprobs: bool = True
    """Ask for the sampled tokens' log-probs when a call wants them (``false`` for a
    server that refuses ``logprobs``)."""
    extra_body: dict[str, Any] = field(default_factory=dict)
    """More JSON fields sent with every request (a provider's own options)."""


def engine_args(values: dict[str, Any] | None, key: str) -> ExternalEngineArgs:
    """:class:`ExternalEngineArgs` from ``extra_engine_args``; one-line :class:`RftError`
    naming ``key`` for an unknown key or a bad value."""
    built = to_dataclass_checked(ExternalEngineArgs, values, key)
    if built.max_concurrency < 1:
        raise RftError(f"{key}.max_concurrency: must be >= 1, got {built.max_concurrency}")
    return built


def server_address(settings: ExternalModelConfig, key: str,
                   environ: dict[str, str] | os._Environ[str] = os.environ
                   ) -> tuple[str, str | None]:
    """``(base URL, API key)`` from the environment variables ``settings`` names.

    :raises RftError: the base-URL variable is unset or not an http(s) URL (one line
        naming ``<key>.base_url_env`` and the variable).
    """
    url = (environ.get(settings.base_url_env) or "").strip()
    if not url:
        raise RftError(f"{key}.base_url_env: environment variable {settings.base_url_env} is "
                       "not set; it must hold the OpenAI-compatible server's base URL, e.g. "
                       "http://127.0.0.1:8000/v1")
    if not url.startswith(("http://", "https://")):
        raise RftError(f"{key}.base_url_env: environment variable {settings.base_url_env} "
                       f"holds {url!r}, not an http(s) URL")
    return url.rstrip("/"), environ.get(settings.api_key_env) or None


class ExternalEngine(InferenceEngine):
    """Chat with a model behind an OpenAI-compatible server (see the module docstring).

    :param base_url: the API's base URL (``…/v1``).
    :param api_key: its key; ``None``: none (a placeholder is sent).
    :param model_name: the model asked for; ``None``: the one model ``GET /models`` lists.
    :param tokenizer_path: a local tokenizer of the served model (token ids of experiences);
        ``None``: none.
    :param timeout: seconds one call may take, all attempts together.
    :param max_retries: extra attempts of a request after a retryable failure.
    :param args: the engine's ``extra_engine_args``.
    :param engine_kwargs: :class:`InferenceEngine`'s (limits, chat template, seed).
    """

    remote: ClassVar[bool] = True
    Args = ExternalEngineArgs

    def __init__(self, base_url: str, *, api_key: str | None = None,
                 model_name: str | None = None, tokenizer_path: str | None = None,
                 timeout: float = 600.0, max_retries: int = 2,
                 args: ExternalEngineArgs | None = None, trust_remote_code: bool = False,
                 **engine_kwargs: Any) -> None:
        try:
            import openai
        except ImportError as exc:  # a core dependency; say so in one line all the same
            raise RftError(f"engine 'external' needs the openai package: pip install openai "
                           f"({exc})") from exc
        super().__init__(**engine_kwargs)
        self._openai = openai
        self.base_url = base_url.rstrip("/")
        self.timeout = float(timeout)
        self.max_retries = max(0, int(max_retries))
        self.args = args or ExternalEngineArgs()
        self.tokenizer_path = tokenizer_path or None
        self.trust_remote_code = trust_remote_code
        self._tokenizer: Any = None
        self._tokenizer_lock = threading.Lock()
        self._client = openai.OpenAI(base_url=self.base_url, api_key=api_key or "EMPTY",
                                     max_retries=0, timeout=self.timeout)
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=self.args.max_concurrency, thread_name_prefix="rft-external")
        self.model_name: str | None = model_name
        self.model_name = model_name or self._served_model()
        self.model_path = tokenizer_path or self.model_name
        """The name :class:`~rft.rollout.model_wrapper.ModelWrapper` gives the model."""

    @classmethod
    def from_config(cls, config: RftConfig) -> ExternalEngine:
        """The engine of a stage's rollout model (an auxiliary model's through
        :func:`rft.rollout.auxiliary.engine_config`, whose ``model.external_model`` is the
        auxiliary model's settings)."""
        m, rm, e = config.model, config.explorer.rollout_model, config.explorer
        url, key = server_address(m.external_model, "model.external_model")
        tokenizer = rm.model_path or m.model_path or None
        return cls(url, api_key=key, model_name=m.external_model.model_name,
                   tokenizer_path=tokenizer, timeout=BUDGET_SHARE * e.max_timeout,
                   max_retries=e.max_retry_times,
                   args=engine_args(rm.extra_engine_args, "explorer.rollout_model."
                                    "extra_engine_args"),
                   trust_remote_code=m.trust_remote_code,
                   max_model_len=rm.max_model_len or m.max_model_len,
                   max_prompt_tokens=rm.max_prompt_tokens or m.max_prompt_tokens,
                   max_response_tokens=rm.max_response_tokens or m.max_response_tokens,
                   chat_template=model_chat_template(config),
                   enable_thinking=(rm.enable_thinking if rm.enable_thinking is not None
                                    else m.enable_thinking),
                   seed=rm.seed)

    # ---- what a remote model cannot do ------------------------------------------------

    def _refuse(self, what: str) -> RftError:
        return RftError(f"engine 'external' ({self.base_url}) {what}: the model runs on a "
                        "server that takes chat messages only; use chat-based workflows, or "
                        "an in-process engine (hf, vllm)")

    @property
    def tokenizer(self) -> Any:
        """The local tokenizer (``model_path``); :class:`RftError` when there is none."""
        if self.tokenizer_path is None:
            raise RftError(f"engine 'external' ({self.base_url}) has no tokenizer: set "
                           "model.model_path (or the auxiliary model's model_path) to a local "
                           "copy of the served model's tokenizer")
        with self._tokenizer_lock:
            if self._tokenizer is None:
                from transformers import AutoTokenizer

                self._tokenizer = AutoTokenizer.from_pretrained(
                    self.tokenizer_path, trust_remote_code=self.trust_remote_code)
                if self.chat_template is not None:
                    self._tokenizer.chat_template = self.chat_template
                eos = self._tokenizer.eos_token_id
                self.eos_token_ids = [eos] if eos is not None else []
        return self._tokenizer

    def generate(self, prompt_token_ids: Sequence[Sequence[int]], sampling: SamplingArgs,
                 n: int = 1) -> list[list[Completion]]:
        raise self._refuse("cannot continue token-id prompts (generate: raw-text or use_base "
                           "prompts, conversations continued from history, tools)")

    def compute_logprobs(self, token_ids: Sequence[Sequence[int]],
                         prompt_lengths: Sequence[int], *,
                         temperature: float = 1.0) -> list[torch.Tensor]:
        raise self._refuse("cannot score given tokens (compute_logprobs: teacher-forced "
                           "verdicts of llm_judge_workflow / math_rm_workflow)")

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]],
                       version: int) -> None:
        raise self._refuse("cannot take new weights (it cannot be the policy being trained)")

    # ---- chat ---------------------------------------------------------------------------

    def chat(self, messages_list: Sequence[Sequence[dict[str, Any]]], sampling: SamplingArgs,
             n: int = 1) -> list[list[Completion]]:
        """``n`` completions for each conversation, one request per conversation."""
        sampling.check()
        if n < 1:
            raise RftError(f"chat: n must be >= 1, got {n}")
        if not messages_list:
            return []
        seed = self.next_seed(sampling)
        futures = [self._pool.submit(self._chat_one, list(messages), sampling, n, seed + i)
                   for i, messages in enumerate(messages_list)]
        return [future.result() for future in futures]

    def request_body(self, sampling: SamplingArgs, n: int, seed: int) -> dict[str, Any]:
        """The ``/chat/completions`` fields of a call (the module docstring lists them)."""
        max_tokens = (sampling.max_tokens if sampling.max_tokens is not None
                      else self.max_response_tokens)
        body: dict[str, Any] = {"model": self.model_name, "n": n,
                                "temperature": sampling.temperature, "top_p": sampling.top_p,
                                "seed": seed}
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        if sampling.stop:
            body["stop"] = list(sampling.stop)
        if sampling.logprobs and self.args.logprobs:
            body["logprobs"] = True
        extra: dict[str, Any] = {}
        if sampling.top_k > 0:
            extra["top_k"] = sampling.top_k
        if sampling.min_tokens > 1:
            extra["min_tokens"] = sampling.min_tokens
        if sampling.repetition_penalty != 1.0:
            extra["repetition_penalty"] = sampling.repetition_penalty
        if sampling.stop_token_ids:
            extra["stop_token_ids"] = list(sampling.stop_token_ids)
        if sampling.ignore_eos:
            extra["ignore_eos"] = True
        if self.args.return_token_ids:
            extra["return_token_ids"] = True
        if self.enable_thinking is not None:
            extra["chat_template_kwargs"] = {"enable_thinking": self.enable_thinking}
        extra.update(self.args.extra_body)
        if extra:
            body["extra_body"] = extra
        return body

    def _chat_one(self, messages: list[dict[str, Any]], sampling: SamplingArgs, n: int,
                  seed: int) -> list[Completion]:
        body = self.request_body(sampling, n, seed)
        # rft's chat messages are OpenAI messages held as plain dicts
        typed = cast("list[ChatCompletionMessageParam]", messages)
        response = self._call("chat completion", lambda timeout: self._client.chat.completions
                              .create(messages=typed, timeout=timeout, **body))
        choices = sorted(response.choices, key=lambda c: c.index)
        if len(choices) != n:
            raise RftError(f"external model {self.model_name!r} at {self.base_url}: asked for "
                           f"n={n} choices, got {len(choices)}")
        extra = response.model_extra or {}
        prompt_ids = extra.get("prompt_token_ids")
        if prompt_ids is None and self.tokenizer_path is not None:
            prompt_ids = self.apply_chat_template(messages)
        return [self._completion(list(prompt_ids or []), choice) for choice in choices]

    def _completion(self, prompt_ids: list[int], choice: Any) -> Completion:
        text = choice.message.content or ""
        finish: FinishReason = "length" if choice.finish_reason == "length" else "stop"
        content = getattr(choice.logprobs, "content", None) if choice.logprobs else None
        logprobs = (torch.tensor([float(t.logprob) for t in content], dtype=torch.float32)
                    if content else None)
        token_ids = (choice.model_extra or {}).get("token_ids")
        if token_ids is None:
            token_ids = (list(self.tokenizer.encode(text, add_special_tokens=False))
                         if self.tokenizer_path is not None else [])
        if logprobs is not None and len(logprobs) != len(token_ids):
            logprobs = None  # the server's tokens are not ours: nothing to align them with
        return Completion(prompt_token_ids=prompt_ids, token_ids=list(token_ids),
                          logprobs=logprobs, text=text, finish_reason=finish,
                          model_version=self.model_version)

    # ---- requests -----------------------------------------------------------------------

    def _served_model(self) -> str:
        """The one model ``GET /models`` lists (when ``model_name`` is not set)."""
        listing = self._call("model list", lambda timeout: self._client.models.list(
            timeout=timeout))
        names = [m.id for m in listing.data]
        if len(names) != 1:
            raise RftError(f"model.external_model.model_name: not set, and the server at "
                           f"{self.base_url} serves {len(names)} models "
                           f"({', '.join(names[:8]) or 'none'}); name one")
        return names[0]

    def _call(self, what: str, request: Callable[[float], T]) -> T:
        """``request(timeout)`` with retries within :attr:`timeout` seconds in all (see the
        module docstring); one-line errors naming the URL."""
        openai = self._openai
        started = time.monotonic()
        deadline = started + self.timeout
        attempt = 0
        while True:
            attempt += 1
            remaining = deadline - time.monotonic()
            try:
                return request(max(remaining, 0.01))
            except openai.APIStatusError as exc:
                status = exc.status_code
                if status in RETRY_STATUS and self._pause(attempt, deadline):
                    continue
                raise self._status_error(what, exc, attempt, started) from exc
            except openai.APIConnectionError as exc:
                if self._pause(attempt, deadline):
                    continue
                cause = "timed out" if isinstance(exc, openai.APITimeoutError) else \
                    _first_line(exc.__cause__ or exc)
                raise ServerUnavailableError(
                    f"external model at {self.base_url}: {what} failed: {cause} ({attempt} "
                    f"attempt(s) in {time.monotonic() - started:.1f} s); is the server "
                    "running?") from exc

    def _pause(self, attempt: int, deadline: float) -> bool:
        """Wait before attempt ``attempt + 1``; ``False`` when no attempt is left."""
        if attempt > self.max_retries:
            return False
        pause = min(MAX_BACKOFF_S, BACKOFF_S * 2 ** (attempt - 1))
        if time.monotonic() + pause >= deadline:
            return False
        time.sleep(pause)
        return True

    def _status_error(self, what: str, exc: Any, attempt: int, started: float) -> RftError:
        status = exc.status_code
        detail = exc.body.get("message") if isinstance(exc.body, dict) else None
        name = f"{self.model_name!r} " if self.model_name else ""
        message = (f"external model {name}at {self.base_url}: {what} refused with HTTP "
                   f"{status}: {_first_line(detail or exc.message)}")
        if attempt > 1:
            message += f" ({attempt} attempts in {time.monotonic() - started:.1f} s)"
        if status in UNAVAILABLE_STATUS:
            return ServerUnavailableError(message)
        return RftError(message)

    def close(self) -> None:
        """Release the HTTP connections and the request threads."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._client.close()


def _first_line(value: Any, limit: int = 300) -> str:
    lines = str(value).strip().splitlines()
    line = lines[0] if lines else type(value).__name__
    return line if len(line) <= limit else line[:limit] + "…"


__all__ = ["BUDGET_SHARE", "ExternalEngine", "ExternalEngineArgs", "engine_args",
           "server_address"]
