"""Fault injection: runs that are killed, hang, run out of disk or read bad files.

What every test asserts (docs/faults.md states it as the guarantee):

- the run finishes after a restart;
- no experience is lost or trained twice (counted by eid, in the SQLite buffer);
- the final weights equal, bit for bit (``torch.equal`` on every tensor), those of the
  same run uninterrupted (CPU, one thread);
- each step is recorded once by the monitors;
- every error is one line naming its culprit.

Kills are simulated in-process by raising a ``BaseException`` at a chosen point (fast, and
exact about where), and done for real with ``kill -9`` at random points of subprocesses
(``@pytest.mark.slow``; the seed is in the failure message, ``RFT_FAULT_SEED`` replays it).
Every subprocess is bounded in time and killed on the way out.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import test_embedded_run
import test_split_modes
import torch
from fixtures_models import arithmetic_tasks
from fixtures_workflows import Sleepy
from rft.checkpoint import list_checkpoints
from rft.cli import main
from rft.config import load_config
from rft.errors import RftError
from rft.experience import Experience
from rft.rollout.explorer import rollout_metrics
from rft.rollout.runner import TaskResult, WorkflowRunner
from rft.launcher import run
from rft.workflow import Task, Workflow

REPO = Path(__file__).resolve().parents[1]
RFT = REPO / ".venv" / "bin" / "rft"
STEPS = 5


class Killed(BaseException):
    """Stands for ``kill -9`` in-process: nothing in rft catches it."""


def seed_for() -> int:
    return int(os.environ.get("RFT_FAULT_SEED", random.randrange(1 << 30)))


def errors(stderr: str) -> list[str]:
    """The error lines of rft's stderr (plugin-version and logging warnings aside)."""
    return [line for line in stderr.splitlines()
            if line.startswith("rft: ") and not line.lower().startswith("rft: warning")]


