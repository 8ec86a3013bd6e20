"""The OpenAI chat-completions protocol of the explorer's endpoint: checking a request,
building the answer.

:func:`parse_chat_request` checks a ``/v1/chat/completions`` body against what the endpoint
can honour and the endpoint's limits (:class:`RequestLimits`); a request it cannot honour
raises :class:`BadRequest` naming the field, which the server answers with ``400`` in the
OpenAI error format (:func:`error_body`). :func:`completion_response` and
:func:`stream_chunks` build the ``chat.completion`` object and its
``chat.completion.chunk`` stream.

Checked (``400`` naming the field): types; ``n`` in ``[1, max_n]``; ``max_tokens`` /
``max_completion_tokens`` in ``[1, the model's max_response_tokens]``; ``min_tokens`` not
above it; ``seed`` in ``[0, 2**63)``; ``temperature``, ``top_p`` and
``repetition_penalty`` finite and in range; message roles (``system``, ``user``,
``assistant``, ``tool``); every string valid Unicode (a lone surrogate such as
``"\\ud800"``, which JSON can spell but UTF-8 cannot encode, is refused naming where it
is). Fields that would change the answer and cannot be honoured
(``tool_choice: required``, ``top_logprobs > 0``, ``presence_penalty``,
``frequency_penalty``, ``logit_bias``, ``response_format`` other than text, the deprecated
``functions`` / ``function_call``) are refused. Other unknown fields are ignored, as
vLLM's server does (logged once per name).
"""

from __future__ import annotations

import logging
import math
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

from rft.errors import RftError
from rft.engines.engine import Completion
from rft.engines.reply_parsing import AssistantReply, ReplyParser, call_of

if TYPE_CHECKING:
    from rft.rollout.model_wrapper import ModelWrapper

log = logging.getLogger("rft.openai")

MAX_SEED = 2**63
"""Seeds must be below this (and ``>= 0``)."""

MAX_TOKEN_ID = 2**31
"""Token ids (``stop_token_ids``) and ``top_k`` must be below this."""

ROLES = ("system", "user", "assistant", "tool")
"""Message roles the endpoint takes (chat templates drop or garble others)."""

_SAMPLING_FIELDS: dict[str, tuple[type | tuple[type, ...], str]] = {
    "temperature": ((int, float), "temperature"),
    "top_p": ((int, float), "top_p"),
    "top_k": (int, "top_k"),
    "max_tokens": (int, "max_tokens"),
    "max_completion_tokens": (int, "max_tokens"),
    "min_tokens": (int, "min_tokens"),
    "seed": (int, "seed"),
    "repetition_penalty": ((int, float), "repetition_penalty"),
    "ignore_eos": (bool, "ignore_eos"),
    "skip_special_tokens": (bool, "skip_special_tokens"),
}
"""Request field → (JSON type, :class:`SamplingArgs` field)."""

_IGNORED_FIELDS = frozenset({"user", "metadata", "store", "service_tier", "reasoning_effort",
                             "modalities", "prediction", "web_search_options", "audio"})
"""OpenAI fields accepted without a word (they do not change the sampled text here)."""

_REFUSED_FIELDS = frozenset({"presence_penalty", "frequency_penalty", "top_logprobs",
                             "logit_bias", "response_format", "functions", "function_call"})
"""OpenAI fields that would change the answer in ways the engine cannot honour (refused
unless given their neutral value)."""

_KNOWN_FIELDS = frozenset({"model", "messages", "n", "stream", "stream_options", "logprobs",
                           "stop", "stop_token_ids", "return_token_ids", "tools",
                           "tool_choice", "parallel_tool_calls"}) | _IGNORED_FIELDS \
    | _REFUSED_FIELDS | set(_SAMPLING_FIELDS)

_MESSAGE_FIELDS: dict[str, frozenset[str]] = {
    "assistant": frozenset({"role", "content", "name", "tool_calls", "reasoning_content"}),
    "tool": frozenset({"role", "content", "name", "tool_call_id"}),
}
"""Fields a message of a role may have (other roles: ``role``, ``content``, ``name``)."""

_SURROGATE = re.compile("[\ud800-\udfff]")
"""A UTF-16 surrogate code point: JSON's ``\\ud800`` escapes decode to one when unpaired,
and no tokenizer can encode it."""

_WARNED_FIELDS: set[str] = set()
_WARNED_LOCK = threading.Lock()


class BadRequest(RftError):
    """A request the endpoint refuses; ``status`` is its HTTP status."""

    def __init__(self, message: str, param: str | None = None,
                 status: HTTPStatus = HTTPStatus.BAD_REQUEST) -> None:
        super().__init__(message)
        self.param = param
        self.status = status


