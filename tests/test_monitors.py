"""Monitors with their real backends: console, jsonl, TensorBoard event files read back,
wandb offline runs parsed from their ``.wandb`` files, MLflow file stores read back with
``MlflowClient``; plus the one-line errors for a missing package and an unreachable
server."""

from __future__ import annotations

import io
import json
import math
import os
import socket
import struct
import sys
import time
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")

from rft.config.validate import build_args  # noqa: E402
from rft.errors import RftError  # noqa: E402
from rft.monitor.files import ConsoleArgs, ConsoleMonitor, JsonlMonitor  # noqa: E402
from rft.monitor.mlflow_monitor import (  # noqa: E402
    MlflowArgs, MlflowMonitor, metric_key, tracking_uri)
from rft.monitor.tensorboard import TensorboardArgs, TensorboardMonitor  # noqa: E402
from rft.monitor.wandb_monitor import WandbArgs, WandbMonitor, resolve_mode  # noqa: E402
from rft.plugins import PluginRegistry  # noqa: E402

STEPS = [
    {"rollout/reward/mean": 0.25, "actor/pg_loss": -0.5, "timing_s/step": 1.0,
     "eval/gsm8k/accuracy": 0.1, "eval/gsm8k/pass@4": 0.3, "other/metric": 7},
    {"rollout/reward/mean": 0.75, "actor/pg_loss": float("nan"), "timing_s/step": 1.5,
     "eval/gsm8k/accuracy": 0.2, "eval/gsm8k/pass@4": 0.4, "other/metric": 8},
]
"""Two steps (1 and 2); step 2 has a NaN loss."""


def log_steps(monitor: Any) -> None:
    monitor.start(len(STEPS))
    for step, metrics in enumerate(STEPS, start=1):
        monitor.log(metrics, step)
    monitor.close()


def same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-6)


# --------------------------------------------------------------------------------------
# registration and arguments
# --------------------------------------------------------------------------------------

def test_all_monitors_are_registered_and_their_args_are_checked() -> None:
    registry = PluginRegistry.create(autoload=False)
    for name in ("console", "jsonl", "tensorboard", "wandb", "mlflow"):
        assert registry.has("monitor", name)
    problems: list[str] = []
    built = build_args(registry.get("monitor", "wandb"), "wandb",
                       {"mode": "offline", "tags": ["a"], "group": "g"},
                       "monitor.monitor_args", problems)
    assert problems == [] and built == WandbArgs(mode="offline", tags=["a"], group="g")
    build_args(registry.get("monitor", "wandb"), "wandb", {"mode": "sometimes"},
               "monitor.monitor_args", problems)
    build_args(registry.get("monitor", "mlflow"), "mlflow", {"url": "x"},
               "monitor.monitor_args", problems)
    assert len(problems) == 2
    assert "monitor.monitor_args.mode" in problems[0] and "sometimes" in problems[0]
    assert "url" in problems[1] and "uri" in problems[1]  # did-you-mean


# --------------------------------------------------------------------------------------
# console and jsonl
# --------------------------------------------------------------------------------------

def test_console_shows_progress_bar_and_headline_keys() -> None:
    out = io.StringIO()
    log_steps(ConsoleMonitor("p", "exp", "trainer", "unused", stream=out))
    first, second = out.getvalue().splitlines()
    assert first.startswith("[exp_trainer] [##########----------] 1/2 | ")
    assert second.startswith("[exp_trainer] [####################] 2/2 | ")
    assert "rollout/reward/mean=0.25" in first and "actor/pg_loss=-0.5" in first
    assert "eval/gsm8k/accuracy=0.1" in first and "eval/gsm8k/pass@4=0.3" in first
    assert "other/metric" not in first  # not a headline metric
    assert "actor/pg_loss=nan" in second

    out = io.StringIO()
    monitor = ConsoleMonitor("p", "exp", "explorer", "unused",
                             ConsoleArgs(keys=["other/metric", "missing"]), stream=out)
    monitor.log(STEPS[0], 3)  # no start(): no total, no bar
    assert out.getvalue() == "[exp_explorer] step 3 | other/metric=7\n"

    out = io.StringIO()
    ConsoleMonitor("p", "exp", "explorer", "unused", ConsoleArgs(all_metrics=True),
                   stream=out).log(STEPS[0], 1)
    assert out.getvalue().count("=") == len(STEPS[0])