@contextlib.contextmanager
def one_thread():
    """CPU results do not depend on timing but on the thread count: pin it to the
    subprocesses' (``OMP_NUM_THREADS=1``) while a reference run is computed here."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def colocate_config(tmp: Path, model: Path, tasks: Path, **changes: Any) -> Path:
    """A colocate GRPO run of STEPS steps: checkpoints at 2 and 4 (and the final one at 5),
    an evaluation every 2 steps (its samples draw seeds too), a large learning rate so that
    any difference shows."""
    held_out = {"name": "heldout", "path": str(tasks), "repeat_times": 2,
                "format": {"prompt_key": "question", "response_key": "answer"},
                "default_workflow_type": "simple_workflow",
                "default_reward_fn_type": "accuracy_reward"}
    base = {"buffer__total_steps": STEPS, "trainer__save_interval": 2,
            "explorer__eval_interval": 2, "buffer__explorer_input__eval_tasksets": [held_out],
            "algorithm": {"algorithm_type": "grpo", "repeat_times": 2,
                          "optimizer": {"lr": 1e-2}}}
    return test_embedded_run.write_config(tmp, model, tasks, **{**base, **changes})


def actor(job: Path, step: int) -> dict[str, torch.Tensor]:
    return torch.load(job / f"global_step_{step}" / "trainer.pt", weights_only=False)["actor"]


def assert_same_weights(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor],
                        context: str = "") -> None:
    assert got.keys() == want.keys()
    differ = {k: (got[k].float() - want[k].float()).abs().max().item()
              for k in want if not torch.equal(got[k], want[k])}
    assert not differ, f"{context}weights differ from the uninterrupted run's: {differ}"


def monitor_steps(job: Path, role: str) -> list[int]:
    path = job / "monitor" / f"{role}.jsonl"
    return [json.loads(line)["step"] for line in path.read_text().splitlines()]


def monitor_records(job: Path, role: str) -> list[dict]:
    return [json.loads(line) for line in (job / "monitor" / f"{role}.jsonl").read_text()
            .splitlines()]


JOB = ("ck", "e2e", "run")


@pytest.fixture(scope="module")
def tasks_file(tmp_path_factory) -> Path:
    return arithmetic_tasks(tmp_path_factory.mktemp("fault_tasks"), 6)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, tiny_model_dir, tasks_file) -> dict[str, Any]:
    """The colocate run without faults: its final weights, monitors and counters."""
    tmp = tmp_path_factory.mktemp("uninterrupted")
    with one_thread():
        assert run(load_config(colocate_config(tmp, tiny_model_dir, tasks_file))) == 0
    job = tmp.joinpath(*JOB)
    return {"weights": actor(job, STEPS),
            "trainer": monitor_records(job, "trainer"),
            "explorer": monitor_records(job, "explorer"),
            "state": json.loads((job / f"global_step_{STEPS}" / "state.json").read_text())}


def same_metrics(got: list[dict], want: list[dict]) -> None:
    """The monitors of a resumed run hold each step once, with the uninterrupted run's
    values (timings aside)."""
    assert [r["step"] for r in got] == [r["step"] for r in want]
    for mine, theirs in zip(got, want, strict=True):
        drop = {k for k in theirs["metrics"] if k.startswith("timing_s/")}
        assert {k: v for k, v in mine["metrics"].items() if k not in drop} == \
            {k: v for k, v in theirs["metrics"].items() if k not in drop}


# ---- colocate: killed anywhere, resumed, bit-identical ----------------------------------


def kill_at(monkeypatch, owner: Any, name: str, when) -> None:
    """Make ``owner.name`` raise :class:`Killed` (before or after the real call) when
    ``when(args, kwargs, call_number)`` says so."""
    real = getattr(owner, name)
    calls = {"n": 0}

    def wrapper(*args, **kwargs):
        calls["n"] += 1
        verdict = when(args, kwargs, calls["n"])
        if verdict == "before":
            raise Killed(name)
        result = real(*args, **kwargs)
        if verdict == "after":
            raise Killed(name)
        return result

    monkeypatch.setattr(owner, name, wrapper)


def _colocate_kill_points():
    import rft.checkpoint.hashing
    import rft.rollout.explorer
    import rft.modes.colocate
    import rft.monitor.files
    import rft.trainer.torch_trainer

    step_is = lambda k: (lambda a, kw, n: "before" if a[1] == k else None)
    return {
        # before exploring step 3 (checkpoint 2 covers steps 1-2)
        "explore-3": (rft.rollout.explorer.Explorer, "explore_step", step_is(3)),
        # step 3 trained, its weights not yet synced nor logged
        "train-3": (rft.trainer.torch_trainer.TorchTrainer, "train_step",
                    lambda a, kw, n: "after" if n == 3 else None),
        # during the save of step 4: trainer.pt written, buffer.pt not (a .partial remains)
        # (torch.save writes to a rft.checkpoint.HashingFile: its path)
        "save-4": (rft.checkpoint.hashing.torch, "save",
                   lambda a, kw, n: "before" if "global_step_4.partial" in a[1].path
                   and a[1].path.endswith("buffer.pt") else None),
        # the last step logged, before the evaluation after it and the final checkpoint
        "log-5": (rft.monitor.files.JsonlMonitor, "log",
                  lambda a, kw, n: "after" if a[0].role == "trainer" and a[2] == 5 else None),
        # everything done: run again, the stage is finished and changes nothing
        "after-final": (rft.modes.colocate.ColocateStage, "finish",
                        lambda a, kw, n: "after"),
    }


@pytest.mark.parametrize("point", ["explore-3", "train-3", "save-4", "log-5", "after-final"])
def test_colocate_killed_anywhere_resumes_to_the_same_weights(point, tmp_path, tiny_model_dir,
                                                              tasks_file, uninterrupted,
                                                              monkeypatch):
    config = colocate_config(tmp_path, tiny_model_dir, tasks_file)
    job = tmp_path.joinpath(*JOB)
    owner, name, when = _colocate_kill_points()[point]
    with one_thread():
        with monkeypatch.context() as patch:
            kill_at(patch, owner, name, when)
            with pytest.raises(Killed):
                run(load_config(config))
        assert run(load_config(config)) == 0
    assert_same_weights(actor(job, STEPS), uninterrupted["weights"])
    same_metrics(monitor_records(job, "trainer"), uninterrupted["trainer"])
    same_metrics(monitor_records(job, "explorer"), uninterrupted["explorer"])
    state = json.loads((job / f"global_step_{STEPS}" / "state.json").read_text())
    want = uninterrupted["state"]
    assert (state["experiences_written"], state["experiences_read"]) == \
        (want["experiences_written"], want["experiences_read"]) == (20, 20)
    assert state["selectors"] == want["selectors"] and state["engine_seed"] == want["engine_seed"]
    assert not list(job.glob("*.partial"))


def sft_config(tmp: Path, model: Path, data: Path) -> Path:
    import yaml

    config = {
        "project": "e2e", "name": "sft", "mode": "train", "checkpoint_root_dir": str(tmp / "ck"),
        "algorithm": {"algorithm_type": "sft", "optimizer": {"lr": 1e-2}},
        "model": {"model_path": str(model), "max_prompt_tokens": 32, "max_response_tokens": 4},
        "buffer": {"batch_size": 4, "total_steps": STEPS, "trainer_input": {"experience_buffer": {
            "name": "sft", "storage_type": "file", "path": str(data),
            "format": {"prompt_type": "plaintext", "prompt_key": "question",
                       "response_key": "answer"}}}},
        "explorer": {"rollout_model": {"engine_type": "hf", "dtype": "float32"}},
        "synchronizer": {"sync_method": "checkpoint"},
        "trainer": {"trainer_type": "torch", "save_interval": 2},
        "monitor": {"monitor_type": "jsonl"},
    }
    path = tmp / "sft.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_sft_killed_mid_epoch_resumes_at_the_same_row(tmp_path, tiny_model_dir, monkeypatch):
    """A train-only stage over 6 rows in batches of 4 (epochs straddle steps): killed after
    step 3, resumed from ``global_step_2`` at the dataset position it saved."""
    import rft.modes.colocate

    data = tmp_path / "sft.jsonl"
    data.write_text("".join(json.dumps({"question": f"{i}+1=", "answer": str(i + 1)}) + "\n"
                            for i in range(6)))
    reference, killed = tmp_path / "reference", tmp_path / "killed"
    reference.mkdir()
    killed.mkdir()
    with one_thread():
        assert run(load_config(sft_config(reference, tiny_model_dir, data))) == 0
        config = sft_config(killed, tiny_model_dir, data)
        with monkeypatch.context() as patch:
            kill_at(patch, rft.modes.colocate.ColocateStage, "step",
                    lambda a, kw, n: "after" if a[1] == 3 else None)
            with pytest.raises(Killed):
                run(load_config(config))
        assert run(load_config(config)) == 0
    job, want = killed / "ck" / "e2e" / "sft", reference / "ck" / "e2e" / "sft"
    assert_same_weights(actor(job, STEPS), actor(want, STEPS))
    assert monitor_steps(job, "trainer") == [1, 2, 3, 4, 5]


def test_disk_full_during_a_save_is_one_line_and_the_run_resumes(tmp_path, tiny_model_dir,
                                                                 tasks_file, uninterrupted,
                                                                 monkeypatch, capsys):
    """``OSError(ENOSPC)`` while ``global_step_4`` is written: one line naming the folder,
    nothing half-written left, the older checkpoints intact; once there is room again the
    run resumes from ``global_step_2`` and ends with the uninterrupted run's weights."""
    import errno

    import rft.checkpoint
    from rft.checkpoint.disk_full import human

    config = colocate_config(tmp_path, tiny_model_dir, tasks_file)
    job = tmp_path.joinpath(*JOB)
    real_write = rft.checkpoint.HashingFile.write

    def full_disk(handle, data):  # the write layer of trainer.pt (a real tmpfs filled up:
        if "global_step_4.partial" in handle.path:  # tests/test_data_safety.py)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), handle.path)
        return real_write(handle, data)

    with one_thread():
        with monkeypatch.context() as patch:
            patch.setattr(rft.checkpoint.HashingFile, "write", full_disk)
            assert main(["run", str(config)]) == 2
        err = errors(capsys.readouterr().err)
        needed = sum(p.stat().st_size for p in (job / "global_step_2").rglob("*")
                     if p.is_file())
        assert len(err) == 1 and err[0].startswith(
            f"rft: checkpoint {job}/global_step_4: cannot write trainer.pt: No space left on "
            f"device (the checkpoint needs about {human(needed)}, ")
        assert [c.step for c in list_checkpoints(str(job))] == [2]
        assert sorted(p.name for p in job.glob("global_step_*")) == ["global_step_2"]
        assert run(load_config(config)) == 0
    assert_same_weights(actor(job, STEPS), uninterrupted["weights"])
    assert monitor_steps(job, "trainer") == [1, 2, 3, 4, 5]