@dataclass(frozen=True)
class RequestLimits:
    """Bounds a request must keep (beyond the engine's own checks)."""

    max_n: int = 64
    """Most choices per request (``n``)."""
    max_tokens: int | None = None
    """Most new tokens a request may ask for: the model's ``max_response_tokens``;
    ``None``: unbounded here (the engine bounds it by ``max_model_len``)."""


@dataclass
class ChatRequest:
    """A checked ``/v1/chat/completions`` request."""

    messages: list[dict[str, Any]]
    n: int = 1
    sampling: dict[str, Any] = field(default_factory=dict)
    """Overrides of the model's default :class:`SamplingArgs`."""
    logprobs: bool = False
    return_token_ids: bool = False
    tools: list[dict[str, Any]] | None = None
    """OpenAI function specs the chat template offers the model."""
    call_tools: bool = False
    """Parse tool calls out of the replies (``tool_choice: auto`` with tools)."""
    parallel_tool_calls: bool = True
    stream: bool = False
    include_usage: bool = False
    """``stream_options.include_usage``: a last chunk with the token counts."""


def _lone_surrogate(body: Any) -> str | None:
    """Where a string of ``body`` holding a lone surrogate is (``messages[0].content``,
    ``tools[1].function.description``, …), or ``None`` when every string is valid Unicode.
    Walks the decoded JSON without recursion (its nesting depth is the decoder's)."""
    stack: list[tuple[str, Any]] = [("", body)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, str):
            if _SURROGATE.search(value):
                return where or "body"
        elif isinstance(value, dict):
            for key, item in value.items():
                if _SURROGATE.search(key):
                    return f"{where}.<key>" if where else "<key>"
                stack.append((f"{where}.{key}" if where else key, item))
        elif isinstance(value, list):
            stack.extend((f"{where}[{i}]", item) for i, item in enumerate(value))
    return None


