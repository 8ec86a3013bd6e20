"""Mode ``both`` with partial rollouts on Ray: the trainer's process is SIGKILLed while
the explorer has partial-rollout samples in flight. The run stops with one line naming
the trainer; the resumed run trains every step once (the monitors and the buffer's
leases say so), loses no committed experience, and its checkpoints go on from the last
one the killed run saved."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from rft.checkpoint import list_checkpoints
from rft.config import load_config
from rft.errors import RftError
from rft.launcher import run
from test_distributed import both_config, logged, ray_local, tasks  # noqa: F401 - fixtures

STEPS = 6
HF = {"engine_type": "hf", "dtype": "float32"}


def partial_config(tmp_path: Path, model: Path, tasks: Path, **changes: object) -> Path:
    """Fully async: partial rollouts, the explorer one step ahead, a SQLite buffer, a
    checkpoint every 2 steps (so the kill loses trained steps that must be redone)."""
    sql = {"name": "exp", "storage_type": "sql", "path": str(tmp_path / "exp.db"),
           "max_read_timeout": 60.0}
    base = {"synchronizer__sync_offset": 1, "trainer__save_interval": 2}
    return both_config(tmp_path, model, tasks, explorer__rollout_model=HF,
                       buffer__total_steps=STEPS, buffer__trainer_input__experience_buffer=sql,
                       synchronizer__partial_rollout=True, **{**base, **changes})


def trainer_processes() -> list[psutil.Process]:
    """This test's Ray trainer actor process (a descendant of this process: the private
    cluster ``ray_local`` started)."""
    found = []
    for child in psutil.Process(os.getpid()).children(recursive=True):
        try:
            if "TrainerService" in " ".join(child.cmdline()):
                found.append(child)
        except psutil.Error:
            continue
    return found


def kill_trainer_after(trainer_log: Path, steps: int, killed: list[str]) -> None:
    """SIGKILL the trainer actor's process once it logged ``steps`` steps; ``killed`` gets
    the trainer's and the explorer's logs as they were then."""
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        text = trainer_log.read_text() if trainer_log.is_file() else ""
        if len(text.splitlines()) >= steps:
            for process in trainer_processes():
                os.kill(process.pid, signal.SIGKILL)
            killed.append(text)
            explorer_log = trainer_log.with_name("explorer.jsonl")
            killed.append(explorer_log.read_text() if explorer_log.is_file() else "")
            return
        time.sleep(0.02)


def read_steps(db: Path) -> list[int | None]:
    """The training step whose read took each buffer row (``None``: never read)."""
    connection = sqlite3.connect(db)
    try:
        return [step for (step,) in connection.execute(
            "SELECT read_step FROM experiences ORDER BY id")]
    finally:
        connection.close()


def learned(record: dict) -> dict[str, float]:
    """A trainer step's metrics without its timings."""
    return {k: v for k, v in record["metrics"].items()
            if k.startswith(("actor/", "critic/", "response_length/"))}


CLOSE_WHILE_WRITING = """
import sys, threading, time, torch
from rft.buffer.storage import open_storage
from rft.experience import EID, Experience
store = open_storage("sql", "exp", sys.argv[1])
rows = [Experience(tokens=torch.arange(64), prompt_length=8, reward=1.0,
                   logprobs=torch.zeros(56), eid=EID(batch=0, task=i, run=0)) for i in range(64)]
errors = []
def write():
    try:
        while True:
            store.write(rows)
    except Exception as exc:
        errors.append(str(exc))
writer = threading.Thread(target=write)
writer.start()
time.sleep(0.5)
store.close()
writer.join()
print(errors[0])
"""