def nan_in_place(path: Path) -> None:
    """The first float of the first tensor in a ``torch.save`` file becomes NaN; the size
    and the zip structure are kept, so the file still loads (torch checks no CRC)."""
    import zipfile

    with zipfile.ZipFile(path) as archive:
        info = next(i for i in archive.infolist() if "/data/" in i.filename)
    data = bytearray(path.read_bytes())
    name_length, extra_length = (int.from_bytes(data[info.header_offset + at:
                                                     info.header_offset + at + 2], "little")
                                 for at in (26, 28))
    start = info.header_offset + 30 + name_length + extra_length
    data[start:start + 4] = bytes.fromhex("0000c07f")
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", ["buffer.pt cut", "trainer.pt NaN in place"])
def test_corrupt_newest_checkpoint_falls_back_to_the_same_weights(tmp_path, tiny_model_dir,
                                                                  tasks_file, uninterrupted,
                                                                  monkeypatch, caplog, damage):
    """``global_step_4`` is damaged after a kill during step 5 (``buffer.pt`` cut short, or
    a NaN written over a weight of ``trainer.pt``, its size kept — which before loaded
    silently): resumed from ``global_step_2`` with a warning naming the file skipped, the
    run ends as if nothing happened."""
    import rft.trainer.torch_trainer

    config = colocate_config(tmp_path, tiny_model_dir, tasks_file)
    job = tmp_path.joinpath(*JOB)
    with one_thread():
        with monkeypatch.context() as patch:
            kill_at(patch, rft.trainer.torch_trainer.TorchTrainer, "train_step",
                    lambda a, kw, n: "before" if n == 5 else None)
            with pytest.raises(Killed):
                run(load_config(config))
        name = damage.split()[0]
        if name == "buffer.pt":
            (job / "global_step_4" / name).write_bytes(b"\0" * 10)
        else:
            nan_in_place(job / "global_step_4" / name)
        with caplog.at_level("WARNING", logger="rft.checkpoint"):
            assert run(load_config(config)) == 0
    assert any(f"checkpoint {job}/global_step_4/{name} is corrupt" in r.getMessage()
               and "skipped" in r.getMessage() for r in caplog.records)
    assert_same_weights(actor(job, STEPS), uninterrupted["weights"])
    assert monitor_steps(job, "trainer") == [1, 2, 3, 4, 5]


# ---- monitors record each step once --------------------------------------------------


def test_jsonl_monitor_rewinds_to_the_resumed_step(tmp_path):
    from rft.monitor.files import JsonlMonitor

    monitor = JsonlMonitor("p", "n", "trainer", str(tmp_path))
    for step in (0, 1, 2, 3):
        monitor.log({"x": float(step)}, step)
    monitor.close()
    with open(monitor.path, "a") as handle:
        handle.write('{"step": 4, "ti')  # the line a kill -9 cut short
    resumed = JsonlMonitor("p", "n", "trainer", str(tmp_path))
    resumed.rewind(2)
    resumed.log({"x": 30.0}, 3)
    resumed.close()
    lines = [json.loads(x) for x in Path(monitor.path).read_text().splitlines()]
    assert [(r["step"], r["metrics"]["x"]) for r in lines] == [(0, 0.0), (1, 1.0), (2, 2.0),
                                                               (3, 30.0)]
    again = JsonlMonitor("p", "n", "trainer", str(tmp_path))
    again.rewind(-1)  # restarted from scratch (no checkpoint): nothing of the first try stays
    again.close()
    assert Path(monitor.path).read_text() == ""


def test_tensorboard_monitor_purges_the_steps_it_redoes(tmp_path):
    pytest.importorskip("tensorboard")
    from rft.monitor.tensorboard import TensorboardMonitor
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    first = TensorboardMonitor("p", "n", "trainer", str(tmp_path))
    for step in (1, 2, 3):
        first.log({"a": float(step)}, step)
    first.close()
    resumed = TensorboardMonitor("p", "n", "trainer", str(tmp_path))
    resumed.rewind(1)
    for step in (2, 3):
        resumed.log({"a": 10.0 * step}, step)
    resumed.close()
    events = EventAccumulator(resumed.path)
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("a")] == [(1, 1.0), (2, 20.0), (3, 30.0)]


# ---- explore + train over one SQLite buffer (in-process, one side at a time) ------------


def split_config(tmp: Path, model: Path, tasks: Path, mode: str, **changes: Any) -> Path:
    return test_split_modes.write_config(tmp, model, tasks, mode, **changes)


def buffer_rows(db: Path) -> list[dict]:
    with sqlite3.connect(db) as con:
        rows = con.execute("SELECT consumed, read_step, leased, payload FROM experiences "
                           "ORDER BY id").fetchall()
    return [{"consumed": c, "read_step": s, "leased": l, "eid": json.loads(p)["eid"],
             "payload": json.loads(p)} for c, s, l, p in rows]


def eid_key(row: dict) -> tuple:
    e = row["eid"]
    return e["batch"], e["task"], e["run"], e["suffix"]


def assert_each_experience_trained_once(db: Path, steps: int, per_step: int) -> None:
    """Counted by eid: every row written once, read once, by one step, final; each step
    read ``per_step`` of them."""
    rows = buffer_rows(db)
    assert len(rows) == steps * per_step
    assert len({eid_key(r) for r in rows}) == len(rows), "an experience was written twice"
    assert [(r["consumed"], r["leased"]) for r in rows] == [(1, 0)] * len(rows), \
        "an experience was lost or read twice"
    assert sorted(r["read_step"] for r in rows) == sorted(
        s for s in range(1, steps + 1) for _ in range(per_step))