def _typed(body: dict[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    """``body[key]`` when it has JSON type ``kind`` (``true`` is no number here)."""
    value = body[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        expected = "a number" if float in kinds else " or ".join(k.__name__ for k in kinds)
        raise BadRequest(f"{key} must be {expected}, got {value!r}", key)
    if float in kinds and isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            finite = math.isfinite(value)
        except OverflowError:  # an integer too large for a float
            finite = False
        if not finite:
            raise BadRequest(f"{key} must be a finite number, got {value!r}", key)
    return value


def _message(index: int, message: Any) -> dict[str, Any]:
    """One message as the chat template takes it: text content (text parts joined; an
    assistant message that calls tools may have none), tool calls with their arguments as
    objects."""
    where = f"messages[{index}]"
    if not isinstance(message, dict):
        raise BadRequest(f"{where} must be an object with role and content, got {message!r}",
                         where)
    role = message.get("role")
    if not isinstance(role, str) or not role:
        raise BadRequest(f"{where}.role must be a non-empty string, got {role!r}", f"{where}.role")
    if role not in ROLES:
        raise BadRequest(f"{where}.role must be one of {', '.join(ROLES)}; got {role!r}",
                         f"{where}.role")
    unsupported = sorted(set(message) - _MESSAGE_FIELDS.get(role, {"role", "content", "name"}))
    if unsupported:
        raise BadRequest(f"{where}: unsupported field(s) for role {role!r}: "
                         f"{', '.join(unsupported)}", where)
    out: dict[str, Any] = {k: v for k, v in message.items() if k != "tool_calls"}
    if message.get("tool_calls"):
        calls = message["tool_calls"]
        if not isinstance(calls, list):
            raise BadRequest(f"{where}.tool_calls must be a list, got {calls!r}",
                             f"{where}.tool_calls")
        out["tool_calls"] = [_tool_call(f"{where}.tool_calls[{j}]", item)
                             for j, item in enumerate(calls)]
    content = message.get("content")
    if content is None and out.get("tool_calls"):
        content = ""
    if isinstance(content, list):
        texts = []
        for j, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text" \
                    or not isinstance(part.get("text"), str):
                raise BadRequest(f"{where}.content[{j}]: only text parts "
                                 "({'type': 'text', 'text': ...}) are supported",
                                 f"{where}.content")
            texts.append(part["text"])
        content = "".join(texts)
    if not isinstance(content, str):
        raise BadRequest(f"{where}.content must be a string or a list of text parts, got "
                         f"{content!r}", f"{where}.content")
    out["content"] = content
    return out


def _tool_call(where: str, item: Any) -> dict[str, Any]:
    """An assistant message's tool call with its arguments as an object (what chat
    templates render)."""
    try:
        call = call_of(item)
    except RftError as exc:
        raise BadRequest(f"{where}: {exc}", where) from exc
    out = {"type": "function", "function": {"name": call.name, "arguments": call.arguments}}
    if isinstance(item.get("id"), str):
        out["id"] = item["id"]
    return out


def _tools(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The request's ``tools``: function specs with a name."""
    tools = body["tools"]
    if not isinstance(tools, list):
        raise BadRequest(f"tools must be a list of function specs, got {tools!r}", "tools")
    for i, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if (not isinstance(tool, dict) or tool.get("type") != "function"
                or not isinstance(function, dict)
                or not isinstance(function.get("name"), str) or not function["name"]
                or not isinstance(function.get("parameters", {}), dict)):
            raise BadRequest(f"tools[{i}] must be {{'type': 'function', 'function': {{'name': "
                             f"..., 'parameters': {{...}}}}}}, got {tool!r}", f"tools[{i}]")
    return tools


def _tool_choice(body: dict[str, Any], has_tools: bool, parser: ReplyParser) -> bool:
    """Whether the replies are searched for tool calls (``tool_choice``: ``auto`` — the
    default with tools — or ``none``)."""
    choice = body.get("tool_choice")
    if choice is None:
        choice = "auto" if has_tools else "none"
    if choice == "none":
        return False
    if choice != "auto":
        raise BadRequest(f"tool_choice {choice!r} is not supported: rft does not constrain "
                         "decoding to a tool call (use 'auto' or 'none')", "tool_choice")
    if has_tools and not (parser.auto_tool_choice and parser.tool_calls is not None):
        raise BadRequest("tool_choice 'auto' (the default with tools) needs "
                         "enable_auto_tool_choice: true and a tool_call_parser on this "
                         "model's config", "tool_choice")
    return has_tools


def _refused(body: dict[str, Any]) -> None:
    """Refuse the fields the engine cannot honour, unless they have their neutral value."""
    for key in ("presence_penalty", "frequency_penalty"):
        if body.get(key) not in (None, 0, 0.0):
            raise BadRequest(f"{key} is not supported (use repetition_penalty)", key)
    if body.get("top_logprobs") not in (None, 0):
        raise BadRequest("top_logprobs is not supported: the engine reports the log-prob of "
                         "the sampled token only", "top_logprobs")
    if body.get("logit_bias"):
        raise BadRequest("logit_bias is not supported", "logit_bias")
    response_format = body.get("response_format")
    if response_format is not None and response_format != {"type": "text"}:
        raise BadRequest("response_format is not supported: rft does not constrain decoding "
                         "(only {'type': 'text'})", "response_format")
    for key in ("functions", "function_call"):
        if body.get(key) is not None:
            raise BadRequest(f"{key} is not supported (deprecated by OpenAI): use tools and "
                             "tool_choice", key)


def _ignore_unknown(body: dict[str, Any]) -> None:
    """Unknown fields are ignored, as vLLM's server does; each name is logged once."""
    unknown = set(body) - _KNOWN_FIELDS
    if not unknown:
        return
    with _WARNED_LOCK:
        new = sorted(name for name in unknown if name not in _WARNED_FIELDS)
        if len(_WARNED_FIELDS) < 1024:
            _WARNED_FIELDS.update(new)
    if new:
        log.warning("OpenAI API: ignoring unknown request field(s): %s", ", ".join(new))


def _sampling(body: dict[str, Any], limits: RequestLimits) -> dict[str, Any]:
    """The sampling overrides of a request, each checked against its range."""
    if "max_tokens" in body and "max_completion_tokens" in body:
        raise BadRequest("give max_tokens or max_completion_tokens, not both", "max_tokens")
    sampling: dict[str, Any] = {}
    given: dict[str, str] = {}  # SamplingArgs field -> the request field that set it
    for key, (kind, target) in _SAMPLING_FIELDS.items():
        if body.get(key) is not None:
            sampling[target] = _typed(body, key, kind)
            given[target] = key
    temperature = sampling.get("temperature")
    if temperature is not None and temperature < 0:
        raise BadRequest(f"temperature must be >= 0, got {temperature}", "temperature")
    top_p = sampling.get("top_p")
    if top_p is not None and not 0 < top_p <= 1:
        raise BadRequest(f"top_p must be in (0, 1], got {top_p}", "top_p")
    top_k = sampling.get("top_k")
    if top_k is not None and not -1 <= top_k < MAX_TOKEN_ID:
        raise BadRequest(f"top_k must be -1 (off) or in [0, {MAX_TOKEN_ID}), got {top_k}",
                         "top_k")
    penalty = sampling.get("repetition_penalty")
    if penalty is not None and penalty <= 0:
        raise BadRequest(f"repetition_penalty must be > 0, got {penalty}", "repetition_penalty")
    seed = sampling.get("seed")
    if seed is not None and not 0 <= seed < MAX_SEED:
        raise BadRequest(f"seed must be in [0, 2**63), got {seed}", "seed")
    max_tokens = sampling.get("max_tokens")
    if max_tokens is not None:
        key = given["max_tokens"]
        if max_tokens < 1:
            raise BadRequest(f"{key} must be >= 1, got {max_tokens}", key)
        if limits.max_tokens is not None and max_tokens > limits.max_tokens:
            raise BadRequest(f"{key} must be <= {limits.max_tokens} (this model's "
                             f"max_response_tokens), got {max_tokens}", key)
        if max_tokens >= MAX_TOKEN_ID:
            raise BadRequest(f"{key} must be < {MAX_TOKEN_ID}, got {max_tokens}", key)
    min_tokens = sampling.get("min_tokens")
    if min_tokens is not None:
        ceiling = max_tokens if max_tokens is not None else limits.max_tokens
        if min_tokens < 0:
            raise BadRequest(f"min_tokens must be >= 0, got {min_tokens}", "min_tokens")
        if min_tokens > (ceiling if ceiling is not None else MAX_TOKEN_ID - 1):
            raise BadRequest(f"min_tokens must be <= max_tokens "
                             f"({ceiling if ceiling is not None else MAX_TOKEN_ID - 1}), got "
                             f"{min_tokens}", "min_tokens")
    stop = body.get("stop")
    if stop is not None:
        stops = [stop] if isinstance(stop, str) else stop
        if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
            raise BadRequest(f"stop must be a string or a list of non-empty strings, got "
                             f"{stop!r}", "stop")
        sampling["stop"] = stops
    ids = body.get("stop_token_ids")
    if ids is not None:
        if not isinstance(ids, list) or not all(
                isinstance(t, int) and not isinstance(t, bool) and 0 <= t < MAX_TOKEN_ID
                for t in ids):
            raise BadRequest(f"stop_token_ids must be a list of token ids (integers in "
                             f"[0, {MAX_TOKEN_ID})), got {ids!r}", "stop_token_ids")
        sampling["stop_token_ids"] = ids
    return sampling


def parse_chat_request(body: Any, served_names: tuple[str, ...],
                       parser: ReplyParser | None = None,
                       limits: RequestLimits | None = None) -> ChatRequest:
    """Check a chat-completions body against what this model's endpoint can do (``parser``:
    its reply parsers; ``limits``: its bounds); raise :class:`BadRequest` naming the bad
    field."""
    limits = limits or RequestLimits()
    if not isinstance(body, dict):
        raise BadRequest(f"request body must be a JSON object, got {type(body).__name__}")
    where = _lone_surrogate(body)
    if where is not None:
        raise BadRequest(f"{where}: not valid Unicode text (a lone UTF-16 surrogate such as "
                         "\\ud800; send the character itself or its full surrogate pair)",
                         where)
    _ignore_unknown(body)
    model = body.get("model")
    if model is not None and model not in served_names:
        raise BadRequest(f"model {model!r} is not served here; use {served_names[0]!r}",
                         "model", HTTPStatus.NOT_FOUND)
    if "messages" not in body:
        raise BadRequest("messages is required", "messages")
    messages = body["messages"]
    if not isinstance(messages, list) or not messages:
        raise BadRequest(f"messages must be a non-empty list, got {messages!r}", "messages")
    request = ChatRequest([_message(i, m) for i, m in enumerate(messages)])
    if body.get("tools") is not None:
        request.tools = _tools(body) or None
    request.call_tools = _tool_choice(body, bool(request.tools), parser or ReplyParser())
    for key in ("parallel_tool_calls", "stream"):
        if body.get(key) is not None:
            setattr(request, key, _typed(body, key, bool))
    options = body.get("stream_options")
    if options is not None:
        if not isinstance(options, dict) or set(options) - {"include_usage"}:
            raise BadRequest(f"stream_options may only hold include_usage, got {options!r}",
                             "stream_options")
        request.include_usage = bool(options.get("include_usage", False))
    if body.get("n") is not None:
        request.n = _typed(body, "n", int)
        if request.n < 1:
            raise BadRequest(f"n must be >= 1, got {request.n}", "n")
        if request.n > limits.max_n:
            raise BadRequest(f"n must be <= {limits.max_n} (openai_api_max_n), got "
                             f"{request.n}", "n")
    _refused(body)
    for key in ("logprobs", "return_token_ids"):
        if body.get(key) is not None:
            setattr(request, key, _typed(body, key, bool))
    request.sampling = _sampling(body, limits)
    return request


def completion_response(model: ModelWrapper, request: ChatRequest,
                        completions: list[Completion], replies: list[AssistantReply],
                        *, with_reasoning: bool = False) -> dict[str, Any]:
    """The OpenAI ``chat.completion`` object of one request's completions and their
    parsed replies (``reasoning_content`` in each message when ``with_reasoning``)."""
    choices = []
    for index, (c, reply) in enumerate(zip(completions, replies, strict=True)):
        choice: dict[str, Any] = {
            "index": index,
            "message": reply.to_openai(with_reasoning=with_reasoning),
            "logprobs": _logprobs(model, c) if request.logprobs else None,
            "finish_reason": ("tool_calls" if reply.tool_calls and c.finish_reason == "stop"
                              else c.finish_reason),
        }
        if request.return_token_ids:
            choice["token_ids"] = list(c.token_ids)
        choices.append(choice)
    response: dict[str, Any] = {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model.name,
        "choices": choices,
        "usage": _usage(completions),
    }
    if request.return_token_ids and completions:
        response["prompt_token_ids"] = list(completions[0].prompt_token_ids)
    return response


def stream_chunks(response: dict[str, Any], request: ChatRequest) -> list[dict[str, Any]]:
    """A ``chat.completion`` as the ``chat.completion.chunk`` objects of a stream: per
    choice the role, its content (with its log-probs), reasoning and tool calls, then its
    finish reason; the token counts last when ``include_usage``. The reply is complete
    before the first chunk is sent: the chunks carry whole parts, not single tokens."""
    kept: tuple[str, ...] = ("id", "created", "model", "episode_id", "model_version")
    head = {k: response[k] for k in kept if k in response}  # the last two: serve mode (rft.endpoint.episodes)

    def chunk(choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        return {**head, "object": "chat.completion.chunk", "choices": choices, **extra}

    chunks = []
    for choice in response["choices"]:
        message, index = choice["message"], choice["index"]
        delta: dict[str, Any] = {"role": "assistant", "content": message["content"] or ""}
        if "reasoning_content" in message:
            delta["reasoning_content"] = message["reasoning_content"]
        if "token_ids" in choice:
            delta["token_ids"] = choice["token_ids"]
        chunks.append(chunk([{"index": index, "delta": delta, "logprobs": choice["logprobs"],
                              "finish_reason": None}]))
        if message.get("tool_calls"):
            calls = [{"index": j, **call} for j, call in enumerate(message["tool_calls"])]
            chunks.append(chunk([{"index": index, "delta": {"tool_calls": calls},
                                  "logprobs": None, "finish_reason": None}]))
        chunks.append(chunk([{"index": index, "delta": {}, "logprobs": None,
                              "finish_reason": choice["finish_reason"]}]))
    if request.include_usage:
        chunks.append(chunk([], usage=response["usage"]))
    return chunks


def _logprobs(model: ModelWrapper, completion: Completion) -> dict[str, Any]:
    """``choice.logprobs``: each sampled token with its log-probability."""
    assert completion.logprobs is not None
    content = []
    for token_id, logprob in zip(completion.token_ids, completion.logprobs.tolist(),
                                 strict=True):
        token = model.tokenizer.decode([token_id], skip_special_tokens=False)
        content.append({"token": token, "logprob": float(logprob),
                        "bytes": list(token.encode("utf-8")), "top_logprobs": []})
    return {"content": content}


def _usage(completions: list[Completion]) -> dict[str, int]:
    prompt_tokens = len(completions[0].prompt_token_ids) if completions else 0
    completion_tokens = sum(len(c.token_ids) for c in completions)
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def error_body(message: str, param: str | None, status: int,
               code: str | None = None) -> dict[str, Any]:
    """An answer in the OpenAI error format."""
    kind = "invalid_request_error" if status < 500 else "server_error"
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


__all__ = ["MAX_SEED", "ROLES", "BadRequest", "ChatRequest", "RequestLimits",
           "completion_response", "error_body", "parse_chat_request", "stream_chunks"]