def test_jsonl_writes_one_line_per_step_and_appends(tmp_path: Path) -> None:
    before = time.time()
    log_steps(JsonlMonitor("p", "exp", "trainer", str(tmp_path / "monitor")))
    path = tmp_path / "monitor" / "trainer.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [row["step"] for row in rows] == [1, 2]
    assert before <= rows[0]["time"] <= rows[1]["time"] <= time.time()
    assert rows[0]["metrics"] == STEPS[0]
    assert rows[1]["metrics"]["actor/pg_loss"] == "nan"  # strict JSON, no bare NaN
    # A resumed run appends to the same file.
    monitor = JsonlMonitor("p", "exp", "trainer", str(tmp_path / "monitor"))
    monitor.log({"x": 1.0}, 3)
    monitor.close()
    assert len(path.read_text().splitlines()) == 3


# --------------------------------------------------------------------------------------
# tensorboard
# --------------------------------------------------------------------------------------

def read_tensorboard(directory: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(directory))
    accumulator.Reload()
    return {tag: [(event.step, event.value) for event in accumulator.Scalars(tag)]
            for tag in accumulator.Tags()["scalars"]}


def test_tensorboard_event_files_per_role(tmp_path: Path) -> None:
    log_dir = tmp_path / "monitor"
    log_steps(TensorboardMonitor("p", "exp", "trainer", str(log_dir)))
    explorer = TensorboardMonitor("p", "exp", "explorer", str(log_dir))
    explorer.log({"rollout/reward/mean": 0.5, "note": "text is skipped", "flag": True}, 4)
    explorer.close()
    explorer.close()  # idempotent

    assert sorted(os.listdir(log_dir / "tensorboard")) == ["explorer", "trainer"]
    trainer = read_tensorboard(log_dir / "tensorboard" / "trainer")
    assert sorted(trainer) == sorted(STEPS[0])  # names kept as given, pass@4 included
    for key in STEPS[0]:
        assert [step for step, _ in trainer[key]] == [1, 2]
        assert all(same(value, STEPS[i][key]) for i, (_, value) in enumerate(trainer[key]))
    assert math.isnan(trainer["actor/pg_loss"][1][1])
    assert read_tensorboard(log_dir / "tensorboard" / "explorer") == {
        "rollout/reward/mean": [(4, 0.5)], "flag": [(4, 1.0)]}


def test_tensorboard_log_dir_argument(tmp_path: Path) -> None:
    monitor = TensorboardMonitor("p", "exp", "trainer", str(tmp_path / "unused"),
                                 TensorboardArgs(log_dir=str(tmp_path / "tb")))
    monitor.log({"a": 1.0}, 1)  # flushed at once: readable before close
    assert read_tensorboard(tmp_path / "tb" / "trainer") == {"a": [(1, 1.0)]}
    monitor.close()
    assert not (tmp_path / "unused").exists()


# --------------------------------------------------------------------------------------
# wandb (offline)
# --------------------------------------------------------------------------------------

