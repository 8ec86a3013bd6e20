"""Reading tasksets: rows from files (through ``datasets``) or SQLite, checked and turned
into :class:`~rft.workflow.Task` objects.

``path`` takes what ``datasets.load_dataset`` takes, as Trinity-RFT's guide says:

- a data file (``.jsonl``/``.json``/``.parquet``/``.csv``; ``split`` does not apply), or a
  glob pattern of such files (``data/part-*.parquet``);
- a dataset folder: split files (``train.jsonl``, ``test.parquet``,
  ``train-00000-of-00002.parquet``, ``data/test.jsonl`` …) chosen by ``split``, and
  configurations chosen by ``subset_name`` (named in the folder's ``README.md``, or
  without one a subfolder of that name);
- a Hugging Face Hub dataset id (``openai/gsm8k`` with ``subset_name: main``): loaded from
  the Hub when it can be reached, else from the ``datasets`` cache, else one line says so
  within seconds (a relative path that does not exist, ``runs/data``, reads as an id);
- with ``storage_type: sql``, a SQLite file whose table ``tasks`` (or ``split``) holds
  the rows.
Every problem is one line naming the taskset, the file, and where relevant the row and key;
a file that ``datasets`` cannot read is looked at line by line to say where it goes wrong
(``line 7, column 12: malformed JSON: …``, ``line 3: byte 0xff at column 9 is not UTF-8``,
``the file is empty``). :func:`preview_rows` reads the first rows alone, without
``datasets`` (``rft validate`` checks every data file with it before a run).
"""

from __future__ import annotations

import contextlib
import csv
import glob
import io
import itertools
import json
import os
import sqlite3
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rft.buffer.chat_render import parse_tools
from rft.buffer.errors import TasksetError
from rft.buffer.retry import retrying, storage_retry
from rft.config.schema import TasksetConfig
from rft.hub import hub_unreachable
from rft.suggest import closest
from rft.workflow import Task

if TYPE_CHECKING:
    from rft.config.plan import Selected
    from rft.environment import ActionParser, Environment

FILE_BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}
"""``datasets`` builder for each data-file extension."""

TEXT_EXTENSIONS = (".jsonl", ".json", ".csv")
"""Data files read as UTF-8 text (diagnosed line by line)."""


def _where(cfg: TasksetConfig) -> str:
    return f"taskset {cfg.name!r} ({cfg.path})"


class DataNotReady(TasksetError):
    """A read that may succeed when tried again: the file or folder is not there (yet), the
    SQLite file is locked (``max_retry_times`` retries it)."""


def read_rows(cfg: TasksetConfig) -> list[dict[str, Any]]:
    """All rows of a taskset as dicts, in file order. A read that failed with
    :class:`DataNotReady` is tried again ``cfg.max_retry_times`` times, every
    ``cfg.max_retry_interval`` seconds (:mod:`rft.buffer.retry`); with
    ``cfg.enable_progress_bar`` loading shows progress bars on stderr.

    :raises TasksetError: missing path, unreadable file, or zero rows.
    """
    if not cfg.path:
        raise TasksetError(f"taskset {cfg.name!r}: no path")
    path = os.path.expanduser(cfg.path)

    def read() -> list[dict[str, Any]]:
        if cfg.storage_type == "sql":
            return _read_sqlite(cfg, path, progress=cfg.enable_progress_bar)
        return _read_with_datasets(cfg, path)

    policy = storage_retry(cfg.max_retry_times, cfg.max_retry_interval)
    rows = retrying(policy, _where(cfg), read, lambda exc: isinstance(exc, DataNotReady),
                    TasksetError)
    if not rows:
        raise TasksetError(f"{_where(cfg)}: the taskset is empty (split {cfg.split!r})")
    return rows