def test_trainer_killed_after_reading_gets_the_uncovered_rows_again(tmp_path, tiny_model_dir,
                                                                    tasks_file, monkeypatch):
    """``sync_interval: 2``: the trainer is killed after training step 3 (read, not covered
    by a checkpoint). Restarted, it resumes from ``global_step_2``, reads step 3's rows again
    and ends with the weights of a trainer that was never killed."""
    import rft.modes.train

    explore = split_config(tmp_path, tiny_model_dir, tasks_file, "explore",
                           buffer__total_steps=4, synchronizer__wait_for_checkpoint=False)
    assert run(load_config(explore)) == 0  # 4 steps of experiences, all from version 0
    db = tmp_path / "exp.db"
    reference = tmp_path / "reference"
    reference.mkdir()
    shutil.copy(db, reference / "exp.db")
    changes = {"buffer__total_steps": 4, "synchronizer__sync_interval": 2}
    with one_thread():
        assert run(load_config(split_config(reference, tiny_model_dir, tasks_file, "train",
                                             **changes))) == 0
        train = split_config(tmp_path, tiny_model_dir, tasks_file, "train", **changes)
        with monkeypatch.context() as patch:
            real_step = rft.modes.train.TrainAloneStage.step

            def step(self, s):
                real_step(self, s)
                if s == 3:
                    raise Killed("trainer")

            patch.setattr(rft.modes.train.TrainAloneStage, "step", step)
            with pytest.raises(Killed):
                run(load_config(train))
        leased = [r for r in buffer_rows(db) if r["leased"]]
        assert [(r["read_step"], r["eid"]["batch"]) for r in leased] == [(3, 3)] * 4
        assert run(load_config(train)) == 0
    job = tmp_path / "ck" / "split" / "run"
    assert_same_weights(actor(job, 4), actor(reference / "ck" / "split" / "run", 4))
    assert_each_experience_trained_once(db, 4, 4)
    assert monitor_steps(job, "trainer") == [1, 2, 3, 4]
    assert json.loads((job / "global_step_4" / "state.json").read_text())[
        "experiences_read"] == 16


def test_explorer_killed_after_writing_a_step_does_not_write_it_twice(tmp_path,
                                                                      tiny_model_dir,
                                                                      tasks_file, monkeypatch):
    """Killed between writing step 2's experiences and recording step 2: restarted, it redoes
    step 2 (same tasks, same seeds) and the buffer keeps the first write only."""
    import rft.modes.run_state

    changes = {"buffer__total_steps": 3, "synchronizer__wait_for_checkpoint": False}
    reference = tmp_path / "reference"
    reference.mkdir()
    assert run(load_config(split_config(reference, tiny_model_dir, tasks_file, "explore",
                                        **changes))) == 0
    config = split_config(tmp_path, tiny_model_dir, tasks_file, "explore", **changes)
    with monkeypatch.context() as patch:
        kill_at(patch, rft.modes.run_state.RunState, "write",
                lambda a, kw, n: "before" if a[0].step == 2 else None)
        with pytest.raises(Killed):
            run(load_config(config))
    assert len(buffer_rows(tmp_path / "exp.db")) == 8  # step 2 written, not recorded
    assert run(load_config(config)) == 0
    rows, want = buffer_rows(tmp_path / "exp.db"), buffer_rows(reference / "exp.db")
    assert [r["payload"] for r in rows] == [r["payload"] for r in want]  # sampled alike
    assert len({eid_key(r) for r in rows}) == len(rows) == 12
    job = tmp_path / "ck" / "split" / "run"
    assert [s for s in monitor_steps(job, "explorer")] == [1, 2, 3, 3]  # 3: eval after
    assert json.loads((job / "explorer_state.json").read_text())["experiences_written"] == 12


# ---- hanging and raising plugins --------------------------------------------------------


def runner_task(i: int) -> Task:
    return Task(raw={}, index=i, taskset="t", prompt="p", truth="1", repeat_times=1,
                reward_fn=lambda response, truth: {"accuracy": 1.0})


class Quick(Workflow):
    def run(self) -> list[Experience]:
        exp = Experience(tokens=torch.tensor([1, 2]), prompt_length=1)
        self.score(exp, "1")
        return [exp]


def test_hung_tasks_hold_no_slot_and_are_counted():
    """2 of 8 tasks hang on 2 runners: the 6 others finish, the 2 are abandoned after
    max_timeout (their threads are daemons, counted until they end)."""
    release = threading.Event()

    class Hang(Workflow):
        def run(self):
            release.wait(60)
            return []

    runner = WorkflowRunner(lambda t, calls: Hang(t, None) if t.index in (0, 4) else Quick(t, None),
                            max_timeout=0.5, max_retry_times=2, workers=2)
    started = time.monotonic()
    results = runner.run_tasks([runner_task(i) for i in range(8)])
    elapsed = time.monotonic() - started
    assert [r.ok for r in results] == [i not in (0, 4) for i in range(8)]
    assert [r.timed_out for r in results] == [i in (0, 4) for i in range(8)]
    assert all(r.attempts == 1 for r in results)  # a hung task is not retried
    assert elapsed < 3, elapsed
    assert runner.abandoned == 2 and runner.abandoned_alive() == 2
    hung = list(runner._abandoned)
    assert len(hung) == 2 and all(t.daemon and t.is_alive() for t in hung)
    assert sorted(t.name.split("-")[2] for t in hung) == ["t[0]", "t[4]"]
    release.set()
    for thread in hung:
        thread.join(5)
    assert runner.abandoned_alive() == 0
    runner.close()


def test_deterministic_failures_are_not_retried():
    calls: list[str] = []

    class Failing(Workflow):
        def run(self):
            kind = self.task.raw["kind"]
            calls.append(kind)
            if kind == "rft":
                raise RftError("prompt 0 has 900 tokens, more than the limit of 64")
            if kind == "marked":
                error = ValueError("bad row")
                error.retryable = False
                raise error
            if kind == "wrong-type":
                return "nope"
            raise ConnectionError("reset by peer")

    runner = WorkflowRunner(lambda t, calls: Failing(t, None), max_timeout=5, max_retry_times=3)
    for kind, attempts in (("rft", 1), ("marked", 1), ("wrong-type", 1), ("transient", 4)):
        task = Task(raw={"kind": kind}, index=0, taskset="t", prompt="p", repeat_times=1)
        result = runner.run_task(task)
        assert (result.ok, result.attempts) == (False, attempts), kind
        assert calls.count(kind) == attempts
    runner.close()


def test_a_prompt_over_the_limit_fails_once_and_names_itself(tmp_path, tiny_model_dir,
                                                             tasks_file):
    config = test_embedded_run.write_config(
        tmp_path, tiny_model_dir, tasks_file, buffer__total_steps=1,
        model__max_prompt_tokens=4, model__enable_prompt_truncation=False,
        explorer__max_retry_times=3)
    with pytest.raises(RftError) as caught:
        run(load_config(config))
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("step 1: no experiences to train on; 2 task(s) failed so far, "
                              "the last: task train[1] failed after 1 attempt(s): RftError: "
                              "prompt 0 has ")
    assert "raise model.max_prompt_tokens or set model.enable_prompt_truncation: true" in message


