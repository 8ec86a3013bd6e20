"""An OpenAI-compatible HTTP endpoint served from the explorer's model.

Agent workflows written against the OpenAI API talk to the rollout model through it::

    client = self.model.get_openai_client()
    reply = client.chat.completions.create(model=client.model_path, messages=messages)

=============================================  ==========================================
``POST /v1/chat/completions``                  ``messages`` (tool calls and tool
                                               results included), ``n``,
                                               ``temperature``, ``top_p``,
                                               ``max_tokens`` /
                                               ``max_completion_tokens``, ``seed``,
                                               ``stop``, ``logprobs``, ``tools``,
                                               ``tool_choice`` (``auto`` / ``none``),
                                               ``parallel_tool_calls``, ``stream``,
                                               ``stream_options``; vLLM's extras
                                               ``top_k``, ``min_tokens``,
                                               ``repetition_penalty``, ``stop_token_ids``,
                                               ``ignore_eos``, ``skip_special_tokens``,
                                               ``return_token_ids``
``GET /v1/models``                             the served model
``GET /health``                                ``200`` while serving
=============================================  ==========================================

Each workflow's view of the model (:meth:`ModelWrapper.for_workflow
<rft.explorer.model_wrapper.ModelWrapper.for_workflow>`) has its own *session*: its client
uses ``/sessions/<id>/v1``, so the calls it makes are recorded in its own history, and they
join the concurrent workflows' engine calls like its direct calls do
(:class:`~rft.explorer.model_wrapper.CallBatcher`). Plain ``/v1`` is the model itself.

Replies become messages through the model's :class:`~rft.explorer.reply_parsing.ReplyParser`
(``tool_call_parser``, ``reasoning_parser``): ``message.tool_calls`` and
``message.reasoning_content``. A streamed request gets the finished reply as
``chat.completion.chunk`` server-sent events (:func:`stream_chunks`).

The server is the standard library's threading HTTP server (one thread per connection)
on ``127.0.0.1`` and a free port by default. Requests the endpoint cannot honour are
answered in the OpenAI error format: ``400`` for a bad or unsupported field (naming it),
``404`` for an unknown path, model or session; engine failures are ``500``.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import logging
import threading
import time
import uuid
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from rft.errors import RftError
from rft.explorer.engine import Completion
from rft.explorer.call_batching import CallBatcher, ChatResults, sampling_args
from rft.explorer.reply_parsing import AssistantReply, ReplyParser, call_of

if TYPE_CHECKING:
    from rft.explorer.model_wrapper import ModelWrapper

log = logging.getLogger("rft.openai")

MAX_BODY_BYTES = 32 * 1024 * 1024
"""Largest request body accepted."""

_IGNORED_FIELDS = frozenset({"user", "metadata", "store"})
"""OpenAI fields that do not change the answer: accepted and ignored."""

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

_KNOWN_FIELDS = frozenset({"model", "messages", "n", "stream", "stream_options", "logprobs",
                           "top_logprobs", "stop", "stop_token_ids", "presence_penalty",
                           "frequency_penalty", "return_token_ids", "tools", "tool_choice",
                           "parallel_tool_calls"}) | _IGNORED_FIELDS | set(_SAMPLING_FIELDS)

_MESSAGE_FIELDS: dict[str, frozenset[str]] = {
    "assistant": frozenset({"role", "content", "name", "tool_calls", "reasoning_content"}),
    "tool": frozenset({"role", "content", "name", "tool_call_id"}),
}
"""Fields a message of a role may have (other roles: ``role``, ``content``, ``name``)."""


class BadRequest(RftError):
    """A request the endpoint refuses; ``status`` is its HTTP status."""

    def __init__(self, message: str, param: str | None = None,
                 status: HTTPStatus = HTTPStatus.BAD_REQUEST) -> None:
        super().__init__(message)
        self.param = param
        self.status = status


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


def _typed(body: dict[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    """``body[key]`` when it has JSON type ``kind`` (``true`` is no number here)."""
    value = body[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        expected = "a number" if float in kinds else " or ".join(k.__name__ for k in kinds)
        raise BadRequest(f"{key} must be {expected}, got {value!r}", key)
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


def parse_chat_request(body: Any, served_names: tuple[str, ...],
                       parser: ReplyParser | None = None) -> ChatRequest:
    """Check a chat-completions body against what this model's endpoint can do (``parser``:
    its reply parsers); raise :class:`BadRequest` naming the bad field."""
    if not isinstance(body, dict):
        raise BadRequest(f"request body must be a JSON object, got {type(body).__name__}")
    unknown = sorted(set(body) - _KNOWN_FIELDS)
    if unknown:
        raise BadRequest(f"unsupported field(s): {', '.join(unknown)}", unknown[0])
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
    for key in ("presence_penalty", "frequency_penalty"):
        if body.get(key) not in (None, 0, 0.0):
            raise BadRequest(f"{key} is not supported (use repetition_penalty)", key)
    if body.get("top_logprobs") not in (None, 0):
        raise BadRequest("top_logprobs is not supported: the engine reports the log-prob of "
                         "the sampled token only", "top_logprobs")
    for key in ("logprobs", "return_token_ids"):
        if body.get(key) is not None:
            setattr(request, key, _typed(body, key, bool))
    if "max_tokens" in body and "max_completion_tokens" in body:
        raise BadRequest("give max_tokens or max_completion_tokens, not both", "max_tokens")
    for key, (kind, target) in _SAMPLING_FIELDS.items():
        if body.get(key) is not None:
            request.sampling[target] = _typed(body, key, kind)
    stop = body.get("stop")
    if stop is not None:
        stops = [stop] if isinstance(stop, str) else stop
        if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
            raise BadRequest(f"stop must be a string or a list of non-empty strings, got "
                             f"{stop!r}", "stop")
        request.sampling["stop"] = stops
    ids = body.get("stop_token_ids")
    if ids is not None:
        if not isinstance(ids, list) or not all(isinstance(t, int) and not isinstance(t, bool)
                                                for t in ids):
            raise BadRequest(f"stop_token_ids must be a list of integers, got {ids!r}",
                             "stop_token_ids")
        request.sampling["stop_token_ids"] = ids
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
    head = {k: response[k] for k in ("id", "created", "model")}

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


@dataclass
class _Session:
    view: weakref.ref
    """The workflow's :class:`ModelWrapper` view (sessions end with their workflow)."""
    slot: tuple[CallBatcher, int] | None
    """The workflow thread's :class:`CallBatcher` participation, if any."""


