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
``GET /health``                                ``200`` while serving (no key needed)
=============================================  ==========================================

Each workflow's view of the model (:meth:`ModelWrapper.for_workflow
<rft.rollout.model_wrapper.ModelWrapper.for_workflow>`) has its own *session*: its client
uses ``/sessions/<id>/v1``, so the calls it makes are recorded in its own history, and they
join the concurrent workflows' engine calls like its direct calls do (through the view's
:class:`~rft.engines.call_batching.CallSlot`). Plain ``/v1`` is the model itself.

Replies become messages through the model's :class:`~rft.engines.reply_parsing.ReplyParser`
(``tool_call_parser``, ``reasoning_parser``): ``message.tool_calls`` and
``message.reasoning_content``. A streamed request gets the finished reply as
``chat.completion.chunk`` server-sent events (:func:`stream_chunks`).

The server is uvicorn (the ASGI server vLLM's own endpoint runs on; Starlette's request
and response handling) in a thread of its own with its own event loop, on ``127.0.0.1``
and a free port by default, with a listen backlog of :data:`BACKLOG`. Engine calls block:
each runs in a thread of its own (at most :data:`ENGINE_THREADS` at once), so the event
loop keeps accepting and answering while the engine works. uvicorn installs no signal
handler: SIGINT / SIGTERM stay the process's.

With an API key (:class:`EndpointSettings`, ``openai_api_key_env``) every request but
``/health`` needs ``Authorization: Bearer <key>``, else ``401``; serving beyond loopback
without a key is refused. Requests the endpoint cannot honour are answered in the OpenAI
error format (:mod:`rft.endpoint.openai_protocol`): ``400`` for a bad or unsupported field
or a prompt over the model's prompt limit (naming it; the endpoint never truncates),
``404`` for an unknown path, model or session, ``405`` for a wrong method, ``413`` for a
body over ``max_request_bytes``, ``503`` while the server stops; engine failures are
``500``. A chat body longer than the prompt limit could be in any tokenisation
(:func:`prompt_byte_limit`: :data:`PROMPT_BYTES_PER_TOKEN` bytes a token, plus
:data:`PROMPT_BYTES_OVERHEAD`) is a ``400`` on ``messages`` from its byte count alone,
before it is decoded or tokenised. A client that disconnects before its answer is ready
costs one debug line (the engine call it started finishes; its answer is dropped).

Slow and stalled clients are bounded (:class:`EndpointSettings`): a connection must
deliver a request's headers within ``read_timeout_s`` of opening (or of its previous
answer), and the request's body within ``read_timeout_s`` of its headers (``408``
otherwise, e.g. a body shorter than its ``Content-Length``); an idle keep-alive connection
is closed after ``keep_alive_s``. Each closes the connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import hmac
import json
import logging
import os
import socket
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http import HTTPStatus
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from rft.errors import RftError
from rft.engines.call_batching import sampling_args
from rft.engines.engine import Completion
from rft.endpoint.openai_protocol import (
    BadRequest,
    ChatRequest,
    RequestLimits,
    completion_response,
    error_body,
    parse_chat_request,
    stream_chunks,
)
from rft.engines.reply_parsing import AssistantReply, ReplyParser
from rft.hosts import is_loopback, why_not_loopback

if TYPE_CHECKING:
    from rft.config.schema import InferenceModelConfig
    from rft.rollout.model_wrapper import ModelWrapper

log = logging.getLogger("rft.openai")

MAX_BODY_BYTES = 32 * 1024 * 1024
"""Largest request body accepted by default (``openai_api_max_request_bytes``)."""

BACKLOG = 2048
"""Listen backlog: connections the kernel queues before the server accepts them."""

ENGINE_THREADS = 256
"""Most engine calls the endpoint runs at once (each in a thread; the engine serialises
its own work, the runner's call batcher merges the calls of concurrent workflows)."""

READ_TIMEOUT_S = 60.0
"""Default seconds a client has to send a request's headers, and then its body."""

KEEP_ALIVE_S = 30.0
"""Default seconds an idle keep-alive connection stays open."""

PROMPT_BYTES_PER_TOKEN = 64
"""Bytes of request body allowed per prompt token before tokenising: generous (a token
is a few UTF-8 bytes; JSON's ``\\uXXXX`` escapes take 6 a character, 12 a surrogate
pair), so no prompt within the limit is refused on its size."""

PROMPT_BYTES_OVERHEAD = 1024 * 1024
"""Bytes of request body allowed besides the prompt's tokens (tool specs, fields)."""

STOP_GRACE_S = 3.0
"""Seconds :meth:`OpenAIServer.stop` waits for open connections before closing them."""

_CHAT = "/v1/chat/completions"
_ROUTES = ("/health", "/v1/models", _CHAT)


def prompt_byte_limit(prompt_tokens: int | None) -> int | None:
    """Largest chat body that could hold a prompt of ``prompt_tokens`` tokens:
    ``PROMPT_BYTES_PER_TOKEN · prompt_tokens + PROMPT_BYTES_OVERHEAD`` (``None``: no
    prompt limit, no bound)."""
    if prompt_tokens is None:
        return None
    return PROMPT_BYTES_PER_TOKEN * prompt_tokens + PROMPT_BYTES_OVERHEAD


@dataclass(frozen=True)
class EndpointSettings:
    """Access and size limits of an endpoint."""

    api_key: str | None = None
    """Key clients send as ``Authorization: Bearer <key>``; ``None``: no authentication
    (allowed on loopback only)."""
    max_n: int = 64
    """Most choices per request (``n``)."""
    max_request_bytes: int = MAX_BODY_BYTES
    """Largest request body (``413`` beyond)."""
    read_timeout_s: float = READ_TIMEOUT_S
    """Seconds a client has to send a request's headers (from the connection's start or
    its previous answer; then the connection is closed), and then its body (``408``)."""
    keep_alive_s: float = KEEP_ALIVE_S
    """Seconds an idle keep-alive connection stays open (uvicorn's
    ``timeout_keep_alive``)."""

    @classmethod
    def of(cls, model: InferenceModelConfig) -> EndpointSettings:
        """The settings of an inference-model config (``openai_api_key_env``,
        ``openai_api_max_n``, ``openai_api_max_request_bytes``); the key is read from the
        environment variable now. Raises :class:`RftError` when it names an unset one."""
        name = model.openai_api_key_env
        key = None
        if name:
            key = os.environ.get(name)
            if not key:
                raise RftError(f"openai_api_key_env: environment variable {name} is not set "
                               "(or empty) in this process; the OpenAI API needs its key")
        return cls(api_key=key, max_n=model.openai_api_max_n,
                   max_request_bytes=model.openai_api_max_request_bytes)


@dataclass
class _Session:
    view: weakref.ref
    """The workflow's :class:`ModelWrapper` view (sessions end with their workflow); its
    engine calls go through the view's call slot, as the workflow's direct calls do."""


class _Disconnected(Exception):
    """The client went away before its answer was ready."""


class OpenAIServer:
    """The endpoint of one model (see the module docstring).

    :param model: the model it serves (its root view answers ``/v1``).
    :param host: address to bind; ``127.0.0.1`` keeps it on this machine. Any other needs
        an API key.
    :param port: port to bind; ``0`` picks a free one.
    :param log_requests: log every request (method, path, status, seconds).
    :param reply_parser: how replies become messages (tool calls, reasoning); default:
        the text is the content.
    :param settings: API key and request limits; default: no key, default limits.
    """

    def __init__(self, model: ModelWrapper, *, host: str = "127.0.0.1", port: int = 0,
                 log_requests: bool = False, reply_parser: ReplyParser | None = None,
                 settings: EndpointSettings | None = None) -> None:
        self.model = model
        self.reply_parser = reply_parser or ReplyParser()
        self.host = host
        self.port = port
        self.log_requests = log_requests
        self.settings = settings or EndpointSettings()
        self._sessions: dict[str, _Session] = {}
        self._lock = threading.Lock()
        self._server: Any = None  # uvicorn.Server while serving
        self._socket: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._slots: asyncio.Semaphore | None = None

    # ---- lifecycle ----------------------------------------------------------------------

    @property
    def api_key(self) -> str | None:
        """The key clients must send (``None``: none needed)."""
        return self.settings.api_key

    @property
    def address(self) -> str:
        """``http://host:port`` a client on this machine uses."""
        if self._server is None:
            raise RftError(f"OpenAI API server of model {self.model.name!r} is not running")
        host = self.host
        if host in ("", "0.0.0.0"):
            host = "127.0.0.1"
        elif host == "::":
            host = "::1"
        return f"http://[{host}]:{self.port}" if ":" in host else f"http://{host}:{self.port}"

    @property
    def served_names(self) -> tuple[str, ...]:
        """Names ``model`` may take in a request: the model's name and its last path part."""
        name = self.model.name
        short = name.rstrip("/").rsplit("/", 1)[-1]
        return (name, short) if short != name else (name,)

    def start(self) -> None:
        """Bind and serve in a background thread; a port in use is a one-line error, and so
        is a host beyond loopback without an API key."""
        if self._server is not None:
            return
        outside = None if self.settings.api_key else why_not_loopback(self.host)
        if outside is not None:
            raise RftError(f"OpenAI API of model {self.model.name!r}: refusing to serve on "
                           f"{self.host or 'every interface'} without an API key ({outside}; "
                           "set openai_api_key_env, or openai_api_host: 127.0.0.1)")
        sock = self._bind()
        import uvicorn

        keep_alive: Any = self.settings.keep_alive_s  # seconds; uvicorn types it int, uses float
        config = uvicorn.Config(self._asgi, interface="asgi3", log_config=None,
                                access_log=False, proxy_headers=False, lifespan="off",
                                ws="none", loop="asyncio",
                                backlog=BACKLOG, timeout_graceful_shutdown=int(STOP_GRACE_S),
                                timeout_keep_alive=keep_alive,
                                http=_timed_protocol(self.settings.read_timeout_s))
        _quiet_uvicorn()
        server = _server_class()(config)
        self._socket, self._server = sock, server
        self.port = sock.getsockname()[1]
        ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, args=(server, sock, ready),
                                        name="rft-openai-api", daemon=True)
        self._thread.start()
        ready.wait(timeout=30)
        if not server.started:
            self._server = None
            sock.close()
            raise RftError(f"OpenAI API of model {self.model.name!r}: the server did not "
                           f"start on {self.host}:{self.port}")
        log.info("OpenAI API of %s at %s/v1%s", self.model.name, self.address,
                 " (API key required)" if self.settings.api_key else "")

    def _bind(self) -> socket.socket:
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.host, self.port))
            sock.listen(BACKLOG)
        except OSError as exc:
            sock.close()
            reason = ("address already in use" if exc.errno == errno.EADDRINUSE
                      else exc.strerror or str(exc))
            raise RftError(f"OpenAI API of model {self.model.name!r}: cannot listen on "
                           f"{self.host}:{self.port}: {reason} (set openai_api_port to a free "
                           "port, or 0 for any)") from exc
        return sock

    def _serve(self, server: Any, sock: socket.socket, ready: threading.Event) -> None:
        """The server thread: an event loop of its own running uvicorn on ``sock``."""
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        self._loop = loop
        self._stopping = asyncio.Event()
        self._slots = asyncio.Semaphore(ENGINE_THREADS)
        server.on_started = ready.set
        try:
            loop.run_until_complete(server.serve(sockets=[sock]))
        except BaseException as exc:  # noqa: BLE001 - SystemExit on a failed start, too
            log.error("OpenAI API of %s stopped: %s: %s", self.model.name,
                      type(exc).__name__, exc)
        finally:
            ready.set()
            with contextlib.suppress(Exception):
                loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    def stop(self) -> None:
        """Stop serving and release the port (idempotent). Requests still waiting on the
        engine are answered ``503``; the engine calls themselves finish in their threads."""
        server, self._server = self._server, None
        if server is None:
            return
        loop, stopping = self._loop, self._stopping
        if loop is not None and stopping is not None:
            with contextlib.suppress(RuntimeError):  # the loop has already ended
                loop.call_soon_threadsafe(stopping.set)
        server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=STOP_GRACE_S + 2)
            if self._thread.is_alive():
                server.force_exit = True
                self._thread.join(timeout=2)
        if self._socket is not None:
            self._socket.close()
        log.debug("OpenAI API of %s stopped", self.model.name)

    def __enter__(self) -> OpenAIServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- sessions -----------------------------------------------------------------------

    def open_session(self, view: ModelWrapper) -> str:
        """Register a workflow's view (its requests call the engine as the view does)."""
        session_id = uuid.uuid4().hex[:16]

        def forget(_: weakref.ref, key: str = session_id) -> None:
            with self._lock:
                self._sessions.pop(key, None)

        with self._lock:
            self._sessions[session_id] = _Session(weakref.ref(view, forget))
        return session_id

    def session_count(self) -> int:
        """Open sessions (views still alive)."""
        with self._lock:
            return len(self._sessions)

    def _resolve(self, path: str) -> tuple[ModelWrapper, str]:
        """The view a path addresses and the API path (``/v1/…``)."""
        if not path.startswith("/sessions/"):
            return self.model, path
        _, _, session_id, *rest = path.split("/", 3)
        with self._lock:
            session = self._sessions.get(session_id)
        view = session.view() if session is not None else None
        if session is None or view is None:
            raise BadRequest(f"session {session_id!r} is unknown or closed (its workflow has "
                             "finished)", status=HTTPStatus.NOT_FOUND)
        return view, "/" + (rest[0] if rest else "")

    # ---- requests -----------------------------------------------------------------------

    def handle(self, method: str, path: str, body: bytes | None
               ) -> tuple[int, dict[str, Any] | list[dict[str, Any]]]:
        """Answer one request: ``(HTTP status, JSON object)``, or the chunks of a stream
        (a list, sent as server-sent events). Blocks while the engine works."""
        try:
            view, api_path = self._resolve(urlsplit(path).path)
            if api_path == "/health" and method == "GET":
                return HTTPStatus.OK, {"status": "ok"}
            if api_path == "/v1/models" and method == "GET":
                return HTTPStatus.OK, self._models(view)
            if api_path == _CHAT and method == "POST":
                return HTTPStatus.OK, self._chat(view, body or b"")
            if api_path in _ROUTES:
                raise BadRequest(f"method {method} is not allowed on {api_path}",
                                 status=HTTPStatus.METHOD_NOT_ALLOWED)
            raise BadRequest(f"no such endpoint: {method} {api_path} (served: POST "
                             f"{_CHAT}, GET /v1/models)", status=HTTPStatus.NOT_FOUND)
        except BadRequest as exc:
            return exc.status, error_body(str(exc), exc.param, exc.status)
        except RftError as exc:  # engine refused the call (prompt too long, bad sampling)
            return HTTPStatus.BAD_REQUEST, error_body(str(exc), None, HTTPStatus.BAD_REQUEST)
        except Exception as exc:  # noqa: BLE001 - reported to the client, logged here
            log.exception("OpenAI API: %s %s failed", method, path)
            return (HTTPStatus.INTERNAL_SERVER_ERROR,
                    error_body(f"internal error: {type(exc).__name__}: {exc}", None,
                               HTTPStatus.INTERNAL_SERVER_ERROR))

    def _models(self, view: ModelWrapper) -> dict[str, Any]:
        return {"object": "list", "data": [{"id": view.name, "object": "model",
                                            "created": 0, "owned_by": "rft"}]}

    def _chat(self, view: ModelWrapper, raw: bytes) -> dict[str, Any] | list[dict[str, Any]]:
        """A ``chat.completion``, or its chunks when the request streams."""
        try:
            body = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise BadRequest(f"request body is not valid JSON: {exc}") from exc
        except RecursionError as exc:
            raise BadRequest("request body is not valid JSON: nested too deeply") from exc
        engine = view.engine
        limits = RequestLimits(max_n=self.settings.max_n,
                               max_tokens=getattr(engine, "max_response_tokens", None))
        request = parse_chat_request(body, self.served_names, self.reply_parser, limits)
        sampling = dataclasses.replace(sampling_args(view.defaults, request.sampling),
                                       logprobs=True)  # the history needs them
        sampling.check()
        self._check_prompt(view, request)

        def parse(completion: Completion) -> AssistantReply:
            return self.reply_parser.parse(completion.text, call_tools=request.call_tools,
                                           parallel=request.parallel_tool_calls)

        results = view.chat_completions([request.messages], request.n, sampling,
                                        tools=request.tools, parse=parse)
        completions = results.completions[0]
        truncated = next((c for c in completions if c.prompt_truncated), None)
        if truncated is not None:  # a continuation longer than its canonical rendering
            raise _prompt_too_long(None, view)
        replies = results.replies[0]
        assert replies is not None
        response = completion_response(view, request, completions, replies,
                                       with_reasoning=self.reply_parser.reasoning is not None)
        return stream_chunks(response, request) if request.stream else response

    @staticmethod
    def _check_prompt(view: ModelWrapper, request: ChatRequest) -> None:
        """A prompt over the model's limit is refused, never truncated."""
        limit_of = getattr(view.engine, "prompt_limit", None)
        limit = limit_of() if limit_of is not None else None
        if limit is None:
            return
        ids = view.engine.apply_chat_template(request.messages, tools=request.tools)
        if len(ids) > limit:
            raise _prompt_too_long(len(ids), view)

    # ---- HTTP (uvicorn, in the server thread) --------------------------------------------

    async def _asgi(self, scope: dict[str, Any], receive: Callable[..., Any],
                    send: Callable[..., Any]) -> None:
        """The ASGI application: authentication, bounded body, the answer; a client that
        went away costs one debug line."""
        if scope["type"] != "http":
            return
        from starlette.requests import ClientDisconnect, Request

        request = Request(scope, receive)
        method, path = request.method, request.url.path
        started = time.monotonic()
        try:
            status, payload, headers = await self._answer(request, receive)
        except (_Disconnected, ClientDisconnect):
            log.debug("OpenAI API: client of %s %s disconnected before the answer", method, path)
            return
        except asyncio.CancelledError:  # the server is stopping
            log.debug("OpenAI API: %s %s cancelled by the server's stop", method, path)
            return
        except Exception as exc:  # noqa: BLE001 - never a traceback per request in the log
            log.error("OpenAI API: %s %s failed: %s: %s", method, path, type(exc).__name__, exc)
            status, headers = HTTPStatus.INTERNAL_SERVER_ERROR, {}
            payload = error_body(f"internal error: {type(exc).__name__}: {exc}", None, 500)
        try:
            await _response(status, payload, headers)(scope, receive, send)
        except (OSError, ClientDisconnect):
            log.debug("OpenAI API: client of %s %s disconnected during the answer", method, path)
            return
        if self.log_requests:
            log.info("%s %s -> %d (%.3f s)", method, path, status, time.monotonic() - started)

    async def _answer(self, request: Any, receive: Callable[..., Any]
                      ) -> tuple[int, Any, dict[str, str]]:
        method, path = request.method, request.url.path
        key = self.settings.api_key
        if key is not None and path != "/health":
            sent = request.headers.get("authorization", "")
            if not hmac.compare_digest(sent.encode(), f"Bearer {key}".encode()):
                message = ("missing API key: send 'Authorization: Bearer <key>'" if not sent
                           else "wrong API key")
                return (HTTPStatus.UNAUTHORIZED,
                        error_body(message, None, HTTPStatus.UNAUTHORIZED, "invalid_api_key"),
                        {"www-authenticate": "Bearer"})
        body: bytes | None = None
        if method == "POST":
            body = await self._read_body(request, receive, chat=path.endswith(_CHAT))
            if isinstance(body, tuple):
                return body
        if method == "POST" and path.endswith(_CHAT):
            status, payload = await self._in_thread(
                lambda: self.handle(method, path, body), receive)
        else:
            status, payload = self.handle(method, path, body)
        return status, payload, {}

    async def _read_body(self, request: Any, receive: Callable[..., Any], *, chat: bool) -> Any:
        """The body, or the answer refusing it: ``413`` over ``max_request_bytes``; for a
        chat, ``400`` on ``messages`` over :func:`prompt_byte_limit` (judged on
        ``Content-Length`` before reading, else while reading: nothing is decoded or
        tokenised); ``408`` when it has not all arrived within ``read_timeout_s``. The rest of
        a body refused with ``400`` is read and dropped (up to ``max_request_bytes``), so
        the client gets its answer rather than a broken pipe."""
        prompt_bytes = self._prompt_bytes() if chat else None
        length = request.headers.get("content-length")
        declared = int(length) if length is not None and length.isdigit() else None
        refusal = self._refuse_size(declared, prompt_bytes) if declared is not None else None
        if refusal is not None and refusal[0] == HTTPStatus.REQUEST_ENTITY_TOO_LARGE:
            return refusal
        timeout = self.settings.read_timeout_s
        deadline = asyncio.get_running_loop().time() + timeout
        chunks: list[bytes] = []
        size = 0
        while True:
            left = deadline - asyncio.get_running_loop().time()
            try:
                message = await asyncio.wait_for(receive(), timeout=max(left, 0.0))
            except TimeoutError:
                if refusal is not None:  # the answer is known: no need for the rest
                    return refusal[0], refusal[1], {"connection": "close"}
                return (HTTPStatus.REQUEST_TIMEOUT,
                        error_body(f"request body incomplete after {timeout:g} s ({size} bytes "
                                   f"of {declared if declared is not None else 'unknown'} "
                                   "arrived)", None, HTTPStatus.REQUEST_TIMEOUT),
                        {"connection": "close"})
            if message["type"] == "http.disconnect":
                raise _Disconnected
            chunk = message.get("body", b"")
            size += len(chunk)
            refusal = refusal or self._refuse_size(size, prompt_bytes)
            if refusal is not None and (refusal[0] == HTTPStatus.REQUEST_ENTITY_TOO_LARGE
                                        or size > self.settings.max_request_bytes):
                return refusal[0], refusal[1], {"connection": "close"}
            if refusal is None:
                chunks.append(chunk)
            if not message.get("more_body", False):
                return refusal if refusal is not None else b"".join(chunks)

    def _refuse_size(self, size: int, prompt_bytes: int | None
                     ) -> tuple[int, dict[str, Any], dict[str, str]] | None:
        """The answer refusing a body of ``size`` bytes, or ``None`` while it may be read."""
        limit = self.settings.max_request_bytes
        if size > limit:
            return (HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                    error_body(f"request body over {limit} bytes "
                               "(openai_api_max_request_bytes)", None, 413),
                    {"connection": "close"})
        if prompt_bytes is not None and size > prompt_bytes:
            engine = self.model.engine
            return (HTTPStatus.BAD_REQUEST,
                    error_body(f"messages: the request body is over {prompt_bytes} bytes, more "
                               f"than any prompt within this model's prompt limit of "
                               f"{engine.prompt_limit()} tokens can take "
                               f"({PROMPT_BYTES_PER_TOKEN} bytes a token + "
                               f"{PROMPT_BYTES_OVERHEAD} for the other fields; "
                               f"max_prompt_tokens={engine.max_prompt_tokens}, "
                               f"max_model_len={engine.effective_max_model_len()}); the OpenAI "
                               "API does not truncate prompts", "messages",
                               HTTPStatus.BAD_REQUEST),
                    {})
        return None

    def _prompt_bytes(self) -> int | None:
        """:func:`prompt_byte_limit` of the served model's prompt limit (sessions share
        its engine)."""
        limit_of = getattr(self.model.engine, "prompt_limit", None)
        return prompt_byte_limit(limit_of() if limit_of is not None else None)

    async def _in_thread(self, work: Callable[[], Any], receive: Callable[..., Any]) -> Any:
        """``work()`` in a thread of its own; returns early (raising :class:`_Disconnected`,
        or answering ``503``) when the client goes away or the server stops meanwhile."""
        loop = asyncio.get_running_loop()
        assert self._slots is not None and self._stopping is not None
        await self._slots.acquire()
        future: asyncio.Future[Any] = loop.create_future()
        slots = self._slots

        def settle(outcome: tuple[bool, Any]) -> None:
            slots.release()
            if not future.done():
                if outcome[0]:
                    future.set_result(outcome[1])
                else:
                    future.set_exception(outcome[1])

        def run() -> None:
            try:
                outcome: tuple[bool, Any] = (True, work())
            except BaseException as exc:  # noqa: BLE001 - handed to the event loop
                outcome = (False, exc)
            with contextlib.suppress(RuntimeError):  # the loop has ended: nobody waits
                loop.call_soon_threadsafe(settle, outcome)

        try:
            threading.Thread(target=run, name="rft-openai-call", daemon=True).start()
        except BaseException:
            slots.release()
            raise
        gone = asyncio.ensure_future(_disconnect(receive))
        stopping = asyncio.ensure_future(self._stopping.wait())
        try:
            await asyncio.wait({future, gone, stopping}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            future.cancel()
            raise
        finally:
            gone.cancel()
            stopping.cancel()
        if future.done():
            return future.result()
        future.cancel()  # nobody waits for the answer any more: the thread's is dropped
        if gone.done() and not gone.cancelled():
            raise _Disconnected
        return (HTTPStatus.SERVICE_UNAVAILABLE,
                error_body("the OpenAI API server is stopping", None, 503))


@contextlib.contextmanager
def _no_signals() -> Iterator[None]:
    yield


def _timed_protocol(read_timeout_s: float) -> type:
    """uvicorn's HTTP protocol (httptools, else h11) closing a connection that has not
    delivered a request's headers within ``read_timeout_s`` of opening or of its previous
    answer (uvicorn itself waits for them forever). While a request is being answered the
    application bounds it (the body read of :meth:`OpenAIServer._read_body`)."""
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    # AutoHTTPProtocol is chosen at import time (httptools or h11), a variable to mypy
    class TimedHTTPProtocol(AutoHTTPProtocol):  # type: ignore[misc, valid-type]
        _rft_since = 0.0
        _rft_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._rft_since = self.loop.time()
            self._rft_timer = self.loop.call_later(read_timeout_s, self._rft_check)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._rft_since = self.loop.time()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._rft_timer is not None:
                self._rft_timer.cancel()
            super().connection_lost(exc)

        def _rft_check(self) -> None:
            """Close the connection when it has waited for headers too long."""
            self._rft_timer = None
            if self.transport.is_closing():
                return
            waiting = self.cycle is None or self.cycle.response_complete  # no request in hand
            due = self._rft_since + read_timeout_s
            now = self.loop.time()
            if waiting and now >= due:
                log.debug("OpenAI API: closing a connection that sent no complete request "
                          "headers within %g s", read_timeout_s)
                self.transport.close()
                return
            self._rft_timer = self.loop.call_later(
                due - now if waiting else read_timeout_s, self._rft_check)

    return TimedHTTPProtocol


_SERVER_CLASS: type | None = None


def _server_class() -> type:
    """uvicorn's ``Server`` without signal handling (the process keeps its own SIGINT /
    SIGTERM handlers), telling when it has started."""
    global _SERVER_CLASS
    if _SERVER_CLASS is None:
        import uvicorn

        class Server(uvicorn.Server):
            on_started: Callable[[], None] | None = None

            def capture_signals(self) -> Any:  # uvicorn >= 0.29
                return _no_signals()

            def install_signal_handlers(self) -> None:  # older uvicorn
                return None

            async def startup(self, sockets: Any = None) -> None:
                await super().startup(sockets=sockets)
                if self.on_started is not None:
                    self.on_started()

        _SERVER_CLASS = Server
    return _SERVER_CLASS


def _quiet_uvicorn() -> None:
    """uvicorn's start / stop lines ("Started server process", "Shutting down", …) are
    debug detail here; warnings (malformed requests) and errors stay."""
    for name in ("uvicorn", "uvicorn.error"):
        logger = logging.getLogger(name)
        if logger.level == logging.NOTSET:
            logger.setLevel(logging.WARNING)


async def _disconnect(receive: Callable[..., Any]) -> None:
    """Return when the client has gone (the request body has been read already)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


def _response(status: int, payload: Any, headers: dict[str, str]) -> Any:
    """A Starlette response: JSON, or server-sent events for a stream's chunks."""
    from starlette.responses import Response

    if isinstance(payload, list):  # a stream: server-sent events, then [DONE]
        events = [f"data: {json.dumps(chunk)}\n\n" for chunk in payload]
        data = "".join(events + ["data: [DONE]\n\n"]).encode("utf-8")
        return Response(data, status_code=status, headers={**headers,
                                                           "cache-control": "no-cache"},
                        media_type="text/event-stream")
    return Response(json.dumps(payload).encode("utf-8"), status_code=status, headers=headers,
                    media_type="application/json")


def _prompt_too_long(tokens: int | None, view: ModelWrapper) -> BadRequest:
    """The ``400`` of a prompt over the model's limit (``tokens``: its length, when known
    before the engine call)."""
    engine = view.engine
    limit = engine.prompt_limit()
    size = f"is {tokens} tokens" if tokens is not None else "(continuing recorded turns) is"
    return BadRequest(f"messages: the prompt {size}, over this model's prompt "
                      f"limit of {limit} (max_prompt_tokens={engine.max_prompt_tokens}, "
                      f"max_model_len={engine.effective_max_model_len()}); the OpenAI API "
                      "does not truncate prompts", "messages")


__all__ = ["BACKLOG", "KEEP_ALIVE_S", "PROMPT_BYTES_OVERHEAD", "PROMPT_BYTES_PER_TOKEN",
           "READ_TIMEOUT_S", "BadRequest", "ChatRequest", "EndpointSettings", "OpenAIServer",
           "RequestLimits", "completion_response", "is_loopback", "parse_chat_request",
           "prompt_byte_limit", "stream_chunks"]
