"""``explore`` / ``train`` / ``bench`` modes: one side per process, weights through
checkpoints, experiences through one SQLite buffer — with real processes, SQLite and the
tiny model."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import torch
import yaml

from fixtures_models import apply_changes, arithmetic_tasks
from rft.buffer.storage import BufferTimeout, open_storage
from rft.checkpoint import (
    CheckpointError,
    list_checkpoints,
    load_actor_weights,
    newest_checkpoint,
    save_checkpoint,
)
from rft.config import load_config
from rft.errors import RftError
from rft.engines.hf_engine import HFEngine
from rft.launcher import run
from rft.monitor.base import Monitor
from rft import hookimpl
from rft.plugins import PluginRegistry
from rft.modes.checkpoint_sync import SyncTimeout

REPO = Path(__file__).resolve().parents[1]
RFT = REPO / ".venv" / "bin" / "rft"
STEPS = 3
"""Explore and train steps of the two-process run."""


def write_config(tmp_path: Path, model: Path, tasks: Path, mode: str, **changes) -> Path:
    """A config of one explore/train/bench run; ``a__b=value`` sets ``a.b``."""
    config = {
        "project": "split", "name": "run", "mode": mode,
        "checkpoint_root_dir": str(tmp_path / "ck"),
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 2, "optimizer": {"lr": 1e-2}},
        "model": {"model_path": str(model), "max_prompt_tokens": 128, "max_response_tokens": 8},
        "cluster": {"node_num": 1, "gpu_per_node": 0},
        "buffer": {
            "batch_size": 2, "total_steps": STEPS,
            "explorer_input": {
                "taskset": {"name": "train", "path": str(tasks),
                            "format": {"prompt_key": "question", "response_key": "answer"},
                            "default_workflow_type": "simple_workflow",
                            "default_reward_fn_type": "accuracy_reward"},
                "eval_tasksets": [{"name": "heldout", "path": str(tasks),
                                   "format": {"prompt_key": "question", "response_key": "answer"},
                                   "default_workflow_type": "simple_workflow",
                                   "default_reward_fn_type": "accuracy_reward",
                                   "rollout_args": {"temperature": 0}}],
            },
            "trainer_input": {"experience_buffer": {
                "name": "exp", "storage_type": "sql", "path": str(tmp_path / "exp.db"),
                "max_read_timeout": 90.0}},
        },
        "explorer": {"eval_interval": 100, "eval_on_startup": False,
                     "rollout_model": {"engine_type": "hf", "dtype": "float32"}},
        "synchronizer": {"sync_method": "checkpoint", "sync_interval": 1,
                         "wait_for_checkpoint": True, "sync_timeout": 90},
        "trainer": {"trainer_type": "torch", "save_interval": 0},
        "monitor": {"monitor_type": "jsonl"},
    }
    apply_changes(config, changes)
    path = tmp_path / f"{mode}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture
def tasks(tmp_path) -> Path:
    return arithmetic_tasks(tmp_path, 4)


def child_env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


def buffer_rows(db: Path) -> list[tuple[int, dict]]:
    """``(consumed, payload)`` of every row, in write order."""
    with sqlite3.connect(db) as con:
        rows = con.execute("SELECT consumed, payload FROM experiences ORDER BY id").fetchall()
    return [(consumed, json.loads(payload)) for consumed, payload in rows]


def monitor_lines(job: Path, role: str) -> list[dict]:
    return [json.loads(x) for x in (job / "monitor" / f"{role}.jsonl").read_text().splitlines()]


# ---- the SQLite buffer across processes ------------------------------------------------

WRITER = textwrap.dedent("""
    import sys, time, torch
    from rft.buffer.storage import open_storage
    from rft.experience import EID, Experience
    store = open_storage("sql", "shared", sys.argv[1])
    for batch in range(int(sys.argv[2])):
        store.write([Experience(tokens=torch.tensor([1, 2, 3, batch]), prompt_length=2,
                                reward=float(run), eid=EID(batch=batch, task=0, run=run))
                     for run in range(3)])
        time.sleep(0.02)
    store.close()
