"""Running a row-wise task operator over ``num_process`` worker processes.

The rows are cut into ``n`` contiguous chunks (sizes differ by at most one); each worker
process (``multiprocessing`` *spawn*: no state forked from the parent, safe beside torch
and Ray threads) receives the pickled operator and its chunk, and the outputs are
concatenated in chunk order, so the result equals ``operator.process(rows)`` for an
operator that decides each row on its own.
"""

from __future__ import annotations

import multiprocessing
import os

from rft.data.task_operator import TaskOperator, TaskRow


def chunks(rows: list[TaskRow], n: int) -> list[list[TaskRow]]:
    """``rows`` in ``min(n, len(rows))`` contiguous pieces, in order."""
    n = max(1, min(n, len(rows)))
    size, extra = divmod(len(rows), n)
    pieces: list[list[TaskRow]] = []
    start = 0
    for i in range(n):
        end = start + size + (1 if i < extra else 0)
        pieces.append(rows[start:end])
        start = end
    return pieces


def _process(job: tuple[TaskOperator, list[TaskRow]]) -> list[TaskRow]:
    operator, rows = job
    return operator.process(rows)


def process_split(operator: TaskOperator, rows: list[TaskRow], num_process: int) -> list[TaskRow]:
    """``operator.process`` over ``rows``: in this process when ``num_process`` (capped at
    the CPU count) is 1, the operator is not row-wise, or there are fewer than two rows;
    else in worker processes (see the module docstring)."""
    num_process = min(num_process, os.cpu_count() or 1)
    if num_process <= 1 or not operator.row_wise or len(rows) < 2:
        return operator.process(rows)
    pieces = chunks(rows, num_process)
    pool = multiprocessing.get_context("spawn").Pool(len(pieces))
    try:
        outputs = pool.map(_process, [(operator, piece) for piece in pieces])
        pool.close()  # the workers exit on their own; no process is left behind
    finally:
        pool.terminate()
        pool.join()
    return [row for output in outputs for row in output]


__all__ = ["chunks", "process_split"]
