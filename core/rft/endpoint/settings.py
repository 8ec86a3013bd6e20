"""The access and size limits of an OpenAI endpoint (:class:`EndpointSettings`, read from an
inference model's ``openai_api_*`` fields) and their defaults."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rft.errors import RftError

if TYPE_CHECKING:
    from rft.config.schema import InferenceModelConfig

MAX_BODY_BYTES = 32 * 1024 * 1024
"""Largest request body accepted by default (``openai_api_max_request_bytes``)."""

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
