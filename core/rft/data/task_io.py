"""Reading the task pipeline's input files and writing its output taskset.

Inputs are JSON lines (``.jsonl``), JSON (``.json``: a list of objects, or one object a
line) or Parquet (``.parquet``) files, or folders of such files (read in name order).
The output is always JSON lines, written to a temporary file and renamed, so a reader
never sees half a taskset.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable

from rft.config.findings import local_looking
from rft.data.task_operator import TaskRow
from rft.errors import RftError

READABLE = (".jsonl", ".json", ".parquet")
"""Extensions the pipeline reads."""


def input_files(key: str, path: str) -> list[str]:
    """The data files ``path`` names (a file, or a folder's readable files); one
    :class:`RftError` line naming ``key`` when there are none."""
    path = os.path.expanduser(path)
    if os.path.isdir(path):
        files = sorted(os.path.join(path, f) for f in os.listdir(path)
                       if os.path.splitext(f)[1].lower() in READABLE)
        if not files:
            raise RftError(f"{key}: folder {path!r} holds no {', '.join(READABLE)} file")
        return files
    if not os.path.exists(path):
        raise RftError(f"{key}: path {path!r} does not exist (the task pipeline reads local "
                       f"{', '.join(READABLE)} files or folders)")
    if os.path.splitext(path)[1].lower() not in READABLE:
        raise RftError(f"{key}: {path!r} is not a {', '.join(READABLE)} file")
    return [path]


def read_file(key: str, path: str) -> list[TaskRow]:
    """The rows of one data file; a malformed line is one line naming file and line."""
    extension = os.path.splitext(path)[1].lower()
    if extension == ".parquet":
        import pyarrow.parquet as pq

        try:
            return [dict(row) for row in pq.read_table(path).to_pylist()]
        except Exception as exc:  # pyarrow's errors have no common base
            raise RftError(f"{key}: {path}: not a readable Parquet file ({exc})") from None
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    if extension == ".json" and text.lstrip().startswith("["):
        try:
            rows = json.loads(text)
        except json.JSONDecodeError as exc:
            raise RftError(f"{key}: {path}: line {exc.lineno}: malformed JSON ({exc.msg})") \
                from None
        return [_object(key, path, None, row) for row in rows]
    found: list[TaskRow] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            found.append(_object(key, path, number, json.loads(line)))
        except json.JSONDecodeError as exc:
            raise RftError(f"{key}: {path}: line {number}: malformed JSON ({exc.msg})") \
                from None
    return found


def _object(key: str, path: str, line: int | None, value: object) -> TaskRow:
    if not isinstance(value, dict):
        where = f"line {line}" if line is not None else "an element"
        raise RftError(f"{key}: {path}: {where} is not a JSON object")
    return value


def read_inputs(inputs: Iterable[tuple[str, str]]) -> list[TaskRow]:
    """Every row of the ``(dotted key, path)`` inputs, in order. A path that is not here
    and does not look local (a Hugging Face dataset id such as ``openai/gsm8k``) is read
    as a taskset is (:func:`rft.buffer.taskset.read_rows`, its ``train`` split)."""
    rows: list[TaskRow] = []
    for key, path in inputs:
        if not os.path.exists(os.path.expanduser(path)) and not local_looking(path):
            rows.extend(_read_dataset(key, path))
            continue
        for file in input_files(key, path):
            rows.extend(read_file(key, file))
    return rows


def _read_dataset(key: str, path: str) -> list[TaskRow]:
    """A hub dataset's rows; its error as one line naming ``key``."""
    from rft.buffer.taskset import TasksetError, read_rows
    from rft.config.schema import TasksetConfig

    try:
        return read_rows(TasksetConfig(name=key, path=path))
    except TasksetError as exc:
        raise RftError(f"{key}: {exc}") from None


def write_rows(path: str, rows: Iterable[TaskRow]) -> None:
    """Write ``rows`` as JSON lines to ``path`` (atomically: a temporary file renamed)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    partial = f"{path}.partial"
    with open(partial, "w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n")
    os.replace(partial, path)


__all__ = ["READABLE", "input_files", "read_file", "read_inputs", "write_rows"]
