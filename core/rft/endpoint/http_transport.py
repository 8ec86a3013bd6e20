"""The uvicorn and Starlette pieces the endpoint runs on: a server class without signal
handling, an HTTP protocol that bounds how long a client may take to send its headers, the
response of an answer (JSON or server-sent events) and the wait for a client's disconnect."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Iterator
from typing import Any

log = logging.getLogger("rft.openai")


@contextlib.contextmanager
def _no_signals() -> Iterator[None]:
    yield


def timed_protocol(read_timeout_s: float) -> type:
    """uvicorn's HTTP protocol (httptools, else h11) closing a connection that has not
    delivered a request's headers within ``read_timeout_s`` of opening or of its previous
    answer (uvicorn itself waits for them forever). While a request is being answered the
    application bounds it (the body read of :func:`rft.endpoint.request_body.read_body`)."""
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


def server_class() -> type:
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


def quiet_uvicorn() -> None:
    """uvicorn's start / stop lines ("Started server process", "Shutting down", …) are
    debug detail here; warnings (malformed requests) and errors stay."""
    for name in ("uvicorn", "uvicorn.error"):
        logger = logging.getLogger(name)
        if logger.level == logging.NOTSET:
            logger.setLevel(logging.WARNING)


async def wait_disconnect(receive: Callable[..., Any]) -> None:
    """Return when the client has gone (the request body has been read already)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


def http_response(status: int, payload: Any, headers: dict[str, str]) -> Any:
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