def _read_with_datasets(cfg: TasksetConfig, path: str) -> list[dict[str, Any]]:
    """Rows through ``datasets.load_dataset`` for each form of ``path`` the module
    docstring lists; a Hub id is loaded only when the Hub can be reached (or from the
    ``datasets`` cache), else one line says why within seconds."""
    import datasets

    extension = os.path.splitext(path)[1].lower()
    matches = sorted(glob.glob(path)) if any(c in path for c in "*?[") else []
    hub_id = not (os.path.exists(path) or matches or _local_looking(path))
    if hub_id and extension in FILE_BUILDERS:
        raise DataNotReady(f"{_where(cfg)}: no such file or folder")
    unreachable = hub_unreachable() if hub_id else None
    try:
        with _hub_offline(not hub_id or unreachable is not None), \
                _progress_bars(cfg.enable_progress_bar):
            if os.path.isfile(path):
                if extension not in FILE_BUILDERS:
                    raise TasksetError(f"{_where(cfg)}: unsupported file type {extension!r}; "
                                       "use " + ", ".join(FILE_BUILDERS))
                if extension in TEXT_EXTENSIONS and os.path.getsize(path) == 0:
                    raise TasksetError(f"{_where(cfg)}: the taskset is empty (the file is "
                                       "empty)")
                dataset = datasets.load_dataset(FILE_BUILDERS[extension], data_files=path,
                                                split="train")
            elif matches:
                dataset = _load_files(cfg, matches)
            elif os.path.isdir(path):
                dataset = _load_folder(cfg, path)
            elif not hub_id:
                raise DataNotReady(f"{_where(cfg)}: no such file or folder")
            else:
                dataset = _load_hub(cfg, path, unreachable)
        return [dict(row) for row in dataset]  # inside: arrow decodes text lazily
    except TasksetError:
        raise
    except Exception as exc:  # datasets raises many types; name the file and the cause
        problem = diagnose_path(path) if os.path.exists(path) else None
        if problem is not None:
            raise TasksetError(f"{_where(cfg)}: {problem}") from exc
        raise TasksetError(f"{_where(cfg)}: cannot load: {_cause(exc)}") from exc


def _local_looking(path: str) -> bool:
    """Paths that must exist here (absolute, ``./``, ``../``, ``~``) rather than Hub ids."""
    return os.path.isabs(path) or path.startswith((".", "~"))


@contextlib.contextmanager
def _progress_bars(enabled: bool) -> Iterator[None]:
    """``datasets``' own progress bars (tqdm, on stderr) on or off for the duration
    (``enable_progress_bar``)."""
    import datasets

    before = datasets.is_progress_bar_enabled()
    (datasets.enable_progress_bars if enabled else datasets.disable_progress_bars)()
    try:
        yield
    finally:
        (datasets.enable_progress_bars if before else datasets.disable_progress_bars)()


@contextlib.contextmanager
def _hub_offline(offline: bool) -> Iterator[None]:
    """``datasets`` offline (no Hub request) for the duration: local data never needs
    it, and an unreachable Hub would be retried for about a minute."""
    import datasets

    before = datasets.config.HF_HUB_OFFLINE
    datasets.config.HF_HUB_OFFLINE = offline or before
    try:
        yield
    finally:
        datasets.config.HF_HUB_OFFLINE = before


def _load_files(cfg: TasksetConfig, files: list[str]) -> Any:
    """The rows of the data files a glob pattern matched (one builder: their extension)."""
    import datasets

    extensions = {os.path.splitext(f)[1].lower() for f in files}
    builders = {FILE_BUILDERS.get(e) for e in extensions}
    if len(builders) != 1 or None in builders:
        raise TasksetError(f"{_where(cfg)}: the pattern matches files of types "
                           f"{', '.join(sorted(extensions))}; use one of "
                           + ", ".join(FILE_BUILDERS))
    return datasets.load_dataset(builders.pop(), data_files=files, split="train")


def _load_folder(cfg: TasksetConfig, path: str) -> Any:
    """A dataset folder (``split``, ``subset_name``). Without a ``README.md`` naming its
    configurations, ``subset_name`` is the subfolder of that name."""
    import datasets

    subfolder = os.path.join(path, cfg.subset_name) if cfg.subset_name else None
    try:
        return datasets.load_dataset(path, name=cfg.subset_name, split=cfg.split)
    except ValueError as exc:
        if "BuilderConfig" not in str(exc):
            raise
        if subfolder is None or not os.path.isdir(subfolder):
            raise TasksetError(f"{_where(cfg)}: subset_name {cfg.subset_name!r} is neither a "
                               f"configuration of the dataset ({_cause(exc)}) nor a subfolder"
                               ) from exc
    return datasets.load_dataset(subfolder, split=cfg.split)