def test_closing_the_sql_buffer_while_an_explorer_writes_is_one_line(tmp_path):
    """The end of a ``both`` run (the trainer died) closes the buffer actor's storage while
    the explorer, never waiting with partial rollouts, is inside a write on another of the
    actor's threads: the write fails in one line, the process lives (it crashed in SQLite,
    signal 11, when the connection was closed mid-transaction)."""
    done = subprocess.run([sys.executable, "-c", CLOSE_WHILE_WRITING, str(tmp_path / "x.db")],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().startswith("experience buffer 'exp'")
    assert "closed" in done.stdout and len(done.stdout.strip().splitlines()) == 1
    db = sqlite3.connect(tmp_path / "x.db")  # what was committed is all there, whole writes
    try:
        (count,) = db.execute("SELECT COUNT(*) FROM experiences").fetchone()
    finally:
        db.close()
    assert count > 0 and count % 64 == 0


@pytest.mark.slow
def test_a_sigkilled_trainer_with_partial_samples_in_flight_resumes_exactly(
        ray_local, tmp_path, tiny_model_dir, tasks):  # noqa: F811 - fixtures
    """SIGKILL of the trainer's process after its step 3 (checkpoint 2 saved), the
    explorer generating ahead: one line; resumed, steps 3…6 are trained once each, step 3
    exactly as the killed run trained it (same rows, same weights), every buffer row
    written once and read by exactly one step."""
    job_dir = tmp_path / "ck" / "e2e" / "run"
    killed: list[str] = []
    killer = threading.Thread(target=kill_trainer_after,
                              args=(job_dir / "monitor" / "trainer.jsonl", 3, killed))
    killer.start()
    with pytest.raises(RftError) as caught:
        run(load_config(partial_config(tmp_path, tiny_model_dir, tasks)))
    killer.join()
    assert killed and trainer_processes() == [], f"the trainer was not killed: {caught.value}"
    message = str(caught.value)
    assert "trainer actor 'trainer' died" in message and "\n" not in message
    before = {r["step"]: r for r in map(json.loads, killed[0].splitlines())}
    explored = [json.loads(line)["step"] for line in killed[1].splitlines()]
    assert max(explored) < STEPS  # the explorer was still generating: samples in flight
    assert [c.step for c in list_checkpoints(str(job_dir))][-1] in (2, 4)
    assert run(load_config(partial_config(tmp_path, tiny_model_dir, tasks,
                                          continue_from_checkpoint=True))) == 0
    trainer = logged(tmp_path, "trainer")
    assert [r["step"] for r in trainer] == list(range(1, STEPS + 1))  # each step once
    assert learned(trainer[2]) == learned(before[3])  # the redone step is the lost one
    assert [c.step for c in list_checkpoints(str(job_dir))][-1] == STEPS
    rows = read_steps(tmp_path / "exp.db")  # 2 tasks x 2 runs an explore step, written once
    assert sorted(rows, key=lambda s: s or 0) == [s for s in range(1, STEPS + 1) for _ in range(4)]


@pytest.mark.slow
def test_a_fully_async_run_carries_tasks_over(ray_local, tmp_path, tiny_model_dir, tasks):  # noqa: F811
    """``partial_rollout`` + ``streaming_batches`` on Ray (:mod:`rft.rollout.carry_over`):
    each explore step writes ``batch_size`` tasks and carries one batch over; every step
    is trained once, and every row written is read by exactly one step."""
    config = partial_config(tmp_path, tiny_model_dir, tasks, synchronizer__sync_offset=0,
                            synchronizer__streaming_batches=True, trainer__save_interval=0)
    assert run(load_config(config)) == 0
    explorer = logged(tmp_path, "explorer")
    carried = [r["metrics"]["rollout/carried_over"] for r in explorer
               if "rollout/carried_over" in r["metrics"]]
    assert carried == [2.0] * STEPS  # batch_size 2: one batch ahead
    assert sum(r["metrics"]["rollout/carried_in"] for r in explorer
               if "rollout/carried_in" in r["metrics"]) > 0
    assert [r["step"] for r in logged(tmp_path, "trainer")] == list(range(1, STEPS + 1))
    rows = read_steps(tmp_path / "exp.db")  # 2 tasks x 2 runs a step, each read once
    assert sorted(rows, key=lambda s: s or 0) == [s for s in range(1, STEPS + 1) for _ in range(4)]
