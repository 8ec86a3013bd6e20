"""An OpenAI-compatible HTTP endpoint served from the explorer's model.

Agent workflows written against the OpenAI API talk to the rollout model through it::

    client = self.model.get_openai_client()
    reply = client.chat.completions.create(model=client.model_path, messages=messages)

=============================================  ==========================================
``POST /v1/chat/completions``                  ``messages``, ``n``, ``temperature``,
                                               ``top_p``, ``max_tokens`` /
                                               ``max_completion_tokens``, ``seed``,
                                               ``stop``, ``logprobs``; vLLM's extras
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
from rft.explorer.model_wrapper import CallBatcher, sampling_args

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

_KNOWN_FIELDS = frozenset({"model", "messages", "n", "stream", "logprobs", "top_logprobs",
                           "stop", "stop_token_ids", "presence_penalty", "frequency_penalty",
                           "return_token_ids"}) | _IGNORED_FIELDS | set(_SAMPLING_FIELDS)


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


def _typed(body: dict[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    """``body[key]`` when it has JSON type ``kind`` (``true`` is no number here)."""
    value = body[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        expected = "a number" if float in kinds else " or ".join(k.__name__ for k in kinds)
        raise BadRequest(f"{key} must be {expected}, got {value!r}", key)
    return value


def _message_text(index: int, message: Any) -> dict[str, Any]:
    """One message as ``{"role", "content"}`` with text content (text parts joined)."""
    where = f"messages[{index}]"
    if not isinstance(message, dict):
        raise BadRequest(f"{where} must be an object with role and content, got {message!r}",
                         where)
    role = message.get("role")
    if not isinstance(role, str) or not role:
        raise BadRequest(f"{where}.role must be a non-empty string, got {role!r}", f"{where}.role")
    content = message.get("content")
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
    unsupported = sorted(set(message) - {"role", "content", "name"})
    if unsupported:
        raise BadRequest(f"{where}: unsupported field(s) {', '.join(unsupported)}", where)
    return {**{k: v for k, v in message.items() if k == "name"}, "role": role,
            "content": content}


def parse_chat_request(body: Any, served_names: tuple[str, ...]) -> ChatRequest:
    """Check a chat-completions body; raise :class:`BadRequest` naming the bad field."""
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
    request = ChatRequest([_message_text(i, m) for i, m in enumerate(messages)])
    if body.get("stream"):
        raise BadRequest("stream: streaming responses are not supported", "stream")
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
                        completions: list[Completion]) -> dict[str, Any]:
    """The OpenAI ``chat.completion`` object of one request's completions."""
    tokenizer = model.tokenizer
    choices = []
    for index, c in enumerate(completions):
        choice: dict[str, Any] = {
            "index": index,
            "message": {"role": "assistant", "content": c.text},
            "logprobs": None,
            "finish_reason": c.finish_reason,
        }
        if request.logprobs:
            assert c.logprobs is not None
            content = []
            for token_id, logprob in zip(c.token_ids, c.logprobs.tolist(), strict=True):
                token = tokenizer.decode([token_id], skip_special_tokens=False)
                content.append({"token": token, "logprob": float(logprob),
                                "bytes": list(token.encode("utf-8")), "top_logprobs": []})
            choice["logprobs"] = {"content": content}
        if request.return_token_ids:
            choice["token_ids"] = list(c.token_ids)
        choices.append(choice)
    prompt_tokens = len(completions[0].prompt_token_ids) if completions else 0
    completion_tokens = sum(len(c.token_ids) for c in completions)
    response: dict[str, Any] = {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model.name,
        "choices": choices,
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    }
    if request.return_token_ids and completions:
        response["prompt_token_ids"] = list(completions[0].prompt_token_ids)
    return response


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
    """

    def __init__(self, model: ModelWrapper, *, host: str = "127.0.0.1", port: int = 0,
                 log_requests: bool = False) -> None:
        self.model = model
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

    def handle(self, method: str, path: str, body: bytes | None) -> tuple[int, dict[str, Any]]:
        """Answer one request: ``(HTTP status, JSON object)``."""
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
              raw: bytes) -> dict[str, Any]:
        try:
            body = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise BadRequest(f"request body is not valid JSON: {exc}") from exc
        request = parse_chat_request(body, self.served_names)
        sampling = dataclasses.replace(sampling_args(view.defaults, request.sampling),
                                       logprobs=True)  # the history needs them
        sampling.check()

        def call() -> list[Completion]:
            return view.chat_completions([request.messages], request.n, sampling)[0][0]

        completions = _in_slot(slot, call)
        return completion_response(view, request, completions)


def _in_slot(slot: tuple[CallBatcher, int] | None,
             call: Callable[[], list[Completion]]) -> list[Completion]:
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

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            """Silenced: requests are logged by :meth:`_answer` when asked."""

    return Handler


__all__ = ["BadRequest", "ChatRequest", "OpenAIServer", "completion_response",
           "parse_chat_request"]
