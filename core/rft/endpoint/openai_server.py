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
``GET /health``                                ``200`` while serving (no key needed);
                                               in serve mode with the model version and
                                               the ``serve/*`` counters
``POST /feedback``, ``POST /commit``           serve mode only
                                               (:mod:`rft.endpoint.episodes`)
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

This module runs the server (its lifecycle, sessions, routing, authentication, the engine
threads); the rest is in modules of one job each: :mod:`rft.endpoint.settings` (the limits,
:class:`EndpointSettings`), :mod:`rft.endpoint.request_body` (the bounded body read),
:mod:`rft.endpoint.chat_handler` (a chat completion from a body),
:mod:`rft.endpoint.engine_threads` (engine calls in threads of their own),
:mod:`rft.endpoint.http_transport` (the uvicorn / Starlette pieces) and
:mod:`rft.endpoint.openai_protocol` (the request and response formats).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hmac
import json
import logging
import socket
import threading
import time
import uuid
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from rft.endpoint.chat_handler import chat_completion, models_listing
from rft.endpoint.engine_gate import EngineGate
from rft.endpoint.engine_threads import ENGINE_THREADS, in_thread
from rft.endpoint.episodes import EPISODE_HEADER, EpisodeLedger
from rft.endpoint.http_transport import http_response, quiet_uvicorn, server_class, timed_protocol
from rft.endpoint.openai_protocol import (
    BadRequest,
    ChatRequest,
    RequestLimits,
    completion_response,
    error_body,
    parse_chat_request,
    stream_chunks,
)
from rft.endpoint.request_body import Disconnected, read_body
from rft.endpoint.settings import (
    KEEP_ALIVE_S,
    MAX_BODY_BYTES,
    PROMPT_BYTES_OVERHEAD,
    PROMPT_BYTES_PER_TOKEN,
    READ_TIMEOUT_S,
    EndpointSettings,
    prompt_byte_limit,
)
from rft.engines.reply_parsing import ReplyParser
from rft.errors import RftError
from rft.experience import Experience
from rft.hosts import is_loopback, why_not_loopback

if TYPE_CHECKING:
    from rft.rollout.model_wrapper import ModelWrapper

log = logging.getLogger("rft.openai")

BACKLOG = 2048
"""Listen backlog: connections the kernel queues before the server accepts them."""

STOP_GRACE_S = 3.0
"""Seconds :meth:`OpenAIServer.stop` waits for open connections before closing them."""

_CHAT = "/v1/chat/completions"
_ROUTES = ("/health", "/v1/models", _CHAT)
_SERVE_ROUTES = ("/feedback", "/commit")


@dataclass
class _Session:
    view: weakref.ref
    """The workflow's :class:`ModelWrapper` view (sessions end with their workflow); its
    engine calls go through the view's call slot, as the workflow's direct calls do."""


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
    :param ledger: serve mode (:mod:`rft.endpoint.episodes`): every chat completion is
        recorded as experience candidates, ``POST /feedback`` and ``POST /commit`` are
        served; ``None``: neither.
    :param gate: serve mode: chat completions' engine calls hold it, so that a weight
        update waits for them (:class:`~rft.endpoint.engine_gate.EngineGate`).
    """

    def __init__(self, model: ModelWrapper, *, host: str = "127.0.0.1", port: int = 0,
                 log_requests: bool = False, reply_parser: ReplyParser | None = None,
                 settings: EndpointSettings | None = None,
                 ledger: EpisodeLedger | None = None, gate: EngineGate | None = None) -> None:
        self.model = model
        self.ledger = ledger
        self.gate = gate
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
                                http=timed_protocol(self.settings.read_timeout_s))
        quiet_uvicorn()
        server = server_class()(config)
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

    def handle(self, method: str, path: str, body: bytes | None, *,
               episode: str | None = None
               ) -> tuple[int, dict[str, Any] | list[dict[str, Any]]]:
        """Answer one request: ``(HTTP status, JSON object)``, or the chunks of a stream
        (a list, sent as server-sent events). Blocks while the engine works. ``episode``:
        the serve-mode episode a chat completion belongs to (its ``X-Rft-Episode-Id``)."""
        try:
            view, api_path = self._resolve(urlsplit(path).path)
            if api_path == "/health" and method == "GET":
                if self.ledger is None:
                    return HTTPStatus.OK, {"status": "ok"}
                return HTTPStatus.OK, {"status": "ok", "model_version": view.model_version,
                                       **self.ledger.counters()}
            if api_path == "/v1/models" and method == "GET":
                return HTTPStatus.OK, models_listing(view)
            if api_path == _CHAT and method == "POST":
                return HTTPStatus.OK, self._chat(view, body or b"", episode)
            if self.ledger is not None and api_path in _SERVE_ROUTES and method == "POST":
                route = self.ledger.feedback if api_path == "/feedback" else self.ledger.commit
                return HTTPStatus.OK, route(json_object(body or b"", api_path))
            routes = _ROUTES + (_SERVE_ROUTES if self.ledger is not None else ())
            if api_path in routes:
                raise BadRequest(f"method {method} is not allowed on {api_path}",
                                 status=HTTPStatus.METHOD_NOT_ALLOWED)
            serve = ", POST /feedback, POST /commit" if self.ledger is not None else ""
            raise BadRequest(f"no such endpoint: {method} {api_path} (served: POST "
                             f"{_CHAT}, GET /v1/models{serve})", status=HTTPStatus.NOT_FOUND)
        except BadRequest as exc:
            return exc.status, error_body(str(exc), exc.param, exc.status)
        except RftError as exc:  # engine refused the call (prompt too long, bad sampling)
            return HTTPStatus.BAD_REQUEST, error_body(str(exc), None, HTTPStatus.BAD_REQUEST)
        except Exception as exc:  # noqa: BLE001 - reported to the client, logged here
            log.exception("OpenAI API: %s %s failed", method, path)
            return (HTTPStatus.INTERNAL_SERVER_ERROR,
                    error_body(f"internal error: {type(exc).__name__}: {exc}", None,
                               HTTPStatus.INTERNAL_SERVER_ERROR))

    def _chat(self, view: ModelWrapper, body: bytes, episode: str | None
              ) -> dict[str, Any] | list[dict[str, Any]]:
        """A chat completion; in serve mode recorded in the ledger (its ``episode_id`` and
        ``model_version`` added to the answer), its engine call inside the gate."""
        ledger = self.ledger

        def record(response: dict[str, Any], experiences: list[Experience]) -> None:
            assert ledger is not None
            response["episode_id"] = ledger.record(response["id"], episode, experiences)
            response["model_version"] = experiences[0].model_version if experiences else 0

        with self.gate.calling() if self.gate is not None else contextlib.nullcontext():
            return chat_completion(view, body, reply_parser=self.reply_parser,
                                   served_names=self.served_names, max_n=self.settings.max_n,
                                   record=record if ledger is not None else None)

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
        except (Disconnected, ClientDisconnect):
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
            await http_response(status, payload, headers)(scope, receive, send)
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
            body = await read_body(request, receive, self.settings, self.model.engine,
                                   chat=path.endswith(_CHAT))
            if isinstance(body, tuple):
                return body
        if method == "POST" and path.endswith(_CHAT):
            assert self._slots is not None and self._stopping is not None
            episode = request.headers.get(EPISODE_HEADER)
            status, payload = await in_thread(
                lambda: self.handle(method, path, body, episode=episode), receive,
                self._slots, self._stopping)
            return status, payload, serve_headers(payload) if self.ledger is not None else {}
        if method == "POST" and path in _SERVE_ROUTES and self.ledger is not None:
            # a commit writes to the buffer: in a thread, so the event loop keeps answering
            status, payload = await asyncio.to_thread(self.handle, method, path, body)
        else:
            status, payload = self.handle(method, path, body)
        return status, payload, {}


def serve_headers(payload: Any) -> dict[str, str]:
    """The serve-mode headers of a chat completion: its response id, episode id and model
    version (a stream's: from its first chunk)."""
    first = payload[0] if isinstance(payload, list) and payload else payload
    if not isinstance(first, dict) or "id" not in first:
        return {}
    headers = {"x-rft-response-id": str(first["id"])}
    if "episode_id" in first:
        headers[EPISODE_HEADER] = str(first["episode_id"])
        headers["x-rft-model-version"] = str(first["model_version"])
    return headers


def json_object(raw: bytes, route: str) -> Any:
    """The JSON of a serve route's body; not JSON is a ``400``."""
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise BadRequest(f"{route.lstrip('/')}: the body is not valid JSON "
                         f"({type(exc).__name__})") from exc


__all__ = ["BACKLOG", "KEEP_ALIVE_S", "MAX_BODY_BYTES", "PROMPT_BYTES_OVERHEAD",
           "PROMPT_BYTES_PER_TOKEN", "READ_TIMEOUT_S", "BadRequest", "ChatRequest",
           "EndpointSettings", "OpenAIServer",
           "RequestLimits", "completion_response", "is_loopback", "parse_chat_request",
           "prompt_byte_limit", "stream_chunks"]
