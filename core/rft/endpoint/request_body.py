"""Reading a request's body within the endpoint's limits: ``413`` over
``max_request_bytes``, ``400`` for a chat body longer than any prompt within the model's
prompt limit could be (judged on its size alone, before decoding), ``408`` for a body that
does not arrive in time."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

from rft.endpoint.openai_protocol import error_body
from rft.endpoint.settings import (
    PROMPT_BYTES_OVERHEAD,
    PROMPT_BYTES_PER_TOKEN,
    EndpointSettings,
    prompt_byte_limit,
)

if TYPE_CHECKING:
    from rft.engines.engine import InferenceEngine


class Disconnected(Exception):
    """The client went away before its answer was ready."""


async def read_body(request: Any, receive: Callable[..., Any], settings: EndpointSettings,
                    engine: InferenceEngine, *, chat: bool) -> Any:
    """The body, or the answer refusing it: ``413`` over ``max_request_bytes``; for a
    chat, ``400`` on ``messages`` over :func:`prompt_byte_limit` (judged on
    ``Content-Length`` before reading, else while reading: nothing is decoded or
    tokenised); ``408`` when it has not all arrived within ``read_timeout_s``. The rest of
    a body refused with ``400`` is read and dropped (up to ``max_request_bytes``), so
    the client gets its answer rather than a broken pipe."""
    prompt_bytes = prompt_bytes_of(engine) if chat else None
    length = request.headers.get("content-length")
    declared = int(length) if length is not None and length.isdigit() else None
    refusal = (refuse_size(declared, prompt_bytes, settings, engine)
               if declared is not None else None)
    if refusal is not None and refusal[0] == HTTPStatus.REQUEST_ENTITY_TOO_LARGE:
        return refusal
    timeout = settings.read_timeout_s
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
            raise Disconnected
        chunk = message.get("body", b"")
        size += len(chunk)
        refusal = refusal or refuse_size(size, prompt_bytes, settings, engine)
        if refusal is not None and (refusal[0] == HTTPStatus.REQUEST_ENTITY_TOO_LARGE
                                    or size > settings.max_request_bytes):
            return refusal[0], refusal[1], {"connection": "close"}
        if refusal is None:
            chunks.append(chunk)
        if not message.get("more_body", False):
            return refusal if refusal is not None else b"".join(chunks)


def refuse_size(size: int, prompt_bytes: int | None, settings: EndpointSettings,
                engine: InferenceEngine) -> tuple[int, dict[str, Any], dict[str, str]] | None:
    """The answer refusing a body of ``size`` bytes, or ``None`` while it may be read."""
    limit = settings.max_request_bytes
    if size > limit:
        return (HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                error_body(f"request body over {limit} bytes "
                           "(openai_api_max_request_bytes)", None, 413),
                {"connection": "close"})
    if prompt_bytes is not None and size > prompt_bytes:
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


def prompt_bytes_of(engine: InferenceEngine) -> int | None:
    """:func:`prompt_byte_limit` of the served model's prompt limit (sessions share
    its engine)."""
    limit_of = getattr(engine, "prompt_limit", None)
    return prompt_byte_limit(limit_of() if limit_of is not None else None)
