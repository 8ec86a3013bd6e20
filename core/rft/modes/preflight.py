"""Checks made just before a stage loads anything: every model it will load can be had.

A model path that is neither a local folder nor in the Hugging Face cache would be fetched
from the Hub; on a machine that cannot reach it, transformers retries for about a minute
and ends in a traceback. :func:`check_model_sources` says it in one line within seconds
instead (a local-looking path that does not exist is already a validation problem).
"""

from __future__ import annotations

import functools
import os
import socket
from collections.abc import Iterator
from urllib.parse import urlsplit

from rft.config.plan import RunPlan
from rft.config.validate import local_looking
from rft.errors import RftError

HUB_CONNECT_TIMEOUT_S = 3.0
"""How long the reachability check of the Hub waits for a connection."""


def model_paths(plan: RunPlan) -> Iterator[tuple[str, str]]:
    """``(dotted key, path)`` of every model the stage loads."""
    c = plan.config
    yield "model.model_path", c.model.model_path
    if c.explorer.rollout_model.model_path:
        yield "explorer.rollout_model.model_path", c.explorer.rollout_model.model_path
    if plan.preset.use_critic and c.model.critic_model_path:
        yield "model.critic_model_path", c.model.critic_model_path
    for i, aux in enumerate(c.explorer.auxiliary_models):
        if aux.model_path:
            yield f"explorer.auxiliary_models[{i}].model_path", aux.model_path


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


def model_source_problem(key: str, path: str) -> str | None:
    """One line when the model at ``path`` can be neither read here nor downloaded."""
    if os.path.isdir(os.path.expanduser(path)) or local_looking(path) or in_hub_cache(path):
        return None
    reason = hub_unreachable()
    if reason is None:
        return None
    return (f"{key}: {path!r} is not a local folder ({os.path.abspath(path)} does not exist) "
            f"and the Hugging Face Hub cannot be reached ({reason}); point it at a local "
            "model folder (`rft tiny-model DIR` builds a tiny one)")


def check_model_sources(plan: RunPlan) -> None:
    """Raise one :class:`RftError` listing every model of the stage that cannot be had."""
    problems = [p for key, path in model_paths(plan)
                if (p := model_source_problem(key, path)) is not None]
    if problems:
        raise RftError("\n".join(dict.fromkeys(problems)))
