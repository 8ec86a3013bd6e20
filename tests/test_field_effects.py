"""Config fields of issue 17 that have their documented effect (each test fails without
it): the gradient clip's two names, retries of failed reads, progress bars, evaluation
statistics, the experience pipeline's saved input and rollout previews."""

from __future__ import annotations

import pytest
from config_corpus import BASE_CONFIG, prepare_environment
from rft.config import load_config
from rft.errors import ConfigError


@pytest.fixture
def env(tmp_path, monkeypatch):
    prepare_environment(tmp_path, monkeypatch)
    monkeypatch.setenv("RFT_PLUGINS", "rft-plugin-grpo,rft-plugin-workflows,rft-plugin-rewards,"
                       "rft-plugin-selectors")  # what base.yaml uses
    return tmp_path


# ---- algorithm.optimizer.clip_grad / trainer.grad_clip ---------------------------------


def _clip(overrides: list[str]) -> float:
    """The gradient clip the torch trainer applies (its options), which validation also
    wrote to ``trainer.grad_clip`` (what the veRL plugin reads)."""
    from rft.trainer.options import TorchTrainerOptions

    plan = load_config(BASE_CONFIG, overrides).stages[0].plan
    clip = TorchTrainerOptions.from_plan(plan.trainer_plan(2)).grad_clip
    assert plan.config.trainer.grad_clip == clip
    return clip


def test_clip_grad_is_the_trainer_clip_when_grad_clip_is_unset(env):
    assert _clip([]) == 1.0
    assert _clip(["algorithm.optimizer.clip_grad=0.3"]) == 0.3
    assert _clip(["trainer.grad_clip=0.7"]) == 0.7
    assert _clip(["trainer.grad_clip=0.4", "algorithm.optimizer.clip_grad=0.4"]) == 0.4


def test_clip_grad_and_grad_clip_that_differ_are_one_line_naming_both(env):
    with pytest.raises(ConfigError) as caught:
        load_config(BASE_CONFIG, ["trainer.grad_clip=0.5", "algorithm.optimizer.clip_grad=2.0"])
    assert caught.value.problems == [
        ("trainer.grad_clip: 0.5 differs from algorithm.optimizer.clip_grad 2.0 (the same "
         "gradient clip); set one of them")]


# ---- monitor.detailed_stats --------------------------------------------------------------


def _rollout(task: int, run: int, reward: float):
    import torch
    from rft.experience import EID, Experience

    return Experience(tokens=torch.tensor([1, 2, 3]), prompt_length=1, reward=reward,
                      eid=EID(batch="eval/x", task=task, run=run),
                      metrics={"reward/format": reward / 2})


def test_detailed_stats_adds_std_max_min_over_the_tasks():
    from rft.rollout.explorer import eval_metrics
    from rft.workflow import Task

    tasks = [Task(raw={}, index=i, taskset="x") for i in range(3)]
    rollouts = [_rollout(0, 0, 1.0), _rollout(0, 1, 0.0),   # task 0: 0.5
                _rollout(1, 0, 1.0), _rollout(1, 1, 1.0),   # task 1: 1.0
                _rollout(2, 0, 0.0), _rollout(2, 1, 0.0)]   # task 2: 0.0
    plain = eval_metrics("x", tasks, rollouts, 2)
    assert not [key for key in plain if key.endswith(("/std", "/max", "/min"))]
    detailed = eval_metrics("x", tasks, rollouts, 2, detailed_stats=True)
    assert {k: v for k, v in plain.items()} == {k: detailed[k] for k in plain}
    assert detailed["eval/x/reward/std"] == pytest.approx(0.5)  # sample std of 0.5, 1, 0
    assert (detailed["eval/x/reward/max"], detailed["eval/x/reward/min"]) == (1.0, 0.0)
    assert detailed["eval/x/accuracy/mean"] == pytest.approx(0.5)
    assert detailed["eval/x/accuracy/std"] == pytest.approx(0.5)
    assert detailed["eval/x/reward/format/max"] == 0.5
    assert detailed["eval/x/reward/format/std"] == pytest.approx(0.25)


# ---- max_retry_times / max_retry_interval ------------------------------------------------


def _appears_later(path, text: str, after_s: float):
    import threading

    timer = threading.Timer(after_s, path.write_text, (text,))
    timer.start()
    return timer