def _load_hub(cfg: TasksetConfig, path: str, unreachable: str | None) -> Any:
    """A Hub dataset id (``subset_name``, ``split``): from the Hub, or from the ``datasets``
    cache when the Hub cannot be reached."""
    import datasets

    try:
        return datasets.load_dataset(path, name=cfg.subset_name, split=cfg.split)
    except Exception as exc:
        if unreachable is None:
            raise
        raise TasksetError(
            f"{_where(cfg)}: not a local file or folder ({os.path.abspath(path)} does not "
            f"exist), and the Hugging Face Hub cannot be reached ({unreachable}) nor has "
            "the datasets cache this dataset; download it and point path at its folder or "
            "file") from exc


def _cause(exc: BaseException) -> str:
    """The first line of the innermost cause ``datasets`` wrapped ("an error occurred while
    generating the dataset" says nothing)."""
    inner = exc
    while inner.__cause__ is not None:
        inner = inner.__cause__
    text = str(inner).strip()
    return f"{type(inner).__name__}: {text.splitlines()[0]}" if text else type(inner).__name__


def _data_files(folder: str) -> list[str]:
    """The text data files under a dataset folder, in name order."""
    found = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        found += [os.path.join(root, f) for f in sorted(files)
                  if f.lower().endswith(TEXT_EXTENSIONS) and not f.startswith(".")]
    return found


def diagnose_path(path: str, max_lines: int | None = None) -> str | None:
    """Where a data file (or the first bad data file of a folder) goes wrong, in one line;
    ``None`` when nothing is found. ``max_lines``: look at the first lines only."""
    if os.path.isdir(path):
        for name in _data_files(path):
            problem = diagnose_file(name, max_lines)
            if problem is not None:
                return f"{os.path.relpath(name, path)}: {problem}"
        return None
    return diagnose_file(path, max_lines)


def diagnose_file(path: str, max_lines: int | None = None) -> str | None:
    """The first problem of a JSON, JSON-lines or CSV file: ``the file is empty``, a byte
    that is not UTF-8, malformed JSON, a JSON line that is not an object — with its 1-based
    line and column; ``None`` when there is none (or for other file types)."""
    extension = os.path.splitext(path)[1].lower()
    if extension not in TEXT_EXTENSIONS:
        return None
    try:
        with open(path, "rb") as handle:
            raw_lines = list(itertools.islice(handle, max_lines))
    except OSError as exc:
        return f"cannot read: {exc.strerror or exc}"
    if not any(line.strip() for line in raw_lines):
        return "the file is empty" if not raw_lines or max_lines is None or \
            len(raw_lines) < max_lines else None
    lines = []
    for number, raw in enumerate(raw_lines, start=1):
        try:
            lines.append(raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            return (f"line {number}: byte 0x{raw[exc.start]:02x} at column {exc.start + 1} is "
                    "not UTF-8 (data files must be UTF-8)")
    if extension == ".csv":
        return None
    first = next(line for line in lines if line.strip()).lstrip()
    if extension == ".json" and first.startswith("[") and max_lines is None:
        try:
            rows = json.loads("".join(lines))
        except json.JSONDecodeError as exc:
            return f"line {exc.lineno}, column {exc.colno}: malformed JSON: {exc.msg}"
        bad = next((i for i, row in enumerate(rows) if not isinstance(row, dict)), None)
        return None if bad is None else f"item {bad} of the JSON list is not an object"
    if extension == ".json" and first.startswith("["):
        return None  # a JSON list is checked whole, not by its first lines
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line.rstrip("\r\n"))
        except json.JSONDecodeError as exc:
            if extension == ".json" and number == 1 and max_lines is None:
                try:  # one JSON document over several lines
                    json.loads("".join(lines))
                    return None
                except json.JSONDecodeError as whole:
                    return (f"line {whole.lineno}, column {whole.colno}: malformed JSON: "
                            f"{whole.msg}")
            return f"line {number}, column {exc.colno}: malformed JSON: {exc.msg}"
        if not isinstance(row, dict):
            return (f"line {number}: a JSON object (one row) expected, got "
                    f"{type(row).__name__}")
    return None


