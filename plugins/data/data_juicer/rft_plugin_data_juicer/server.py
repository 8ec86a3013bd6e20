"""The Data-Juicer server: a small HTTP service running the real Data-Juicer library.

Run as ``python -m rft_plugin_data_juicer.server --port N [--parent PID]``; it listens on
127.0.0.1. Routes (JSON in and out):

- ``GET /health`` → ``{"status": "ok", "data_juicer": version, "operators": count}``;
- ``GET /ops`` → ``{"ops": [every operator name Data-Juicer registers]}``;
- ``POST /validate`` ``{"process": [...]}`` → ``{"ops": [names]}``, or 400 with
  ``{"error": line}`` naming the first operator Data-Juicer does not know;
- ``POST /process`` ``{"process": [...], "rows": [{...}, ...]}`` → ``{"rows": [...],
  "index": [...], "stats": [...], "counts": [...]}``: the recipe's operators run in order
  over the rows (mappers change them, filters compute their statistics and drop rows,
  deduplicators drop duplicates). ``index[i]`` is the position in the input of output row
  ``i``, ``stats[i]`` its Data-Juicer statistics (``__dj__stats__``), ``counts`` the rows
  after each operator. A bad recipe is a 400 with one ``error`` line.

With ``--parent`` the server exits (its whole process group) within a second of that
process disappearing, so a run killed without its clean-up leaves no server behind.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from rft.errors import RftError
from rft_plugin_data_juicer.recipe import Process, normalise, op_names

INDEX_KEY = "__rft_index__"
"""Column the server adds to each row to report where surviving rows came from."""
STATS_KEY = "__dj__stats__"
"""Data-Juicer's statistics column (``data_juicer.utils.constant.Fields.stats``)."""

_LOCK = threading.Lock()
"""One recipe at a time (Data-Juicer's ops are not meant to run concurrently)."""


def known_ops() -> set[str]:
    """Every operator name Data-Juicer registers."""
    from data_juicer.ops.base_op import OPERATORS

    return set(OPERATORS.modules)


def validate(process: Process) -> list[str]:
    """The recipe's op names; :class:`RftError` naming the first unknown one."""
    known = known_ops()
    names = op_names(process)
    for i, name in enumerate(names):
        if name not in known:
            from difflib import get_close_matches

            close = get_close_matches(name, sorted(known), n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise RftError(f"process[{i}]: unknown Data-Juicer operator {name!r}{hint}")
    return names


def run_recipe(process: Process, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Run ``process`` over ``rows`` (module docstring, ``POST /process``)."""
    from data_juicer.core.data import NestedDataset
    from data_juicer.ops import load_ops

    validate(process)
    if not rows:
        return {"rows": [], "index": [], "stats": [], "counts": [0] * len(process)}
    dataset = NestedDataset.from_list([{**row, INDEX_KEY: i} for i, row in enumerate(rows)])
    counts: list[int] = []
    for i, entry in enumerate(process):
        ((name, args),) = entry.items()
        try:
            (op,) = load_ops([{name: {"num_proc": 1, **args}}])
            dataset = op.run(dataset)
        except Exception as exc:  # noqa: BLE001 - one line back to the client
            text = str(exc).strip().splitlines()
            raise RftError(f"process[{i}] ({name}): {type(exc).__name__}: "
                           f"{text[0] if text else ''}") from exc
        counts.append(len(dataset))
    out_rows, index, stats = [], [], []
    for row in dataset.to_list():
        index.append(row.pop(INDEX_KEY))
        stats.append(row.pop(STATS_KEY, None) or {})
        out_rows.append(row)
    return {"rows": out_rows, "index": index, "stats": stats, "counts": counts}


async def _body_process(request: Request) -> Process:
    body = await request.json()
    if not isinstance(body, dict):
        raise RftError("request body: expected a JSON object")
    return normalise(body.get("process"), "recipe")


async def health(request: Request) -> JSONResponse:
    import data_juicer

    return JSONResponse({"status": "ok", "data_juicer": data_juicer.__version__,
                         "pid": os.getpid()})


async def ops_route(request: Request) -> JSONResponse:
    return JSONResponse({"ops": sorted(await run_in_threadpool(known_ops))})


async def validate_route(request: Request) -> JSONResponse:
    try:
        process = await _body_process(request)
        return JSONResponse({"ops": await run_in_threadpool(validate, process)})
    except RftError as exc:
        return JSONResponse({"error": str(exc)}, status_code=400)


async def process_route(request: Request) -> JSONResponse:
    try:
        process = await _body_process(request)
        body = await request.json()
        rows = body.get("rows")
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            raise RftError("rows: expected a list of JSON objects")

        def locked() -> dict[str, Any]:
            with _LOCK:
                return run_recipe(process, rows)

        return JSONResponse(await run_in_threadpool(locked))
    except RftError as exc:
        return JSONResponse({"error": str(exc)}, status_code=400)


def create_app() -> Starlette:
    """The server's Starlette application."""
    return Starlette(routes=[Route("/health", health, methods=["GET"]),
                             Route("/ops", ops_route, methods=["GET"]),
                             Route("/validate", validate_route, methods=["POST"]),
                             Route("/process", process_route, methods=["POST"])])


def watch_parent(parent: int) -> None:
    """Kill this process group once ``parent`` is gone (polled every 0.5 s)."""
    def loop() -> None:
        while True:
            if os.getppid() != parent:
                os.killpg(0, signal.SIGKILL)
            time.sleep(0.5)

    threading.Thread(target=loop, name="rft-dj-parent-watch", daemon=True).start()


def main(argv: list[str] | None = None) -> None:
    """Entry point: ``--port`` (required), ``--parent`` (exit when it dies)."""
    import uvicorn

    parser = argparse.ArgumentParser(prog="rft_plugin_data_juicer.server")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--parent", type=int, default=None)
    options = parser.parse_args(argv)
    if options.parent is not None:
        watch_parent(options.parent)
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    from loguru import logger  # Data-Juicer logs every op's process count at INFO

    logger.remove()
    logger.add(sys.stderr, level="WARNING")
    known_ops()  # import Data-Juicer's operators before answering /health
    uvicorn.run(create_app(), host=options.host, port=options.port, log_level="warning")


if __name__ == "__main__":
    main()