def read_wandb_records(path: Path) -> list[Any]:
    """The protobuf records of a ``.wandb`` file: a 7-byte W&B header, then the LevelDB
    log format (32 KiB blocks; records of crc32 · length · type, split across blocks as
    FIRST / MIDDLE / LAST)."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    block, position, records, pending = 32768, 7, [], b""
    while position + 7 <= len(data):
        if block - position % block < 7:  # block trailer: padding
            position += block - position % block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[position:position + 7])
        payload = data[position + 7:position + 7 + length]
        position += 7 + length
        if kind == 0:
            continue
        pending = payload if kind in (1, 2) else pending + payload
        if kind in (1, 4):  # FULL or LAST
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
    return records


def wandb_run(run_dir: Path, wait_s: float = 30.0) -> tuple[Any, list[dict[str, Any]]]:
    """``(run record, [history row, …])`` of an offline run directory. The file is written
    by W&B's service process, which may still be flushing when ``finish()`` has returned
    on a loaded machine: read again until the run record is there (at most ``wait_s``)."""
    deadline = time.monotonic() + wait_s
    while True:
        (path,) = run_dir.glob("run-*.wandb")
        run, history = None, []
        for record in read_wandb_records(path):
            kind = record.WhichOneof("record_type")
            if kind == "run":
                run = record.run
            elif kind == "history":
                history.append({item.key or "/".join(item.nested_key):
                                json.loads(item.value_json) for item in record.history.item})
        if run is not None or time.monotonic() > deadline:
            assert run is not None, f"{path}: no run record after {wait_s:g} s"
            return run, history
        time.sleep(0.2)


@pytest.fixture
def wandb_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_BASE_URL"):
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.netrc key
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb_dir"))
    return tmp_path / "wandb_dir"


def test_wandb_mode_resolution(wandb_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_mode(WandbArgs()) == ("offline", None, "https://api.wandb.ai")
    assert resolve_mode(WandbArgs(api_key="k", base_url="http://h:8080")) == (
        "online", "k", "http://h:8080")
    monkeypatch.setenv("WANDB_API_KEY", "env-key")
    monkeypatch.setenv("WANDB_BASE_URL", "http://env:1")
    assert resolve_mode(WandbArgs()) == ("online", "env-key", "http://env:1")
    assert resolve_mode(WandbArgs(api_key="arg", mode="disabled")) == (
        "disabled", "arg", "http://env:1")
    monkeypatch.setenv("WANDB_MODE", "offline")
    assert resolve_mode(WandbArgs())[0] == "offline"
    monkeypatch.delenv("WANDB_API_KEY")
    monkeypatch.delenv("WANDB_MODE")
    home = Path(os.environ["HOME"])
    home.mkdir(parents=True, exist_ok=True)
    (home / ".netrc").write_text("machine env login user password netrc-key\n")
    (home / ".netrc").chmod(0o600)
    assert resolve_mode(WandbArgs())[0] == "online"  # `wandb login` stored a key


def test_wandb_offline_runs_per_role(wandb_env: Path) -> None:
    trainer = WandbMonitor("proj", "exp", "trainer", "unused", WandbArgs(tags=["t1"]))
    explorer = WandbMonitor("proj", "exp", "explorer", "unused", WandbArgs())
    assert trainer.mode == explorer.mode == "offline"  # no API key anywhere
    log_steps(trainer)  # both runs open at once in one process
    explorer.log({"rollout/reward/mean": 0.5}, 1)
    explorer.close()

    run_dirs = sorted((wandb_env / "wandb").glob("offline-run-*"))
    assert len(run_dirs) == 2
    runs = {run.display_name: (run, history) for run, history in map(wandb_run, run_dirs)}
    assert sorted(runs) == ["exp_explorer", "exp_trainer"]
    run, history = runs["exp_trainer"]
    assert (run.project, run.run_group, run.job_type, list(run.tags)) == (
        "proj", "exp", "trainer", ["t1"])
    rows = [row for row in history if "actor/pg_loss" in row]
    assert [row["_step"] for row in rows] == [1, 2]
    for row, expected in zip(rows, STEPS):
        for key, value in expected.items():
            assert same(float(row[key]), value), key
    run, history = runs["exp_explorer"]
    assert run.run_group == "exp" and history[0]["rollout/reward/mean"] == 0.5


def test_wandb_dir_argument_and_disabled_mode(wandb_env: Path, tmp_path: Path) -> None:
    monitor = WandbMonitor("proj", "exp", "trainer", "unused",
                           WandbArgs(dir=str(tmp_path / "own")))
    monitor.log({"a": 1.0}, 1)
    monitor.close()
    assert len(list((tmp_path / "own" / "wandb").glob("offline-run-*/run-*.wandb"))) == 1
    disabled = WandbMonitor("proj", "exp", "trainer", "unused", WandbArgs(mode="disabled"))
    disabled.log({"a": float("nan")}, 1)
    disabled.close()


# --------------------------------------------------------------------------------------
# mlflow (file store)
# --------------------------------------------------------------------------------------

@pytest.fixture
def mlflow_client_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # The monitor sets these; setenv first so that monkeypatch restores them afterwards.
    for name in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD",
                 "MLFLOW_ALLOW_FILE_STORE"):
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)


def test_mlflow_file_store_runs_per_role(tmp_path: Path, mlflow_client_env: None) -> None:
    from mlflow.tracking import MlflowClient

    uri = f"file://{tmp_path}/mlruns"
    trainer = MlflowMonitor("proj", "exp", "trainer", "unused", MlflowArgs(uri=uri))
    log_steps(trainer)
    explorer = MlflowMonitor("proj", "exp", "explorer", "unused", MlflowArgs(uri=uri))
    explorer.log({"rollout/reward/mean": 0.5, "note": "skipped"}, 1)
    explorer.close()

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("proj")
    runs = {run.info.run_name: run
            for run in client.search_runs([experiment.experiment_id])}
    assert sorted(runs) == ["exp_explorer", "exp_trainer"]
    run = runs["exp_trainer"]
    assert run.info.status == "FINISHED"
    assert run.data.tags["rft.role"] == "trainer" and run.data.params["total_steps"] == "2"
    assert sorted(run.data.metrics) == sorted(metric_key(key) for key in STEPS[0])
    for key in STEPS[0]:
        history = sorted(client.get_metric_history(run.info.run_id, metric_key(key)),
                         key=lambda m: m.step)
        assert [m.step for m in history] == [1, 2]
        assert all(same(m.value, STEPS[i][key]) for i, m in enumerate(history)), key
    assert "eval/gsm8k/pass_at_4" in run.data.metrics
    assert list(runs["exp_explorer"].data.metrics) == ["rollout/reward/mean"]


def test_mlflow_plain_path_and_credentials(tmp_path: Path, mlflow_client_env: None,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from mlflow.tracking import MlflowClient

    monkeypatch.chdir(tmp_path)
    assert tracking_uri("store") == (tmp_path / "store").resolve().as_uri()
    assert tracking_uri("http://h:1") == "http://h:1"
    assert tracking_uri("sqlite:///x.db") == "sqlite:///x.db"
    monitor = MlflowMonitor("proj", "exp", "trainer", "unused",
                            MlflowArgs(uri="store", username="u", password="pw"))
    monitor.log({"a": 1.0}, 1)
    monitor.close()
    assert os.environ["MLFLOW_TRACKING_USERNAME"] == "u"
    assert os.environ["MLFLOW_TRACKING_PASSWORD"] == "pw"
    client = MlflowClient(tracking_uri=tracking_uri("store"))
    (run,) = client.search_runs([client.get_experiment_by_name("proj").experiment_id])
    assert run.data.metrics == {"a": 1.0}


def test_mlflow_metric_key() -> None:
    assert metric_key("eval/gsm8k/pass@4") == "eval/gsm8k/pass_at_4"
    assert metric_key("eval/my set (v2)/accuracy") == "eval/my set _v2_/accuracy"
    assert metric_key("/a//b/") == "a/b"
    assert metric_key("x" * 300) == "x" * 250


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_mlflow_unreachable_server_is_a_one_line_error(mlflow_client_env: None) -> None:
    uri = f"http://127.0.0.1:{free_port()}"
    begin = time.monotonic()
    with pytest.raises(RftError) as error:
        MlflowMonitor("proj", "exp", "trainer", "unused", MlflowArgs(uri=uri))
    assert time.monotonic() - begin < 5
    message = str(error.value)
    assert "\n" not in message and uri in message and "monitor.monitor_args.uri" in message


# --------------------------------------------------------------------------------------
# missing packages
# --------------------------------------------------------------------------------------

@pytest.mark.parametrize(("monitor", "modules", "monitor_type"), [
    (TensorboardMonitor, ["tensorboard", "torch.utils.tensorboard", "tensorboardX"],
     "tensorboard"),
    (WandbMonitor, ["wandb"], "wandb"),
    (MlflowMonitor, ["mlflow", "mlflow.entities", "mlflow.tracking"], "mlflow"),
])
def test_missing_package_is_a_one_line_error(monitor: type, modules: list[str],
                                             monitor_type: str, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    for module in modules:
        monkeypatch.setitem(sys.modules, module, None)  # `import module` raises ImportError
    with pytest.raises(RftError) as error:
        monitor("proj", "exp", "trainer", str(tmp_path / "monitor"))
    assert str(error.value) == (
        f"monitor.monitor_type: {monitor_type!r} needs the {monitor_type} package: "
        f"pip install 'rft-framework[{monitor_type}]'")