class OpenAIServer:
    """The endpoint of one model (see the module docstring).

    :param model: the model it serves (its root view answers ``/v1``).
    :param host: address to bind; ``127.0.0.1`` keeps it on this machine.
    :param port: port to bind; ``0`` picks a free one.
    :param log_requests: log every request (method, path, status, seconds).
    :param reply_parser: how replies become messages (tool calls, reasoning); default:
        the text is the content.
    """

    def __init__(self, model: ModelWrapper, *, host: str = "127.0.0.1", port: int = 0,
                 log_requests: bool = False, reply_parser: ReplyParser | None = None) -> None:
        self.model = model
        self.reply_parser = reply_parser or ReplyParser()
        self.host = host
        self.port = port
        self.log_requests = log_requests
        self._sessions: dict[str, _Session] = {}
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ---- lifecycle ----------------------------------------------------------------------

    @property
    def address(self) -> str:
        """``http://host:port`` a client on this machine uses."""
        if self._httpd is None:
            raise RftError(f"OpenAI API server of model {self.model.name!r} is not running")
        host = "127.0.0.1" if self.host in ("", "0.0.0.0") else self.host
        return f"http://{host}:{self.port}"

    @property
    def served_names(self) -> tuple[str, ...]:
        """Names ``model`` may take in a request: the model's name and its last path part."""
        name = self.model.name
        short = name.rstrip("/").rsplit("/", 1)[-1]
        return (name, short) if short != name else (name,)

    def start(self) -> None:
        """Bind and serve in a background thread; a port in use is a one-line error."""
        if self._httpd is not None:
            return
        try:
            httpd = ThreadingHTTPServer((self.host, self.port), _handler_class(self))
        except OSError as exc:
            reason = ("address already in use" if exc.errno == errno.EADDRINUSE
                      else exc.strerror or str(exc))
            raise RftError(f"OpenAI API of model {self.model.name!r}: cannot listen on "
                           f"{self.host}:{self.port}: {reason} (set openai_api_port to a free "
                           "port, or 0 for any)") from exc
        httpd.daemon_threads = True
        self._httpd = httpd
        self.port = httpd.server_address[1]
        self._thread = threading.Thread(target=httpd.serve_forever, name="rft-openai-api",
                                        kwargs={"poll_interval": 0.1}, daemon=True)
        self._thread.start()
        log.info("OpenAI API of %s at %s/v1", self.model.name, self.address)

    def stop(self) -> None:
        """Stop serving and release the port (idempotent)."""
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        httpd.shutdown()
        httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> OpenAIServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- sessions -----------------------------------------------------------------------

    def open_session(self, view: ModelWrapper) -> str:
        """Register a workflow's view; its calls take part in the calling thread's batcher."""
        session_id = uuid.uuid4().hex[:16]

        def forget(_: weakref.ref, key: str = session_id) -> None:
            with self._lock:
                self._sessions.pop(key, None)

        with self._lock:
            self._sessions[session_id] = _Session(weakref.ref(view, forget),
                                                  CallBatcher.current())
        return session_id

    def session_count(self) -> int:
        """Open sessions (views still alive)."""
        with self._lock:
            return len(self._sessions)

    def _resolve(self, path: str) -> tuple[ModelWrapper, tuple[CallBatcher, int] | None, str]:
        """The view a path addresses, its batcher slot, and the API path (``/v1/…``)."""
        if not path.startswith("/sessions/"):
            return self.model, None, path
        _, _, session_id, *rest = path.split("/", 3)
        with self._lock:
            session = self._sessions.get(session_id)
        view = session.view() if session is not None else None
        if session is None or view is None:
            raise BadRequest(f"session {session_id!r} is unknown or closed (its workflow has "
                             "finished)", status=HTTPStatus.NOT_FOUND)
        return view, session.slot, "/" + (rest[0] if rest else "")

    # ---- requests -----------------------------------------------------------------------

    def handle(self, method: str, path: str, body: bytes | None
               ) -> tuple[int, dict[str, Any] | list[dict[str, Any]]]:
        """Answer one request: ``(HTTP status, JSON object)``, or the chunks of a stream
        (a list, sent as server-sent events)."""
        try:
            view, slot, api_path = self._resolve(urlsplit(path).path)
            if api_path == "/health" and method == "GET":
                return HTTPStatus.OK, {"status": "ok"}
            if api_path == "/v1/models" and method == "GET":
                return HTTPStatus.OK, self._models(view)
            if api_path == "/v1/chat/completions" and method == "POST":
                return HTTPStatus.OK, self._chat(view, slot, body or b"")
            if api_path in ("/health", "/v1/models", "/v1/chat/completions"):
                raise BadRequest(f"method {method} is not allowed on {api_path}",
                                 status=HTTPStatus.METHOD_NOT_ALLOWED)
            raise BadRequest(f"no such endpoint: {method} {api_path} (served: POST "
                             "/v1/chat/completions, GET /v1/models)",
                             status=HTTPStatus.NOT_FOUND)
        except BadRequest as exc:
            return exc.status, _error(str(exc), exc.param, exc.status)
        except RftError as exc:  # engine refused the call (prompt too long, bad sampling)
            return HTTPStatus.BAD_REQUEST, _error(str(exc), None, HTTPStatus.BAD_REQUEST)
        except Exception as exc:  # noqa: BLE001 - reported to the client, logged here
            log.exception("OpenAI API: %s %s failed", method, path)
            return (HTTPStatus.INTERNAL_SERVER_ERROR,
                    _error(f"internal error: {type(exc).__name__}: {exc}", None,
                           HTTPStatus.INTERNAL_SERVER_ERROR))

    def _models(self, view: ModelWrapper) -> dict[str, Any]:
        return {"object": "list", "data": [{"id": view.name, "object": "model",
                                            "created": 0, "owned_by": "rft"}]}

    def _chat(self, view: ModelWrapper, slot: tuple[CallBatcher, int] | None,
              raw: bytes) -> dict[str, Any] | list[dict[str, Any]]:
        """A ``chat.completion``, or its chunks when the request streams."""
        try:
            body = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise BadRequest(f"request body is not valid JSON: {exc}") from exc
        request = parse_chat_request(body, self.served_names, self.reply_parser)
        sampling = dataclasses.replace(sampling_args(view.defaults, request.sampling),
                                       logprobs=True)  # the history needs them
        sampling.check()

        def parse(completion: Completion) -> AssistantReply:
            return self.reply_parser.parse(completion.text, call_tools=request.call_tools,
                                           parallel=request.parallel_tool_calls)

        def call() -> ChatResults:
            return view.chat_completions([request.messages], request.n, sampling,
                                         tools=request.tools, parse=parse)

        results = _in_slot(slot, call)
        replies = results.replies[0]
        assert replies is not None
        response = completion_response(view, request, results.completions[0], replies,
                                        with_reasoning=self.reply_parser.reasoning is not None)
        return stream_chunks(response, request) if request.stream else response