def test_a_taskset_file_that_appears_after_the_first_try_is_read(tmp_path):
    from rft.buffer.taskset import read_rows
    from rft.config.schema import TasksetConfig

    data = tmp_path / "late.jsonl"
    cfg = TasksetConfig(name="late", path=str(data), max_retry_times=3, max_retry_interval=1)
    timer = _appears_later(data, '{"question": "1+1", "answer": "2"}\n', 0.3)
    try:
        assert read_rows(cfg) == [{"question": "1+1", "answer": "2"}]
    finally:
        timer.cancel()


def test_a_taskset_read_without_retries_fails_at_once_and_after_retries_in_one_line(tmp_path):
    import time

    from rft.buffer.errors import TasksetError
    from rft.buffer.taskset import read_rows
    from rft.config.schema import TasksetConfig

    data = tmp_path / "never.jsonl"
    started = time.monotonic()
    with pytest.raises(TasksetError) as caught:
        read_rows(TasksetConfig(name="t", path=str(data), max_retry_times=0))
    assert str(caught.value) == f"taskset 't' ({data}): no such file or folder"
    with pytest.raises(TasksetError) as caught:
        read_rows(TasksetConfig(name="t", path=str(data), max_retry_times=2,
                                max_retry_interval=0))
    assert str(caught.value) == (f"taskset 't' ({data}): no such file or folder (failed 3 "
                                 "times, max_retry_times: 2)")
    assert time.monotonic() - started < 5


def test_a_dataset_buffer_retries_with_its_own_settings(tmp_path):
    from rft.buffer.offline import read_dataset_rows
    from rft.config.schema import ExperienceBufferConfig

    data = tmp_path / "sft.jsonl"
    cfg = ExperienceBufferConfig(name="sft", storage_type="file", path=str(data),
                                 max_retry_times=3, max_retry_interval=1)
    timer = _appears_later(data, '{"prompt": "a", "response": "b"}\n', 0.3)
    try:
        assert read_dataset_rows(cfg, "buffer sft") == [{"prompt": "a", "response": "b"}]
    finally:
        timer.cancel()


def _hold_write_lock(path, seconds: float):
    """Another connection holds the SQLite file's write lock for ``seconds``."""
    import sqlite3
    import threading

    locked = threading.Event()

    def hold():
        db = sqlite3.connect(path, isolation_level=None)
        db.execute("BEGIN EXCLUSIVE")
        locked.set()
        time.sleep(seconds)
        db.execute("ROLLBACK")
        db.close()

    import time

    thread = threading.Thread(target=hold)
    thread.start()
    locked.wait(5)
    return thread


def test_a_locked_sql_buffer_is_retried_then_named_in_one_line(tmp_path, monkeypatch):
    from rft.buffer.factory import open_experience_buffer
    from rft.buffer.storage import SQLStorage
    from rft.config.schema import ExperienceBufferConfig
    from rft.errors import RftError

    monkeypatch.setattr(SQLStorage, "BUSY_TIMEOUT_S", 0.1)  # fail fast on the lock
    path = tmp_path / "buffer.db"
    batch = [_rollout(0, 0, 1.0)]

    def storage(times: int, interval: float):
        return open_experience_buffer(ExperienceBufferConfig(
            name="exps", storage_type="sql", path=str(path), max_retry_times=times,
            max_retry_interval=interval))

    patient, hasty = storage(4, 0.5), storage(0, 0)
    holder = _hold_write_lock(str(path), 1.0)
    with pytest.raises(RftError) as caught:  # no retry: the lock wins
        hasty.write(batch)
    assert "database is locked" in str(caught.value)
    patient.write(batch)  # retried until the lock is gone
    holder.join()
    assert patient.available() == 1
    holder = _hold_write_lock(str(path), 3.0)
    try:
        with pytest.raises(RftError) as caught:
            storage(1, 0.2).write(batch)
    finally:
        holder.join()
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"experience buffer 'exps' ({path}): ")
    assert "database is locked" in message
    assert message.endswith("(failed 2 times, max_retry_times: 1)")


# ---- enable_progress_bar -----------------------------------------------------------------


