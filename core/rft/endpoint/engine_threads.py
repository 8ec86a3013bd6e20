"""Engine calls off the endpoint's event loop: each in a thread of its own (at most
:data:`ENGINE_THREADS` at once), its answer dropped when the client goes away or the server
stops before it is ready."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

from rft.endpoint.http_transport import wait_disconnect
from rft.endpoint.openai_protocol import error_body
from rft.endpoint.request_body import Disconnected

ENGINE_THREADS = 256
"""Most engine calls the endpoint runs at once (each in a thread; the engine serialises
its own work, the runner's call batcher merges the calls of concurrent workflows)."""


async def in_thread(work: Callable[[], Any], receive: Callable[..., Any],
                    slots: asyncio.Semaphore, stopping_event: asyncio.Event) -> Any:
    """``work()`` in a thread of its own; returns early (raising
    :class:`~rft.endpoint.request_body.Disconnected`, or answering ``503``) when the
    client goes away or the server stops (``stopping_event``) meanwhile; ``slots`` bounds
    the threads running at once (:data:`ENGINE_THREADS`)."""
    loop = asyncio.get_running_loop()
    await slots.acquire()
    future: asyncio.Future[Any] = loop.create_future()

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
    gone = asyncio.ensure_future(wait_disconnect(receive))
    stopping = asyncio.ensure_future(stopping_event.wait())
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
        raise Disconnected
    return (HTTPStatus.SERVICE_UNAVAILABLE,
            error_body("the OpenAI API server is stopping", None, 503))