PREVIEW_ROWS = 100
"""Rows :func:`preview_rows` reads of each file."""


def preview_rows(cfg: TasksetConfig, limit: int = PREVIEW_ROWS) -> list[dict[str, Any]]:
    """The first ``limit`` rows of a taskset, read without ``datasets`` (fast: for checks
    before a run).

    :raises TasksetError: the same one-line problems as :func:`read_rows` for those rows
        (with file and line), an empty taskset included.
    """
    if not cfg.path:
        raise TasksetError(f"taskset {cfg.name!r}: no path")
    path = os.path.expanduser(cfg.path)
    if cfg.storage_type == "sql":
        rows = _read_sqlite(cfg, path, limit)
    elif os.path.isfile(path):
        rows = _preview_file(cfg, path, limit)
    elif os.path.isdir(path):
        if cfg.subset_name and os.path.isdir(os.path.join(path, cfg.subset_name)):
            path = os.path.join(path, cfg.subset_name)
        rows = []
        for name in _data_files(path):
            split = os.path.basename(name).split(".")[0].split("-")[0]
            if split != cfg.split and os.path.basename(os.path.dirname(name)) != cfg.split:
                continue
            rows += _preview_file(cfg, name, limit - len(rows), where=name)
            if len(rows) >= limit:
                break
        else:
            if not rows:  # a layout this reader does not know: datasets will tell
                return []
    else:
        raise TasksetError(f"{_where(cfg)}: no such file or folder")
    if not rows:
        raise TasksetError(f"{_where(cfg)}: the taskset is empty (split {cfg.split!r})")
    return rows


def _preview_file(cfg: TasksetConfig, path: str, limit: int,
                  where: str | None = None) -> list[dict[str, Any]]:
    prefix = _where(cfg) + (f": {where}" if where else "")
    extension = os.path.splitext(path)[1].lower()
    if extension not in FILE_BUILDERS:
        raise TasksetError(f"{prefix}: unsupported file type {extension!r}; use "
                           + ", ".join(FILE_BUILDERS))
    if extension == ".parquet":
        try:
            import pyarrow.parquet as pq

            table = pq.ParquetFile(path)
            batch = next(table.iter_batches(batch_size=max(1, limit)), None)
        except Exception as exc:
            raise TasksetError(f"{prefix}: cannot read Parquet: {_cause(exc)}") from exc
        return batch.to_pylist() if batch is not None else []
    problem = diagnose_file(path, max_lines=None if extension == ".json" else limit)
    if problem is not None:
        raise TasksetError(f"{prefix}: {problem}")
    with open(path, encoding="utf-8") as handle:
        if extension == ".csv":
            return list(itertools.islice(csv.DictReader(handle), limit))
        if extension == ".json":
            text = handle.read()
            try:
                data = json.loads(text)
            except json.JSONDecodeError:
                data = None
            if isinstance(data, list):
                return [row for row in data[:limit] if isinstance(row, dict)]
            if isinstance(data, dict):
                return [data]
            return [json.loads(line) for line in itertools.islice(_non_blank(io.StringIO(text)),
                                                                    limit)]
        return [json.loads(line) for line in itertools.islice(_non_blank(handle), limit)]


def _non_blank(lines: Any) -> Iterator[str]:
    return (line for line in lines if line.strip())