@pytest.mark.parametrize("storage", ["file", "sql"])
def test_enable_progress_bar_shows_a_bar_on_stderr_while_loading(tmp_path, capfd, storage):
    import json
    import sqlite3

    from rft.buffer.taskset import read_rows
    from rft.config.schema import TasksetConfig

    rows = [{"question": f"{i}+1", "answer": str(i + 1)} for i in range(5)]
    for shown in (False, True):
        path = tmp_path / f"tasks-{shown}.{'db' if storage == 'sql' else 'jsonl'}"
        if storage == "sql":
            with sqlite3.connect(path) as db:
                db.execute("CREATE TABLE tasks (question TEXT, answer TEXT)")
                db.executemany("INSERT INTO tasks VALUES (?, ?)",
                               [(r["question"], r["answer"]) for r in rows])
        else:
            path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        capfd.readouterr()
        cfg = TasksetConfig(name="t", storage_type=storage, path=str(path),
                            enable_progress_bar=shown)
        assert read_rows(cfg) == rows
        err = capfd.readouterr().err
        # tqdm on stderr: "Generating train split: 5 examples [...]" (datasets) or
        # "Reading t: 100%|█████| 5/5 [...]" (sql)
        bar = "5 examples [" if storage == "file" else "5/5 ["
        assert (bar in err) == shown, err


# ---- trainer.enable_preview ----------------------------------------------------------------


def test_rollout_examples_are_the_highest_and_lowest_reward_rollouts_decoded():
    from rft.monitor.preview import rollout_examples

    batch = [_rollout(0, 0, 0.5), _rollout(0, 1, 2.0), _rollout(1, 0, -1.0)]
    batch[1].response_text = "the best"
    rows = rollout_examples(batch, lambda ids: "-".join(map(str, ids)), step=7)
    assert rows == [{"step": 7, "reward": 2.0, "prompt": "1", "response": "the best"},
                    {"step": 7, "reward": -1.0, "prompt": "1", "response": "2-3"}]
    assert rollout_examples([], str, 1) == []


ROWS = [{"step": 3, "reward": 1.0, "prompt": "2+2=", "response": "4 | four\nok"}]


def test_the_jsonl_monitor_writes_the_preview_table_beside_its_metrics(tmp_path):
    import json

    from rft.monitor.files import JsonlMonitor

    monitor = JsonlMonitor("p", "n", "trainer", str(tmp_path))
    monitor.log({"a": 1.0}, 3)
    monitor.log_table("rollout_examples", ROWS, 3)
    monitor.close()
    path = tmp_path / "rollout_examples" / "trainer.jsonl"
    assert [json.loads(line) for line in path.read_text().splitlines()] == ROWS
    assert sorted(p.name for p in tmp_path.glob("*.jsonl")) == ["trainer.jsonl"]
    resumed = JsonlMonitor("p", "n", "trainer", str(tmp_path))  # goes on after step 2
    resumed.rewind(2)
    resumed.log_table("rollout_examples", [{**ROWS[0], "reward": 0.5}], 3)
    resumed.close()
    assert [json.loads(line)["reward"] for line in path.read_text().splitlines()] == [0.5]


def test_the_tensorboard_monitor_writes_the_preview_as_text(tmp_path):
    pytest.importorskip("tensorboard")
    from rft.monitor.tensorboard import TensorboardMonitor
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monitor = TensorboardMonitor("p", "n", "trainer", str(tmp_path))
    monitor.log_table("rollout_examples", ROWS, 3)
    monitor.close()
    events = EventAccumulator(monitor.path, size_guidance={"tensors": 0})
    events.Reload()
    [event] = events.Tensors("rollout_examples/text_summary")
    text = event.tensor_proto.string_val[0].decode()
    assert event.step == 3
    assert text.splitlines() == ["| step | reward | prompt | response |", "|---|---|---|---|",
                                 "| 3 | 1.0 | 2+2= | 4 \\| four<br>ok |"]


# ---- a tiny run: preview, saved pipeline input, detailed evaluation statistics ----------