# ---- bad data files and a full disk: one line naming the culprit -----------------------


BAD_FILES = {
    "non-utf8": (b'{"question": "1+1=", "answer": "2"}\n{"question": "2+\xff1=", "answer": "3"}\n',
                 "line 2: byte 0xff at column 17 is not UTF-8 (data files must be UTF-8)"),
    "malformed-json": (b'{"question": "1+1=", "answer": "2"}\n\n{"question": "2+1=", "answer": 3\n',
                       "line 3, column 33: malformed JSON: Expecting ',' delimiter"),
    "not-an-object": (b'{"question": "1+1=", "answer": "2"}\n[1, 2]\n',
                      "line 2: a JSON object (one row) expected, got list"),
    "empty": (b"", None),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_a_bad_taskset_file_is_one_line_with_file_and_line(case, tmp_path, tiny_model_dir,
                                                           capsys):
    content, problem = BAD_FILES[case]
    data = tmp_path / "tasks.jsonl"
    data.write_bytes(content)
    config = test_embedded_run.write_config(tmp_path, tiny_model_dir, data)
    where = f"taskset 'train' ({data})"
    # rft validate reads the first rows of every data file before a run starts …
    assert main(["validate", str(config)]) == 2
    out, err = capsys.readouterr()
    expected = f"{where}: {problem or 'the file is empty'}"
    assert (out, errors(err)) == ("", [f"rft: {expected}"])
    # … and the run says the same, had it not been validated
    assert main(["run", str(config)]) == 2
    expected = f"{where}: {problem or 'the taskset is empty (the file is empty)'}"
    assert errors(capsys.readouterr().err) == [f"rft: {expected}"]


def test_validate_checks_the_dataset_of_a_train_only_stage(tmp_path, tiny_model_dir, capsys):
    data = tmp_path / "sft.jsonl"
    data.write_text('{"question": "1+1=", "answer": "2"}\n{"question": "2+1="}\n')
    assert main(["validate", str(sft_config(tmp_path, tiny_model_dir, data))]) == 2
    assert errors(capsys.readouterr().err) == [
        f"rft: experience buffer 'sft' ({data}): row 2 has no key 'answer' "
        "(format.response_key); keys: question"]
    data.write_text('{"question": "1+1=", "answer": "2"}\n{"question": "2+1=" "answer": 3}\n')
    assert main(["validate", str(sft_config(tmp_path, tiny_model_dir, data))]) == 2
    assert errors(capsys.readouterr().err) == [
        (f"rft: experience buffer 'sft' ({data}): line 2, column 21: malformed JSON: Expecting "
         "',' delimiter")]


def test_a_full_disk_under_the_monitor_is_one_line(tmp_path, tiny_model_dir, tasks_file,
                                                   monkeypatch, capsys):
    import errno

    import rft.monitor.files

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(rft.monitor.files.os, "fsync", full)
    config = test_embedded_run.write_config(tmp_path, tiny_model_dir, tasks_file)
    assert main(["run", str(config)]) == 2
    job = tmp_path.joinpath(*JOB)
    assert errors(capsys.readouterr().err) == [
        (f"rft: monitor jsonl: cannot write {job}/monitor/explorer.jsonl: No space left on "
         "device")]


# ---- real processes: kill -9 at random points, hangs -------------------------------------


def child_env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


class Processes:
    """Subprocesses of one test, each in its own session; all killed on the way out."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.running: dict[str, subprocess.Popen] = {}

    def start(self, name: str, argv: list[str]) -> subprocess.Popen:
        log = open(self.tmp / f"{name}.log", "a")  # noqa: SIM115
        proc = subprocess.Popen(argv, env=child_env(), stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        self.running[name] = proc
        return proc

    def kill(self, name: str) -> None:
        proc = self.running[name]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)

    def wait(self, name: str, timeout: float) -> int:
        return self.running[name].wait(timeout)

    def output(self, name: str) -> str:
        return (self.tmp / f"{name}.log").read_text(errors="replace")

    def close(self) -> None:
        for proc in self.running.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(30)


@pytest.fixture
def processes(tmp_path):
    procs = Processes(tmp_path)
    yield procs
    procs.close()


def wait_for_lines(path: Path, count: int, proc: subprocess.Popen, deadline: float) -> None:
    """Until ``path`` has ``count`` lines (or the process ended)."""
    while proc.poll() is None:
        if path.exists() and len(path.read_text().splitlines()) >= count:
            return
        assert time.monotonic() < deadline, f"{path} never reached {count} lines"
        time.sleep(0.02)


@pytest.mark.slow
def test_colocate_kill_9_at_a_random_point(tmp_path, tiny_model_dir, tasks_file, uninterrupted,
                                           processes):
    seed = seed_for()
    rng = random.Random(seed)
    config = colocate_config(tmp_path, tiny_model_dir, tasks_file)
    job = tmp_path.joinpath(*JOB)
    deadline = time.monotonic() + 240
    lines, delay = rng.randrange(0, STEPS), rng.uniform(0, 0.6)
    proc = processes.start("first", [str(RFT), "run", str(config)])
    wait_for_lines(job / "monitor" / "trainer.jsonl", lines, proc, deadline)
    time.sleep(delay)
    processes.kill("first")
    processes.start("resumed", [str(RFT), "run", str(config)])
    assert processes.wait("resumed", 180) == 0, \
        f"seed {seed}: resumed run failed:\n{processes.output('resumed')[-3000:]}"
    context = f"seed {seed} (killed {delay:.2f} s after trainer line {lines})"
    assert_same_weights(actor(job, STEPS), uninterrupted["weights"], f"{context}: ")
    assert monitor_steps(job, "trainer") == [1, 2, 3, 4, 5], context
    same_metrics(monitor_records(job, "explorer"), uninterrupted["explorer"])


@pytest.mark.slow
def test_explore_and_train_killed_at_random_points(tmp_path, tiny_model_dir, tasks_file,
                                                   processes):
    """Two processes over one SQLite buffer, lockstep (``sync_interval: 1``,
    ``wait_for_checkpoint``): the explorer, then the trainer, are killed with ``kill -9`` at
    random points and restarted. Both finish; every experience is trained once; the weights
    are those of the same run uninterrupted — which, lockstep, is the colocate run of the
    same config (computed here)."""
    seed = seed_for()
    rng = random.Random(seed)
    steps = 4
    changes = {"buffer__total_steps": steps}
    reference = tmp_path / "reference"
    reference.mkdir()
    with one_thread():
        colocate = split_config(reference, tiny_model_dir, tasks_file, "colocate",
                                synchronizer={"sync_method": "memory", "sync_interval": 1},
                                buffer__trainer_input__experience_buffer={
                                    "name": "exp", "storage_type": "queue"}, **changes)
        assert run(load_config(colocate)) == 0
    want = actor(reference / "ck" / "split" / "run", steps)

    configs = {m: split_config(tmp_path, tiny_model_dir, tasks_file, m, **changes)
               for m in ("train", "explore")}
    job = tmp_path / "ck" / "split" / "run"
    deadline = time.monotonic() + 300
    for mode, config in configs.items():
        processes.start(mode, [str(RFT), "run", str(config)])
    plan = []
    for mode, role in (("explore", "explorer"), ("train", "trainer")):
        lines, delay = rng.randrange(1, steps), rng.uniform(0, 0.5)
        plan.append(f"{mode} after {role} line {lines} + {delay:.2f} s")
        wait_for_lines(job / "monitor" / f"{role}.jsonl", lines, processes.running[mode],
                       deadline)
        time.sleep(delay)
        processes.kill(mode)
        processes.start(mode, [str(RFT), "run", str(configs[mode])])
    context = f"seed {seed}: killed {'; '.join(plan)}"
    for mode in configs:
        assert processes.wait(mode, max(1.0, deadline - time.monotonic())) == 0, \
            f"{context}: {mode} failed:\n{processes.output(mode)[-3000:]}"
    assert_each_experience_trained_once(tmp_path / "exp.db", steps, 4)
    assert monitor_steps(job, "trainer") == list(range(1, steps + 1)), context
    assert [s for s in monitor_steps(job, "explorer")] == [*range(1, steps + 1), steps], context
    versions = {(r["eid"]["batch"], r["payload"]["model_version"])
                for r in buffer_rows(tmp_path / "exp.db")}
    assert versions == {(s, s - 1) for s in range(1, steps + 1)}, context
    assert_same_weights(actor(job, steps), want, f"{context}: ")


def both_config(tmp: Path, model: Path, tasks: Path) -> Path:
    """:func:`colocate_config` in mode ``both`` — explorer, trainer and buffer as Ray actors,
    on a private Ray cluster of the run's own — over a SQLite buffer, in lockstep
    (``sync_interval: 1``, ``sync_offset: 0``)."""
    return colocate_config(tmp, model, tasks, mode="both", cluster__ray_address="local",
                           buffer__trainer_input__experience_buffer={
                               "name": "exp", "storage_type": "sql",
                               "path": str(tmp / "exp.db")})


def wait_for_step(path: Path, step: int, proc: subprocess.Popen, since: float,
                  deadline: float) -> None:
    """Until a record of ``step`` or later, logged after ``since`` (epoch seconds), is in the
    jsonl monitor file ``path`` (or the process ended): lines an earlier run left are not
    taken for this run's."""
    while proc.poll() is None:
        records = [json.loads(line) for line in path.read_text().splitlines()
                   if line.endswith("}")] if path.exists() else []
        if any(r["step"] >= step and r["time"] >= since for r in records):
            return
        assert time.monotonic() < deadline, f"{path} never reached step {step}"
        time.sleep(0.02)


def actor_process(root: int, title: str) -> Any:
    """The process under ``root`` whose command line holds ``title`` (Ray names an actor's
    process ``ray::<class>``), or ``None``."""
    import psutil

    with contextlib.suppress(psutil.Error):
        for proc in psutil.Process(root).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if any(title in part for part in proc.cmdline()):
                    return proc
    return None


def trained_by(db: Path) -> dict[tuple, int]:
    """eid → the step that trained it."""
    return {eid_key(r): r["read_step"] for r in buffer_rows(db)}


@pytest.mark.slow
def test_both_killed_twice_resumes_to_the_uninterrupted_weights(tmp_path, tiny_model_dir,
                                                                tasks_file, processes):
    """Mode ``both``: the launcher's process group (coordinator, Ray, every actor) is killed
    with ``kill -9`` at a random point and the run restarted; then the trainer actor alone
    is killed at a random later point — the run ends with one line naming it — and the run
    restarted again. It ends with the weights of the same run uninterrupted, bit for bit;
    the monitors hold each step once, with the uninterrupted run's values (timings aside);
    the counters go on; every experience (by eid) is written once and trained once, at the
    uninterrupted run's step."""
    seed = seed_for()
    rng = random.Random(seed)
    deadline = time.monotonic() + 600
    reference = tmp_path / "reference"
    reference.mkdir()
    processes.start("reference", [str(RFT), "run", str(both_config(reference, tiny_model_dir,
                                                                   tasks_file))])
    assert processes.wait("reference", 300) == 0, processes.output("reference")[-3000:]
    config = both_config(tmp_path, tiny_model_dir, tasks_file)
    job, want_job = tmp_path.joinpath(*JOB), reference.joinpath(*JOB)
    trainer_log = job / "monitor" / "trainer.jsonl"

    lines, delay = rng.randrange(0, 3), rng.uniform(0, 0.5)
    plan = [f"launcher after trainer line {lines} + {delay:.2f} s"]
    proc = processes.start("first", [str(RFT), "run", str(config)])
    wait_for_lines(trainer_log, lines, proc, deadline)
    time.sleep(delay)
    processes.kill("first")

    step, delay = rng.randrange(3, STEPS), rng.uniform(0, 0.3)
    started = time.time()
    proc = processes.start("second", [str(RFT), "run", str(config)])
    wait_for_step(trainer_log, step, proc, started, deadline)
    time.sleep(delay)
    trainer = actor_process(proc.pid, "ray::TrainerService")
    if trainer is not None and proc.poll() is None:
        plan.append(f"trainer actor after its step {step} + {delay:.2f} s")
        killed = time.monotonic()
        trainer.kill()
        status = processes.wait("second", 120)
        ended = time.monotonic() - killed
        plan[-1] += f" (the run ended {ended:.1f} s later)"
        context = f"seed {seed}: killed {'; '.join(plan)}"
        output = processes.output("second")
        assert status != 0 and ended < 60, f"{context}: exit {status} after {ended:.0f} s"
        failures = [line for line in errors(output) if "Ray cluster at" not in line]
        assert len(failures) == 1 and failures[0].startswith(
            "rft: trainer actor 'trainer' died"), f"{context}:\n{output[-3000:]}"
    else:  # the second run ended first
        plan.append("(the second run finished before its trainer could be killed)")
        assert processes.wait("second", 120) == 0, \
            f"seed {seed}: {'; '.join(plan)}:\n{processes.output('second')[-3000:]}"
    context = f"seed {seed}: killed {'; '.join(plan)}"
    print(context)  # which kill points this run took (pytest -s)

    processes.start("third", [str(RFT), "run", str(config)])
    assert processes.wait("third", max(1.0, deadline - time.monotonic())) == 0, \
        f"{context}: the resumed run failed:\n{processes.output('third')[-3000:]}"
    assert_same_weights(actor(job, STEPS), actor(want_job, STEPS), f"{context}: ")
    for role in ("trainer", "explorer"):
        same_metrics(monitor_records(job, role), monitor_records(want_job, role))
    state = json.loads((job / f"global_step_{STEPS}" / "state.json").read_text())
    want = json.loads((want_job / f"global_step_{STEPS}" / "state.json").read_text())
    assert (state["experiences_written"], state["experiences_read"]) == \
        (want["experiences_written"], want["experiences_read"]) == (20, 20), context
    assert state["selectors"] == want["selectors"] and state["engine_seed"] == want["engine_seed"]
    assert_each_experience_trained_once(tmp_path / "exp.db", STEPS, 4)
    assert trained_by(tmp_path / "exp.db") == trained_by(reference / "exp.db"), context
    assert not list(job.glob("*.partial"))


HANGING_RUN = textwrap.dedent("""
    import functools, os, sys, time
    from pathlib import Path
    from rft import hookimpl
    from rft.cli import main
    from rft.plugins import PluginRegistry

    HANG = set(sys.argv[2].split(","))

    def hanging_reward(response, truth, args=None):
        if str(truth) in HANG:
            Path(os.environ["RFT_HANG_MARK"]).touch()
            time.sleep(3600)  # a reward stuck on a dead service
        return {"accuracy": 1.0}

    class Plugin:
        @hookimpl
        def register_reward_fns(self):
            return {"hanging_reward": hanging_reward}

    # `rft run CONFIG`, with the plugin registered in-process
    PluginRegistry.create = functools.partial(PluginRegistry.create.__func__, PluginRegistry,
                                              extra_plugins=[Plugin()])
    sys.exit(main(["run", sys.argv[1]]))
""")


@pytest.mark.slow
@pytest.mark.parametrize("hung", ["2,5", "1,2,3,4,5,6,7,8", "interrupted"])
def test_a_hanging_reward_releases_its_slot_and_the_process_exits(hung, tmp_path,
                                                                  tiny_model_dir, processes):
    """8 tasks, ``max_timeout: 2``: with 2 hung the run finishes on the 6 others; with all
    hung it fails with one line; with ``max_timeout: 600`` a Ctrl-C while they hang ends it —
    and each time the process exits at once, although the hung rewards' threads still
    sleep."""
    tasks = arithmetic_tasks(tmp_path, 8)
    config = test_embedded_run.write_config(
        tmp_path, tiny_model_dir, tasks, buffer__total_steps=1, buffer__batch_size=8,
        explorer__max_timeout=600 if hung == "interrupted" else 2,
        buffer__explorer_input__taskset__default_reward_fn_type="hanging_reward")
    script = tmp_path / "hanging_run.py"
    script.write_text(HANGING_RUN)
    mark = tmp_path / "hanging"
    os.environ["RFT_HANG_MARK"] = str(mark)
    try:
        started = time.monotonic()
        proc = processes.start("run", [sys.executable, str(script), str(config),
                                       "1,2,3,4,5,6,7,8" if hung == "interrupted" else hung])
    finally:
        del os.environ["RFT_HANG_MARK"]
    if hung == "interrupted":
        while not mark.exists():
            assert proc.poll() is None and time.monotonic() - started < 120
            time.sleep(0.05)
        time.sleep(0.5)
        started = time.monotonic()
        proc.send_signal(signal.SIGINT)
    status = processes.wait("run", 120)
    elapsed = time.monotonic() - started
    output = processes.output("run")
    job = tmp_path.joinpath(*JOB)
    assert elapsed < (20 if hung == "interrupted" else 60), \
        f"the process took {elapsed:.0f} s to end:\n{output[-2000:]}"
    assert "Traceback" not in output, output[-3000:]
    if hung == "2,5":
        assert status == 0, output[-3000:]
        metrics = monitor_records(job, "explorer")[0]["metrics"]
        assert (metrics["rollout/failed_tasks"], metrics["rollout/timed_out_tasks"],
                metrics["rollout/abandoned_threads"], metrics["rollout/experiences"]) == \
            (2.0, 2.0, 2.0, 12.0)
        assert monitor_steps(job, "trainer") == [1]
    elif hung == "interrupted":
        assert (status, errors(output)) == (130, ["rft: interrupted"]), output[-3000:]
    else:
        assert status == 2, output[-3000:]
        assert errors(output) == [("rft: step 1: no experiences to train on; 8 task(s) failed "
                                   "so far, the last: task train[7] failed after 1 attempt(s): "
                                   "workflow timed out after 2 s (explorer.max_timeout)")]


# ---- explorer.over_rollout / explorer.dynamic_timeout ------------------------------------


def sleepy_task(i: int, sleep: float) -> Task:
    return Task(raw={"sleep": sleep}, index=i, taskset="t", prompt="p", truth="1",
                repeat_times=1, reward_fn=lambda response, truth: {"accuracy": 1.0})


@pytest.mark.parametrize("mode", ["sequential", "multi-threading", "asynchronous"])
def test_over_rollout_goes_on_without_the_stragglers(mode):
    """8 tasks, 2 of them slow (5 s): with min_done 6 and wait_after_min 0.3 the batch returns
    after about 0.3 s with the 6 quick results; the 2 slow ones are cut off, and no result of
    theirs is handed over later."""
    sleeps = [0.0, 5.0, 0.0, 0.0, 0.0, 5.0, 0.0, 0.0]
    handed: list[int] = []
    runner = WorkflowRunner(lambda t, calls: Sleepy(t, None), max_timeout=30, max_retry_times=0,
                            concurrent_mode=mode, workers=4)
    started = time.monotonic()
    results = runner.run_tasks([sleepy_task(i, s) for i, s in enumerate(sleeps)],
                               on_result=lambda r: handed.append(r.task.index),
                               min_done=6, wait_after_min=0.3)
    elapsed = time.monotonic() - started
    assert 0.3 <= elapsed < 2.0, elapsed
    assert [r.cut_off for r in results] == [s > 0 for s in sleeps]
    assert [r.ok for r in results] == [s == 0 for s in sleeps]
    assert sorted(handed) == [0, 2, 3, 4, 6, 7]
    runner.close()


def test_over_rollout_keeps_stragglers_that_end_within_wait_after_min():
    """A straggler of 0.3 s ends within wait_after_min (2 s): nothing is cut, and the batch
    does not wait the full 2 s once every task ended."""
    runner = WorkflowRunner(lambda t, calls: Sleepy(t, None), max_timeout=30, max_retry_times=0,
                            concurrent_mode="multi-threading", workers=4)
    started = time.monotonic()
    results = runner.run_tasks([sleepy_task(i, 0.3 if i == 0 else 0.0) for i in range(4)],
                               min_done=3, wait_after_min=2.0)
    assert time.monotonic() - started < 1.5
    assert all(r.ok and not r.cut_off for r in results)
    runner.close()


def test_dynamic_timeout_is_ratio_times_the_mean_of_successful_tasks():
    """Tasks of 0.1 s succeed; with ratio 3 the next timeout is about 0.3 s (max_timeout 30),
    so a 5 s task is abandoned after ~0.3 s, named in its error; without the dynamic timeout
    the first timeout is max_timeout."""
    runner = WorkflowRunner(lambda t, calls: Sleepy(t, None), max_timeout=30, max_retry_times=0,
                            dynamic_timeout_ratio=3.0)
    assert runner.task_timeout() == 30.0  # no success yet
    first = runner.run_tasks([sleepy_task(i, 0.1) for i in range(2)])
    assert all(r.ok for r in first)
    assert 0.3 <= runner.task_timeout() < 0.5, runner.task_timeout()
    started = time.monotonic()
    [slow] = runner.run_tasks([sleepy_task(9, 5.0)])
    assert time.monotonic() - started < 1.5
    assert slow.timed_out and not slow.ok
    assert "explorer.dynamic_timeout" in (slow.error or "")
    capped = WorkflowRunner(lambda t, calls: Sleepy(t, None), max_timeout=1, max_retry_times=0,
                            dynamic_timeout_ratio=100.0)
    capped.run_tasks([sleepy_task(0, 0.05)])
    assert capped.task_timeout() == 1.0  # bounded by max_timeout
    runner.close()
    capped.close()


def test_over_rollout_cuts_coroutine_workflows_in_asynchronous_mode():
    """A workflow with ``async def run_async`` (its ``run`` would fail the test) under the
    asynchronous mode: the slow coroutine is cut off like a thread."""

    class AsyncSleepy(Workflow):
        def run(self) -> list[Experience]:
            raise AssertionError("run() called instead of run_async()")

        async def run_async(self) -> list[Experience]:
            await asyncio.sleep(self.task.raw["sleep"])
            exp = Experience(tokens=torch.tensor([1, 2]), prompt_length=1)
            self.score(exp, "1")
            return [exp]

    runner = WorkflowRunner(lambda t, calls: AsyncSleepy(t, None), max_timeout=30, max_retry_times=0,
                            concurrent_mode="asynchronous", workers=4)
    started = time.monotonic()
    results = runner.run_tasks([sleepy_task(i, 5.0 if i == 3 else 0.0) for i in range(4)],
                               min_done=3, wait_after_min=0.2)
    assert time.monotonic() - started < 2.0
    assert [r.cut_off for r in results] == [False, False, False, True]
    assert [r.ok for r in results] == [True, True, True, False]
    runner.close()


def test_rollout_metrics_count_cut_off_tasks_apart_from_failures():
    results = [TaskResult(sleepy_task(0, 0)), TaskResult(sleepy_task(1, 0), ok=False),
               TaskResult(sleepy_task(2, 0), ok=False, cut_off=True)]
    metrics = rollout_metrics([], results)
    assert metrics["rollout/failed_tasks"] == 1.0
    assert metrics["rollout/over_rollout_dropped_tasks"] == 1.0


@pytest.mark.slow
def test_over_rollout_steps_go_on_without_hung_tasks(tmp_path, tiny_model_dir, processes):
    """A real run, 8 tasks of which 2 hang in their reward, ``max_timeout: 600``: with
    ``over_rollout.ratio: 0.25`` the step goes on once 6 ended (+ ``wait_after_min`` 0.5 s),
    the 2 are dropped and counted, not failed; the trainer trains on the 6."""
    tasks = arithmetic_tasks(tmp_path, 8)
    config = test_embedded_run.write_config(
        tmp_path, tiny_model_dir, tasks, buffer__total_steps=1, buffer__batch_size=8,
        explorer__max_timeout=600, explorer__runner_per_model=8,
        explorer__concurrent_mode="multi-threading",
        explorer__over_rollout={"ratio": 0.25, "wait_after_min": 0.5},
        synchronizer__sync_style="explorer_driven",
        buffer__explorer_input__taskset__default_reward_fn_type="hanging_reward")
    script = tmp_path / "hanging_run.py"
    script.write_text(HANGING_RUN)
    os.environ["RFT_HANG_MARK"] = str(tmp_path / "hanging")
    try:
        started = time.monotonic()
        processes.start("run", [sys.executable, str(script), str(config), "2,5"])
    finally:
        del os.environ["RFT_HANG_MARK"]
    status = processes.wait("run", 120)
    output = processes.output("run")
    assert status == 0, output[-3000:]
    assert time.monotonic() - started < 60
    metrics = monitor_records(tmp_path.joinpath(*JOB), "explorer")[0]["metrics"]
    assert (metrics["rollout/over_rollout_dropped_tasks"], metrics["rollout/failed_tasks"],
            metrics["rollout/timed_out_tasks"], metrics["rollout/experiences"]) == \
        (2.0, 0.0, 0.0, 12.0)
    assert monitor_steps(tmp_path.joinpath(*JOB), "trainer") == [1]
