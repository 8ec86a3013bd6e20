"""What a run writes is kept, and what it reads back is what it wrote (issue #28, items 1,
3 and 8):

- a queue backup (or ``sql`` buffer) shared by two runs keeps both runs' experiences: the
  idempotency key of an explore step belongs to the run (its job dir), and a failed
  attempt's empty write does not block the redone step;
- a checkpoint file whose content changed without changing its size is found at resume
  (a SHA-256 per file, listed in ``state.json``, computed while the file is written) and
  the resume falls back to the previous checkpoint with the usual one-line warning;
- a full disk during a save is one line naming the file and the bytes needed; a ``log/``
  or ``monitor/`` folder that is a file is one line naming it.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
from pathlib import Path

import pytest
import torch
from rft.buffer.storage import explore_step_key, open_storage
from rft.experience import EID, Experience


def make(i: int, step: int = 1) -> Experience:
    return Experience(tokens=torch.tensor([1, 2, 3 + i]), prompt_length=2, reward=float(i),
                      logprobs=torch.tensor([-0.5]), eid=EID(batch=0, task=i, run=0, step=step),
                      info={"i": i})


def backup_rows(path: Path) -> list[int]:
    stored = open_storage("sql", "copy", str(path))
    rows = [e.info["i"] for e in stored.read(stored.available(), timeout=1)]
    stored.close()
    return rows


# ---- item 1: a queue backup shared by two runs ------------------------------------------


def test_two_runs_on_one_backup_keep_their_own_steps(tmp_path):
    """Two runs (job dirs ``a`` and ``b``) write step 1 to one SQLite backup: both runs'
    rows are there; the same run redoing step 1 (a resume) still writes it once."""
    backup = tmp_path / "bk.db"
    for job, rows in (("a", [0, 1]), ("b", [2, 3]), ("a", [4, 5])):
        queue = open_storage("queue", "exp", f"sqlite:///{backup}")
        with queue.idempotent_writes(explore_step_key(str(tmp_path / job), 1)):
            queue.write([make(i) for i in rows])
        queue.close()
    assert backup_rows(backup) == [0, 1, 2, 3]
    with sqlite3.connect(backup) as db:
        keys = sorted(row[0] for row in db.execute("SELECT key FROM writes"))
    assert keys == [f"explore step 1 of {tmp_path / 'a'}", f"explore step 1 of {tmp_path / 'b'}"]


@pytest.mark.parametrize("kind", ["bk.db", "bk.jsonl", "leased"])
def test_an_empty_write_does_not_block_the_redone_step(tmp_path, kind):
    """A failed attempt whose step 1 produced nothing records no key: the step redone by
    the next attempt (same job dir) is stored."""
    from rft.buffer.leased_queue import LeasedQueueStorage

    key = explore_step_key(str(tmp_path / "job"), 1)
    path = str(tmp_path / kind)
    if kind == "leased":  # the shared queue's actor: one storage, the explorer restarted
        queue = LeasedQueueStorage("exp")
        for rows in ([], [0, 1]):
            with queue.idempotent_writes(key):
                queue.write([make(i) for i in rows])
        assert queue.available() == 2
        return
    for rows in ([], [0, 1], [7, 8]):  # failed (empty), redone, redone again after a crash
        queue = open_storage("queue", "exp", path)
        with queue.idempotent_writes(key):
            queue.write([make(i) for i in rows])
        queue.close()
    if kind.endswith(".db"):
        assert backup_rows(tmp_path / kind) == [0, 1]
    else:
        lines = [json.loads(line) for line in Path(path).read_text().splitlines()]
        assert [row["info"]["i"] for row in lines] == [0, 1]


def test_an_empty_key_an_older_rft_recorded_blocks_nothing(tmp_path):
    """A backup in which an older rft recorded ``('explore step 1', 0)`` for a failed run:
    the next write of that key is stored."""
    backup = tmp_path / "bk.db"
    open_storage("sql", "exp", str(backup)).close()
    with sqlite3.connect(backup) as db:
        db.execute("INSERT INTO writes (key, rows) VALUES ('explore step 1', 0)")
    queue = open_storage("queue", "exp", str(backup))
    with queue.idempotent_writes("explore step 1"):
        queue.write([make(0), make(1)])
    queue.close()
    assert backup_rows(backup) == [0, 1]


def test_a_skipped_write_is_logged(tmp_path, caplog):
    """Nothing is dropped silently: a redone step's write that the backup skips is an info
    line, a warning when the redone step produced another number of experiences."""
    backup, key = tmp_path / "bk.db", "explore step 1 of /job"
    with caplog.at_level(logging.INFO, logger="rft.buffer.storage"):
        for rows in ([0, 1], [0, 1], [0, 1, 2]):
            queue = open_storage("queue", "exp", str(backup))
            with queue.idempotent_writes(key):
                queue.write([make(i) for i in rows])
            queue.close()
    records = [(r.levelname, r.getMessage()) for r in caplog.records
               if r.name == "rft.buffer.storage"]
    assert records == [
        ("INFO", f"experience buffer 'exp': {key!r} was written before; the redone step's 2 "
                 "experiences are not stored again"),
        ("WARNING", f"experience buffer 'exp': {key!r} was written before (2 experiences); "
                    "this write of the redone step (3 experiences) is not stored")]


@pytest.mark.slow
def test_two_runs_sharing_a_queue_backup_both_keep_their_rows(tmp_path, tiny_model_dir):
    """Two colocate runs (names ``first`` and ``second``) back their queue up to one
    SQLite file, as Trinity's ``sqlite:///gsm8k.db`` does for runs started in one folder:
    the file holds both runs' experiences (2 steps × 2 tasks × 2 rollouts each)."""
    from rft.testing.runs import run_tiny, write_taskset

    tasks = write_taskset(tmp_path / "tasks.jsonl")
    backup = tmp_path / "x" / "bk.db"
    jobs = []
    for name in ("first", "second"):
        (tmp_path / name).mkdir()
        outcome = run_tiny(tiny_model_dir, tasks, tmp_path / name, {
            "name": name, "checkpoint_root_dir": str(tmp_path / "checkpoints"),
            "buffer.trainer_input.experience_buffer.path": f"sqlite:///{backup}"})
        assert len(outcome.metrics) == 2
        jobs.append(outcome.job_dir)
    with sqlite3.connect(backup) as db:
        assert db.execute("SELECT COUNT(*) FROM experiences").fetchone()[0] == 2 * 8
        keys = sorted(row[0] for row in db.execute("SELECT key FROM writes"))
    assert keys == sorted(f"explore step {s} of {job}" for job in jobs for s in (1, 2))