@pytest.mark.slow
def test_a_run_logs_previews_saves_the_pipeline_input_and_detailed_eval_stats(rft_run, tmp_path):
    """One colocate run (2 steps, hf engine, jsonl monitor) with an operator (a reward
    filter that keeps every rollout), an eval taskset and ``monitor.detailed_stats``; a
    second without preview, saved input or detailed stats."""
    import json

    from rft.testing.runs import write_taskset

    evalset = write_taskset(tmp_path / "eval.jsonl", 3)
    saved = tmp_path / "saved" / "input.jsonl"
    eval_tasksets = [{"name": "ev", "path": str(evalset), "repeat_times": 2,
                      "format": {"prompt_key": "question", "response_key": "answer"},
                      "default_workflow_type": "simple_workflow",
                      "default_reward_fn_type": "accuracy_reward"}]
    on = rft_run({
        "buffer.explorer_input.eval_tasksets": eval_tasksets,
        "explorer.eval_interval": 1, "monitor.detailed_stats": True,
        "data_processor.experience_pipeline": {
            "operators": [{"name": "reward_filter", "args": {"threshold": -1.0}}],
            "save_input": True, "input_save_path": str(saved)}})
    preview = [json.loads(line) for line in
               (on.job_dir / "monitor" / "rollout_examples" / "trainer.jsonl").read_text()
               .splitlines()]
    assert [row["step"] for row in preview] == [1, 1, 2, 2]
    assert all(set(row) == {"step", "reward", "prompt", "response"} for row in preview)
    assert all("+1=" in row["prompt"] for row in preview)
    saved_rows = [json.loads(line) for line in saved.read_text().splitlines()]
    assert len(saved_rows) == 2 * 2 * 2  # steps × tasks × repeat_times, before the operator
    evals = {k: v for step in on.metrics for k, v in step.items() if k.startswith("eval/ev/")}
    assert {"eval/ev/reward/std", "eval/ev/reward/max", "eval/ev/reward/min",
            "eval/ev/accuracy/std"} <= set(evals)

    off = rft_run({"trainer.enable_preview": False,
                   "buffer.explorer_input.eval_tasksets": eval_tasksets,
                   "explorer.eval_interval": 1,
                   "data_processor.experience_pipeline": {
                       "operators": [{"name": "reward_filter", "args": {"threshold": -1.0}}],
                       "save_input": False}})
    assert not (off.job_dir / "monitor" / "rollout_examples").exists()
    assert not (off.job_dir / "buffer").exists()
    assert not [k for step in off.metrics for k in step if k.endswith("/std")]


def test_the_mlflow_monitor_writes_the_preview_as_a_table_artifact(tmp_path, monkeypatch):
    pytest.importorskip("mlflow")
    import json

    from mlflow.tracking import MlflowClient
    from rft.monitor.mlflow_monitor import MlflowArgs, MlflowMonitor

    for name in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD",
                 "MLFLOW_ALLOW_FILE_STORE"):
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)  # restored after the test (the monitor sets them)
    uri = f"file://{tmp_path}/mlruns"
    monitor = MlflowMonitor("proj", "exp", "trainer", "unused", MlflowArgs(uri=uri))
    monitor.log_table("rollout_examples", ROWS, 3)
    monitor.close()
    client = MlflowClient(tracking_uri=uri)
    local = client.download_artifacts(monitor.run_id, "rollout_examples/step_3.json",
                                      str(tmp_path / "got"))
    with open(local) as handle:
        table = json.load(handle)
    assert table["columns"] == ["step", "reward", "prompt", "response"]
    assert table["data"] == [[3, 1.0, "2+2=", "4 | four\nok"]]


def test_the_wandb_monitor_logs_the_preview_as_a_table(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    import json

    from rft.monitor.wandb_monitor import WandbArgs, WandbMonitor
    from test_monitors import wandb_run

    for name in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_BASE_URL"):
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.netrc key: offline
    monkeypatch.setenv("WANDB_SILENT", "true")
    monitor = WandbMonitor("proj", "exp", "trainer", "unused", WandbArgs(dir=str(tmp_path)))
    monitor.log_table("rollout_examples", ROWS, 3)
    monitor.close()
    [run_dir] = (tmp_path / "wandb").glob("offline-run-*")
    _, history = wandb_run(run_dir)
    [row] = [row for row in history if "rollout_examples/_type" in row]
    assert (row["_step"], row["rollout_examples/_type"]) == (3, "table-file")
    table = json.loads((run_dir / "files" / row["rollout_examples/path"]).read_text())
    assert table["columns"] == ["step", "reward", "prompt", "response"]
    assert table["data"] == [[3, 1.0, "2+2=", "4 | four\nok"]]


@pytest.mark.slow
def test_mode_both_logs_the_trainer_actors_preview(tmp_path, tiny_model_dir):
    """Mode ``both`` on a private Ray cluster (hf engine, 2 steps): the trainer actor
    decodes each step's preview and the driver logs it with the step."""
    import json

    from fixtures_models import arithmetic_tasks
    from rft.launcher import run
    from test_embedded_run import write_config

    tasks = arithmetic_tasks(tmp_path, 8)
    config = write_config(tmp_path, tiny_model_dir, tasks, mode="both", trainer__save_interval=0,
                          cluster__ray_address="local")  # never a cluster another test runs
    assert run(load_config(config)) == 0
    path = tmp_path / "ck" / "e2e" / "run" / "monitor" / "rollout_examples" / "trainer.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [row["step"] for row in rows] == [1, 1, 2, 2]
    assert all(row["prompt"] and isinstance(row["reward"], float) for row in rows)