""")


def test_sql_buffer_one_writer_process_one_reader_process(tmp_path):
    db = tmp_path / "shared.db"
    reader = open_storage("sql", "shared", str(db))  # waits before any row exists
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(db), "20"], env=child_env())
    taken, started = [], time.monotonic()
    for _ in range(10):  # 60 rows in reads of 6, while the other process writes 3 at a time
        taken += reader.read(6, timeout=60)
    # the reader polls the database: it does not sleep out its timeout on another
    # process's writes (which no in-process notification announces)
    assert time.monotonic() - started < 30
    assert writer.wait(timeout=60) == 0
    assert [(e.eid.batch, e.eid.run) for e in taken] == [(b, r) for b in range(20)
                                                         for r in range(3)]
    assert reader.read_count == 60 and reader.available() == 0
    assert reader.totals() == (60, 60)
    assert {consumed for consumed, _ in buffer_rows(db)} == {1}  # none read twice
    with pytest.raises(BufferTimeout, match=r"experience buffer 'shared': waited 0.3 s for 1 "
                                            r"experiences, 0 available"):
        reader.read(1, timeout=0.3)
    reader.close()


def test_sql_buffer_opened_at_once_by_several_connections(tmp_path):
    """An explore and a train process open the same new file together: switching it to WAL
    must not fail with "database is locked" (SQLite does not wait for that one)."""
    errors: list[Exception] = []

    def open_and_close(path: str, barrier: threading.Barrier) -> None:
        barrier.wait()
        try:
            open_storage("sql", "shared", path).close()
        except Exception as exc:  # noqa: BLE001 — collected and reported below
            errors.append(exc)

    for attempt in range(40):  # unretried, about one attempt in twenty failed
        barrier = threading.Barrier(6)
        threads = [threading.Thread(target=open_and_close,
                                    args=(str(tmp_path / f"{attempt}.db"), barrier))
                   for _ in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert errors == []


# ---- checkpoints as the explorer reads them ---------------------------------------------


def test_actor_weights_come_from_hf_else_from_trainer_pt(tmp_path, tiny_model_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    actor = {k: v.clone() for k, v in model.state_dict().items()}
    job = str(tmp_path / "job")
    # a colocate checkpoint between exports: no hf/, the actor inside trainer.pt
    save_checkpoint(job, 1, {"actor": actor}, {})
    # an exported one: hf/ (tied lm_head stored once), trainer.pt without the actor
    save_checkpoint(job, 2, {"optimizer": {}}, {}, save_hf=model.save_pretrained)
    first, second = list_checkpoints(job)
    from_pt, from_hf = load_actor_weights(first), load_actor_weights(second)
    assert from_pt.keys() == actor.keys()
    assert from_hf.keys() <= actor.keys() and "model.embed_tokens.weight" in from_hf
    assert all(torch.equal(from_hf[k], actor[k]) for k in from_hf)
    (Path(job) / "global_step_3").mkdir()  # not complete (no state.json): never listed
    save_checkpoint(job, 4, {"optimizer": {}}, {})
    with pytest.raises(CheckpointError, match=r"global_step_4: neither hf/ nor an 'actor' "
                                              r"entry in trainer.pt holds the actor's weights"):
        load_actor_weights(newest_checkpoint(job))


# ---- explore + train as two processes, then bench ---------------------------------------


@pytest.mark.slow
def test_explore_and_train_processes_exchange_weights_then_bench(tmp_path, tiny_model_dir,
                                                                  tasks):
    explore_cfg = write_config(tmp_path, tiny_model_dir, tasks, "explore")
    train_cfg = write_config(tmp_path, tiny_model_dir, tasks, "train")
    procs = {mode: subprocess.Popen([str(RFT), "run", str(cfg)], env=child_env(),
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for mode, cfg in (("train", train_cfg), ("explore", explore_cfg))}
    outputs = {mode: proc.communicate(timeout=300)[0] for mode, proc in procs.items()}
    for mode, proc in procs.items():
        assert proc.returncode == 0, f"{mode} run failed:\n{outputs[mode]}"

    job = tmp_path / "ck" / "split" / "run"
    assert [c.step for c in list_checkpoints(str(job))] == [1, 2, 3]
    assert all((job / f"global_step_{s}" / "hf" / "model.safetensors").exists()
               for s in (1, 2, 3))
    # every experience written once and read once, none lost
    rows = buffer_rows(tmp_path / "exp.db")
    written = json.loads((job / "explorer_state.json").read_text())["experiences_written"]
    read = json.loads((job / "global_step_3" / "state.json").read_text())["experiences_read"]
    assert len(rows) == written == read == STEPS * 2 * 2
    assert [consumed for consumed, _ in rows] == [1] * len(rows)
    # lockstep with wait_for_checkpoint: step s was sampled by the weights of step s - 1
    versions = {(row["eid"]["batch"], row["model_version"]) for _, row in rows}
    assert versions == {(1, 0), (2, 1), (3, 2)}
    explorer_log = monitor_lines(job, "explorer")
    assert [(x["step"], x["metrics"]["sync/model_version"]) for x in explorer_log
            if "rollout/experiences" in x["metrics"]] == [(1, 0.0), (2, 1.0), (3, 2.0)]
    assert [x["step"] for x in monitor_lines(job, "trainer")] == [1, 2, 3]
    # the explorer really sampled with the trainer's step-2 weights: its log-probs are
    # those of global_step_2/hf, not those of the initial model
    last = next(row for _, row in reversed(rows) if row["model_version"] == 2)
    tokens, prompt_length = last["tokens"], last["prompt_length"]
    sampled = torch.tensor(last["logprobs"])
    step2 = HFEngine(str(job / "global_step_2" / "hf"), dtype="float32")
    initial = HFEngine(str(tiny_model_dir), dtype="float32")
    assert torch.allclose(step2.compute_logprobs([tokens], [prompt_length])[0], sampled,
                          atol=1e-4)
    assert not torch.allclose(initial.compute_logprobs([tokens], [prompt_length])[0], sampled,
                              atol=1e-4)

    # bench: one eval row per checkpoint, at its step, in the monitors and summary.json
    bench_cfg = write_config(tmp_path, tiny_model_dir, tasks, "bench")
    assert run(load_config(bench_cfg)) == 0
    summary = json.loads((job / "summary.json").read_text())
    evals = summary["stages"][0]["checkpoint_evals"]
    assert [e["step"] for e in evals] == [1, 2, 3]
    assert all("eval/heldout/accuracy" in e["metrics"] for e in evals)
    bench_log = monitor_lines(job, "bench")
    assert [x["step"] for x in bench_log] == [1, 2, 3]
    assert [x["metrics"] for x in bench_log] == [e["metrics"] for e in evals]
    latest_cfg = write_config(tmp_path, tiny_model_dir, tasks, "bench",
                              explorer__bench_on_latest_checkpoint=True)
    assert run(load_config(latest_cfg)) == 0
    summary = json.loads((job / "summary.json").read_text())
    assert [e["step"] for e in summary["stages"][0]["checkpoint_evals"]] == [3]


# ---- errors: each one line naming what was waited for -----------------------------------


@pytest.mark.slow
def test_explorer_waiting_for_a_checkpoint_times_out_naming_the_job_dir(tmp_path,
                                                                         tiny_model_dir, tasks):
    loaded = load_config(write_config(tmp_path, tiny_model_dir, tasks, "explore",
                                      synchronizer__sync_timeout=1, buffer__total_steps=2))
    job = tmp_path / "ck" / "split" / "run"
    started = time.monotonic()
    with pytest.raises(SyncTimeout) as caught:
        run(loaded)
    assert time.monotonic() - started < 60
    message = str(caught.value)
    assert "\n" not in message
    assert message == (f"synchronizer.sync_timeout: waited 1 s for a checkpoint newer than "
                       f"global_step_0 (model version > 0) in {job}; is the train run alive "
                       "and saving every sync_interval steps?")
    assert len(buffer_rows(tmp_path / "exp.db")) == 4  # step 1 was explored and kept


def test_trainer_with_an_empty_buffer_times_out_naming_the_buffer(tmp_path, tiny_model_dir,
                                                                  tasks):
    loaded = load_config(write_config(
        tmp_path, tiny_model_dir, tasks, "train",
        buffer__trainer_input__experience_buffer__max_read_timeout=0.5))
    with pytest.raises(BufferTimeout, match=r"^experience buffer 'exp': waited 0.5 s for 4 "
                                            r"experiences, 0 available \(written 0, read 0\)$"):
        run(loaded)
    assert list_checkpoints(str(tmp_path / "ck" / "split" / "run")) == []


class ProbeMonitor(Monitor):
    """Records which monitors were started and closed (an in-process plugin)."""

    events: list[tuple[str, str]] = []

    def start(self, total_steps: int) -> None:
        ProbeMonitor.events.append((self.role, "start"))

    def log(self, metrics, step: int) -> None:
        pass

    def close(self) -> None:
        ProbeMonitor.events.append((self.role, "close"))


class ProbePlugin:
    @hookimpl
    def register_monitors(self) -> dict:
        return {"probe": ProbeMonitor}


@pytest.mark.parametrize("mode", ["explore", "train"])
def test_a_failed_resume_closes_what_set_up_opened(tmp_path, tiny_model_dir, tasks, mode):
    """A corrupt explorer state (explore) or checkpoint (train) on resume is a one-line
    error, and the monitors, the OpenAI endpoint thread, the buffer and the trainer that
    set-up had opened are closed again."""
    job = tmp_path / "ck" / "split" / "run"
    job.mkdir(parents=True)
    if mode == "explore":
        (job / "explorer_state.json").write_text("{not json")
        expected, error = rf"^explorer state {job}/explorer_state.json is corrupt", RftError
    else:
        path = save_checkpoint(str(job), 1, {"actor": {}}, {"step": 1})
        (Path(path) / "trainer.pt").write_bytes(b"truncated")
        expected, error = "is corrupt", CheckpointError
    config = write_config(tmp_path, tiny_model_dir, tasks, mode, continue_from_checkpoint=True,
                          monitor__monitor_type="probe",
                          explorer__rollout_model={"engine_type": "hf", "dtype": "float32",
                                                   "enable_openai_api": True})
    ProbeMonitor.events.clear()
    registry = PluginRegistry.create(extra_plugins=[ProbePlugin()])
    with pytest.raises(error, match=expected):
        run(load_config(config, registry=registry))
    role = "explorer" if mode == "explore" else "trainer"
    assert ProbeMonitor.events == [(role, "start"), (role, "close")]
    assert not [t for t in threading.enumerate() if t.name == "rft-openai-api"]


def test_bench_without_checkpoints_names_the_run_dir(tmp_path, tiny_model_dir, tasks):
    loaded = load_config(write_config(tmp_path, tiny_model_dir, tasks, "bench"))
    job = tmp_path / "ck" / "split" / "run"
    with pytest.raises(RftError, match=rf"^bench: no checkpoint \(global_step_N/\) in {job}; "):
        run(loaded)


@pytest.mark.slow
def test_cli_reports_a_split_mode_error_in_one_line(tmp_path, tiny_model_dir, tasks):
    cfg = write_config(tmp_path, tiny_model_dir, tasks, "bench")
    result = subprocess.run([str(RFT), "run", str(cfg)], env=child_env(), capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 2
    assert result.stderr.startswith("rft: bench: no checkpoint")
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
