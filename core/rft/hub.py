"""Whether the Hugging Face Hub can be reached from here, and what its local cache holds.

Used before anything is loaded from a Hub id (a model, a dataset): on a machine that
cannot reach the Hub, ``transformers`` / ``datasets`` retry for about a minute and end in
a traceback; these checks let rft say it in one line within seconds instead.
"""

from __future__ import annotations

import functools
import os
import socket
from urllib.parse import urlsplit

HUB_CONNECT_TIMEOUT_S = 3.0
"""How long the reachability check of the Hub waits for a connection."""


def in_hub_cache(repo_id: str) -> bool:
    """The Hub model ``repo_id`` is in the local Hugging Face cache."""
    try:
        from huggingface_hub import try_to_load_from_cache

        return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
    except Exception:  # noqa: BLE001 (not a valid repo id: not cached)
        return False


@functools.lru_cache(maxsize=1)
def hub_unreachable() -> str | None:
    """Why the Hugging Face Hub cannot be reached from here, or ``None`` when it can."""
    for flag in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        if os.environ.get(flag, "").strip().lower() in ("1", "true", "yes", "on"):
            return f"{flag} is set"
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    parts = urlsplit(endpoint)
    host = parts.hostname or "huggingface.co"
    port = parts.port or (80 if parts.scheme == "http" else 443)
    try:
        socket.create_connection((host, port), timeout=HUB_CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        return f"{host}:{port}: {exc.strerror or exc}"
    return None


__all__ = ["HUB_CONNECT_TIMEOUT_S", "hub_unreachable", "in_hub_cache"]