def _read_sqlite(cfg: TasksetConfig, path: str, limit: int | None = None, *,
                 progress: bool = False) -> list[dict[str, Any]]:
    """The rows of table ``split`` (else ``tasks``); ``progress``: a tqdm bar on stderr
    over the rows read."""
    if not os.path.isfile(path):
        raise DataNotReady(f"{_where(cfg)}: no such SQLite file")
    try:
        with sqlite3.connect(path) as db:
            db.row_factory = sqlite3.Row
            tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            table = cfg.split if cfg.split in tables else "tasks"
            if table not in tables:
                raise TasksetError(f"{_where(cfg)}: no table {cfg.split!r} or 'tasks' "
                                   f"(tables: {', '.join(sorted(tables)) or 'none'})")
            query = f'SELECT * FROM "{table}" ORDER BY rowid'
            if limit is not None:
                query += f" LIMIT {int(limit)}"
            cursor = db.execute(query)
            if progress:
                from tqdm import tqdm

                total = db.execute(f'SELECT COUNT(*) FROM "{table}"').fetchone()[0]
                return [dict(row) for row in tqdm(cursor, total=total, unit="rows",
                                                  desc=f"Reading {cfg.name}")]
            return [dict(row) for row in cursor]
    except sqlite3.OperationalError as exc:
        if "locked" in str(exc):
            raise DataNotReady(f"{_where(cfg)}: cannot read SQLite file: {exc}") from exc
        raise TasksetError(f"{_where(cfg)}: cannot read SQLite file: {exc}") from exc
    except sqlite3.Error as exc:
        raise TasksetError(f"{_where(cfg)}: cannot read SQLite file: {exc}") from exc


@dataclass
class TaskPlugins:
    """Resolved plugins a taskset's tasks carry (from validation)."""

    workflow: Any
    workflow_args: Any
    reward_fn: Any
    reward_args: Any
    row_workflows: Mapping[str, Selected[Any]] = field(default_factory=dict)
    """Workflows a row may name in ``format.workflow_key`` (the plan's)."""
    row_rewards: Mapping[str, Selected[Any]] = field(default_factory=dict)
    """Reward functions a row may name in ``format.reward_fn_key`` (the plan's)."""
    environment: Selected[type[Environment]] | None = None
    """The taskset's environment (class and built args; the plan's)."""
    action_parser: Selected[ActionParser] | None = None
    """The environment's action parser (the plan's)."""


def row_place(cfg: TasksetConfig, index: int) -> str:
    """Where the row at ``index`` (0-based, in reading order) is, 1-based as an editor
    shows it: ``line N`` of a JSON-lines or CSV file (blank lines and the CSV header
    counted, so ``sed -n Np FILE`` prints it), else ``row N`` (a Parquet file, a JSON list,
    a folder of files, an SQLite table)."""
    path = os.path.expanduser(cfg.path or "")
    extension = os.path.splitext(path)[1].lower()
    if cfg.storage_type == "file" and os.path.isfile(path) and extension in TEXT_EXTENSIONS:
        line = _line_of_row(path, extension, index)
        if line is not None:
            return f"line {line}"
    return f"row {index + 1}"


def _line_of_row(path: str, extension: str, index: int) -> int | None:
    """The 1-based line where row ``index`` of a JSON-lines / CSV file starts; ``None``
    for a file that is not one row per line (a JSON list or document) or that is shorter."""
    try:
        with open(path, encoding="utf-8", newline="" if extension == ".csv" else None) as f:
            if extension == ".csv":
                reader = csv.reader(f)
                if next(reader, None) is None:  # the header
                    return None
                start = reader.line_num + 1
                for number, _ in enumerate(reader):
                    if number == index:
                        return start
                    start = reader.line_num + 1
                return None
            rows = 0
            for number, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                if rows == 0 and line.lstrip().startswith("["):
                    return None  # a JSON list: its items are not lines
                if rows == index:
                    return number
                rows += 1
    except (OSError, UnicodeDecodeError, csv.Error):
        return None
    return None


