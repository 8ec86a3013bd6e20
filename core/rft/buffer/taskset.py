"""Reading tasksets: rows from files (through ``datasets``) or SQLite, checked and turned
into :class:`~rft.workflow.Task` objects.

``path`` may be a data file (``.jsonl``/``.json``/``.parquet``/``.csv``), a folder in the
layout ``datasets.load_dataset`` accepts (``split``, ``subset_name``), or — with
``storage_type: sql`` — a SQLite file whose table ``tasks`` (or ``split``) holds the rows.
Every problem is one line naming the taskset, the file, and where relevant the row and key.
"""

from __future__ import annotations

import json
import os
import sqlite3
from dataclasses import dataclass
from typing import Any

from rft.config.schema import TasksetConfig
from rft.errors import RftError
from rft.workflow import Task

FILE_BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}
"""``datasets`` builder for each data-file extension."""


class TasksetError(RftError):
    """A taskset cannot be read or a row lacks what its format needs."""


def _where(cfg: TasksetConfig) -> str:
    return f"taskset {cfg.name!r} ({cfg.path})"


def read_rows(cfg: TasksetConfig) -> list[dict[str, Any]]:
    """All rows of a taskset as dicts, in file order.

    :raises TasksetError: missing path, unreadable file, or zero rows.
    """
    if not cfg.path:
        raise TasksetError(f"taskset {cfg.name!r}: no path")
    path = os.path.expanduser(cfg.path)
    if cfg.storage_type == "sql":
        rows = _read_sqlite(cfg, path)
    else:
        rows = _read_with_datasets(cfg, path)
    if not rows:
        raise TasksetError(f"{_where(cfg)}: the taskset is empty (split {cfg.split!r})")
    return rows


def _read_with_datasets(cfg: TasksetConfig, path: str) -> list[dict[str, Any]]:
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    import datasets

    datasets.disable_progress_bars()
    extension = os.path.splitext(path)[1].lower()
    try:
        if os.path.isfile(path):
            if extension not in FILE_BUILDERS:
                raise TasksetError(f"{_where(cfg)}: unsupported file type {extension!r}; use "
                                   + ", ".join(FILE_BUILDERS))
            dataset = datasets.load_dataset(FILE_BUILDERS[extension], data_files=path,
                                            split="train")
        elif os.path.isdir(path):
            dataset = datasets.load_dataset(path, name=cfg.subset_name, split=cfg.split)
        else:
            raise TasksetError(f"{_where(cfg)}: no such file or folder")
    except TasksetError:
        raise
    except Exception as exc:  # datasets raises many types; name the file and the cause
        first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise TasksetError(f"{_where(cfg)}: cannot load: {first_line}") from exc
    return [dict(row) for row in dataset]


def _read_sqlite(cfg: TasksetConfig, path: str) -> list[dict[str, Any]]:
    if not os.path.isfile(path):
        raise TasksetError(f"{_where(cfg)}: no such SQLite file")
    try:
        with sqlite3.connect(path) as db:
            db.row_factory = sqlite3.Row
            tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            table = cfg.split if cfg.split in tables else "tasks"
            if table not in tables:
                raise TasksetError(f"{_where(cfg)}: no table {cfg.split!r} or 'tasks' "
                                   f"(tables: {', '.join(sorted(tables)) or 'none'})")
            return [dict(row) for row in db.execute(f'SELECT * FROM "{table}" ORDER BY rowid')]
    except sqlite3.Error as exc:
        raise TasksetError(f"{_where(cfg)}: cannot read SQLite file: {exc}") from exc


@dataclass
class TaskPlugins:
    """Resolved plugins a taskset's tasks carry (from validation)."""

    workflow: Any
    workflow_args: Any
    reward_fn: Any
    reward_args: Any


def row_to_task(cfg: TasksetConfig, row: dict[str, Any], index: int, plugins: TaskPlugins,
                *, is_eval: bool) -> Task:
    """One task from one row, following ``cfg.format``.

    :raises TasksetError: the row lacks the prompt / messages key.
    """
    fmt = cfg.format
    # ``datasets`` gives every row every column, filling gaps with None: treat None as absent
    row = {key: value for key, value in row.items() if value is not None}
    task = Task(raw=row, index=index, taskset=cfg.name, repeat_times=cfg.repeat_times or 1,
                sampling={k: v for k, v in vars(cfg.rollout_args).items() if v is not None},
                workflow_args=plugins.workflow_args, reward_fn=plugins.reward_fn,
                reward_args=plugins.reward_args, is_eval=is_eval)
    if fmt.prompt_type == "messages" and fmt.messages_key in row:
        messages = row[fmt.messages_key]
        task.messages = json.loads(messages) if isinstance(messages, str) else list(messages)
    else:
        if fmt.prompt_key not in row:
            also = (f" or {fmt.messages_key!r} (format.messages_key)"
                    if fmt.prompt_type == "messages" else "")
            raise TasksetError(f"{_where(cfg)}: row {index} has no key {fmt.prompt_key!r} "
                               f"(format.prompt_key){also}; keys: {', '.join(row)}")
        task.prompt = str(row[fmt.prompt_key])
        if fmt.system_prompt_key and row.get(fmt.system_prompt_key):
            task.system_prompt = str(row[fmt.system_prompt_key])
        else:
            task.system_prompt = fmt.system_prompt
    if fmt.response_key in row:
        task.truth = row[fmt.response_key]
    elif plugins.reward_fn is not None:
        raise TasksetError(f"{_where(cfg)}: row {index} has no key {fmt.response_key!r} "
                           f"(format.response_key) for the reward; keys: {', '.join(row)}")
    return task


def load_tasks(cfg: TasksetConfig, plugins: TaskPlugins, *, is_eval: bool) -> list[Task]:
    """Every row of a taskset as a task (all rows are checked up front)."""
    return [row_to_task(cfg, row, i, plugins, is_eval=is_eval)
            for i, row in enumerate(read_rows(cfg))]