def _in_slot(slot: tuple[CallBatcher, int] | None, call: Callable[[], ChatResults]
             ) -> ChatResults:
    """Run ``call`` as the workflow's participant of its batcher (when it has one)."""
    if slot is None:
        return call()
    batcher, order = slot
    with batcher.participant(order):
        return call()


def _error(message: str, param: str | None, status: int) -> dict[str, Any]:
    kind = "invalid_request_error" if status < 500 else "server_error"
    return {"error": {"message": message, "type": kind, "param": param, "code": None}}


def _handler_class(server: OpenAIServer) -> type[BaseHTTPRequestHandler]:
    """A request handler bound to ``server``."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "rft-openai"
        timeout = 600  # seconds an idle keep-alive connection is kept

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            self._answer("GET", None)

        def do_POST(self) -> None:  # noqa: N802
            length = self.headers.get("Content-Length")
            if length is None or not length.isdigit():
                self._send(HTTPStatus.LENGTH_REQUIRED,
                           _error("Content-Length header required", None, 411))
                return
            if int(length) > MAX_BODY_BYTES:
                self._send(HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                           _error(f"request body over {MAX_BODY_BYTES} bytes", None, 413))
                self.close_connection = True
                return
            self._answer("POST", self.rfile.read(int(length)))

        def _answer(self, method: str, body: bytes | None) -> None:
            started = time.monotonic()
            status, payload = server.handle(method, self.path, body)
            self._send(status, payload)
            if server.log_requests:
                log.info("%s %s -> %d (%.3f s)", method, self.path, status,
                         time.monotonic() - started)

        def _send(self, status: int, payload: dict[str, Any] | list[dict[str, Any]]) -> None:
            if isinstance(payload, list):  # a stream: server-sent events, then [DONE]
                events = [f"data: {json.dumps(chunk)}\n\n" for chunk in payload]
                data = "".join(events + ["data: [DONE]\n\n"]).encode("utf-8")
                kind = "text/event-stream"
            else:
                data, kind = json.dumps(payload).encode("utf-8"), "application/json"
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            """Silenced: requests are logged by :meth:`_answer` when asked."""

    return Handler


__all__ = ["BadRequest", "ChatRequest", "OpenAIServer", "completion_response",
           "parse_chat_request", "stream_chunks"]