def _row_plugin(cfg: TasksetConfig, row: dict[str, Any], index: int, column: str, field_name: str,
                choices: Mapping[str, Selected[Any]], label: str) -> Selected[Any] | None:
    """The plugin a row names in ``column`` (``None``: it names none)."""
    if not column or not row.get(column):
        return None
    name = str(row[column])
    if name not in choices:
        close = closest(name, choices)
        hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
        raise TasksetError(f"{_where(cfg)}: {row_place(cfg, index)}: {label} {name!r} "
                           f"(format.{field_name} {column!r}) is not registered{hint}")
    return choices[name]


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
    if plugins.environment is not None:
        task.environment = plugins.environment.implementation
        task.environment_args = plugins.environment.args
        task.action_parser = (plugins.action_parser.implementation
                              if plugins.action_parser is not None else None)
    workflow = _row_plugin(cfg, row, index, fmt.workflow_key, "workflow_key",
                           plugins.row_workflows, "workflow")
    if workflow is not None:
        task.workflow, task.workflow_args = workflow.implementation, workflow.args
    reward = _row_plugin(cfg, row, index, fmt.reward_fn_key, "reward_fn_key",
                         plugins.row_rewards, "reward function")
    if reward is not None:
        task.reward_fn, task.reward_args = reward.implementation, reward.args
    if fmt.prompt_type == "messages" and fmt.messages_key in row:
        messages = row[fmt.messages_key]
        task.messages = json.loads(messages) if isinstance(messages, str) else list(messages)
    else:
        if fmt.prompt_key in row:
            task.prompt = str(row[fmt.prompt_key])
        elif task.environment is None:  # with one, reset gives the first observation
            also = (f" or {fmt.messages_key!r} (format.messages_key)"
                    if fmt.prompt_type == "messages" else "")
            raise TasksetError(f"{_where(cfg)}: {row_place(cfg, index)} has no key "
                               f"{fmt.prompt_key!r} "
                               f"(format.prompt_key){also}; keys: {', '.join(row)}")
        if fmt.system_prompt_key and row.get(fmt.system_prompt_key):
            task.system_prompt = str(row[fmt.system_prompt_key])
        else:
            task.system_prompt = fmt.system_prompt
    if fmt.tools_key and fmt.tools_key in row:
        try:
            task.tools = parse_tools(row[fmt.tools_key], f"{fmt.tools_key!r} (format.tools_key)",
                                     _where(cfg))
        except TasksetError as exc:  # the row's place is looked up only for the message
            where = f"{_where(cfg)}: "
            raise TasksetError(str(exc).replace(where, where + row_place(cfg, index) + ": ", 1)
                               ) from exc
    if fmt.image_key or fmt.video_key:
        task.images, task.videos = _row_media(cfg, row, index)
    if fmt.response_key in row:
        task.truth = row[fmt.response_key]
    elif task.reward_fn is not None and task.environment is None:  # else: the env rewards
        raise TasksetError(f"{_where(cfg)}: {row_place(cfg, index)} has no key "
                           f"{fmt.response_key!r} "
                           f"(format.response_key) for the reward; keys: {', '.join(row)}")
    return task


def media_folder(cfg: TasksetConfig) -> str | None:
    """The folder relative image / video paths of a row are read from: the data file's
    folder (the folder itself for a folder of files); ``None`` for a hub dataset."""
    path = os.path.expanduser(cfg.path or "")
    if os.path.isdir(path):
        return path
    return os.path.dirname(os.path.abspath(path)) if os.path.exists(path) else None


def _row_media(cfg: TasksetConfig, row: dict[str, Any], index: int
               ) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """``(images, videos)`` of a row (``format.image_key`` / ``format.video_key``, read by
    :mod:`rft.multimodal.media`); one :class:`TasksetError` line naming the row and the key."""
    from rft.multimodal.media import MediaError, load_images, load_videos

    fmt, folder = cfg.format, media_folder(cfg)
    loaded: dict[str, tuple[Any, ...]] = {"image_key": (), "video_key": ()}
    for name, column, load in (("image_key", fmt.image_key, load_images),
                               ("video_key", fmt.video_key, load_videos)):
        if not column:
            continue
        if column not in row:
            raise TasksetError(f"{_where(cfg)}: {row_place(cfg, index)} has no key {column!r} "
                               f"(format.{name}); keys: {', '.join(row)}")
        try:
            loaded[name] = load(row[column], folder)
        except MediaError as exc:
            raise TasksetError(f"{_where(cfg)}: {row_place(cfg, index)}: {column!r} "
                               f"(format.{name}): {exc}") from exc
    return loaded["image_key"], loaded["video_key"]


def load_tasks(cfg: TasksetConfig, plugins: TaskPlugins, *, is_eval: bool) -> list[Task]:
    """Every row of a taskset as a task (all rows are checked up front)."""
    return [row_to_task(cfg, row, i, plugins, is_eval=is_eval)
            for i, row in enumerate(read_rows(cfg))]
