"""Checks made just before a stage loads anything: every model it will load can be had.

A model path that is neither a local folder nor in the Hugging Face cache would be fetched
from the Hub; on a machine that cannot reach it, transformers retries for about a minute
and ends in a traceback. :func:`check_model_sources` says it in one line within seconds
instead (a local-looking path that does not exist is already a validation problem).

:func:`data_problems` (``rft validate``) reads the first rows of every data file a stage
reads — its tasksets, and the dataset of a train-only stage — and returns one line per
problem: a byte that is not UTF-8, malformed JSON, an empty file (each with file and
line), a row without the keys its format names.
"""

from __future__ import annotations

import functools
import os
import socket
from collections.abc import Iterator
from urllib.parse import urlsplit

from rft.buffer.taskset import TaskPlugins, TasksetError, preview_rows, row_to_task
from rft.config.plan import RunPlan
from rft.config.schema import TasksetConfig
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


def _readable_here(path: str | None) -> bool:
    """A local data path (a Hub dataset id is left to ``datasets``)."""
    if not path:
        return False
    return os.path.exists(os.path.expanduser(path)) or local_looking(path)


def data_problems(plan: RunPlan) -> list[str]:
    """One line per problem in the first rows of the stage's data files (see the module
    docstring); ``[]`` when they read."""
    problems: list[str] = []
    for taskset in (*plan.tasksets, *plan.eval_tasksets):
        if not _readable_here(taskset.config.path):
            continue
        reward = taskset.reward
        plugins = TaskPlugins(taskset.workflow.implementation, taskset.workflow.args,
                              reward.implementation if reward else None,
                              reward.args if reward else None)
        try:
            for index, row in enumerate(preview_rows(taskset.config)):
                row_to_task(taskset.config, row, index, plugins, is_eval=taskset.is_eval)
        except TasksetError as exc:
            problems.append(str(exc))
    buffer = plan.experience_buffer
    if plan.train_only and buffer.storage_type != "queue" and _readable_here(buffer.path):
        dataset = TasksetConfig(name=buffer.name, storage_type="sql" if buffer.storage_type ==
                                "sql" else "file", path=buffer.path, split=buffer.split,
                                subset_name=buffer.subset_name, format=buffer.format)
        fmt, where = buffer.format, f"experience buffer {buffer.name!r} ({buffer.path})"
        try:
            for index, row in enumerate(preview_rows(dataset)):
                row = {key: value for key, value in row.items() if value is not None}
                if fmt.prompt_type == "messages" and fmt.messages_key in row:
                    continue
                missing = [k for k in (fmt.prompt_key, fmt.response_key) if k not in row]
                if missing:
                    raise TasksetError(f"{where}: row {index} has no key {missing[0]!r}; "
                                       f"keys: {', '.join(row)}")
        except TasksetError as exc:
            problems.append(str(exc).replace(f"taskset {buffer.name!r} ({buffer.path})", where))
    return list(dict.fromkeys(problems))
