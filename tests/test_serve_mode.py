"""``mode: serve`` with the tiny model, the real HTTP server, the real ``openai`` client and
a SQLite buffer: recorded responses, ``/feedback`` and ``/commit`` over HTTP, training in
the same process with live weight updates, a failing trainer, a separate ``train`` process,
and SIGTERM."""

from __future__ import annotations

import json
import logging
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import openai
import pytest
import torch
import yaml

from fixtures_models import apply_changes
from rft.buffer.storage import open_storage
from rft.checkpoint import list_checkpoints
from rft.config import load_config
from rft.errors import ConfigError
from rft.modes.serve import ADDRESS_FILE, ServeRun, run_serve

REPO = Path(__file__).resolve().parents[1]
RFT = REPO / ".venv" / "bin" / "rft"
QUESTION = [{"role": "user", "content": "max 302132"}]


def write_config(tmp_path: Path, model: Path, mode: str = "serve", **changes) -> Path:
    """A serve config (GRPO, 2 episodes × 2 choices a step, SQLite buffer); ``a__b=v``
    sets ``a.b``."""
    config = {
        "project": "serve", "name": "run", "mode": mode,
        "checkpoint_root_dir": str(tmp_path / "ck"),
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 2, "optimizer": {"lr": 1e-2}},
        "model": {"model_path": str(model), "max_prompt_tokens": 64, "max_response_tokens": 4},
        "cluster": {"node_num": 1, "gpu_per_node": 0},
        "buffer": {"batch_size": 2, "trainer_input": {"experience_buffer": {
            "name": "exp", "storage_type": "sql", "path": str(tmp_path / "exp.db"),
            "max_read_timeout": 60.0}}},
        "explorer": {"rollout_model": {"engine_type": "hf", "dtype": "float32", "seed": 1}},
        "synchronizer": {"sync_method": "memory", "sync_interval": 1},
        "trainer": {"trainer_type": "torch", "save_interval": 0},
        "monitor": {"monitor_type": "jsonl"},
    }
    apply_changes(config, changes)
    path = tmp_path / f"{mode}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def post(url: str, body: object, headers: dict[str, str] | None = None
         ) -> tuple[int, dict, dict[str, str]]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method="POST", headers={
        "Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.loads(response.read()), dict(response.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read()), dict(exc.headers)


class Served:
    """A serve run in a thread of this process, stopped by :meth:`stop`."""

    def __init__(self, config: Path) -> None:
        torch.set_num_threads(1)
        self.stage = load_config(config).stages[0]
        self.stop_event = threading.Event()
        self.ready = threading.Event()
        self.run: ServeRun | None = None
        self.error: BaseException | None = None
        self.result = None
        self.thread = threading.Thread(target=self._main, daemon=True)
        self.thread.start()
        assert self.ready.wait(120), "serve did not start"
        if self.error is not None:
            raise self.error

    def _main(self) -> None:
        def ready(run: ServeRun) -> None:
            self.run = run
            self.ready.set()

        try:
            self.result = run_serve(self.stage, self.stop_event, on_ready=ready)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            self.error = exc
            self.ready.set()

    @property
    def address(self) -> str:
        assert self.run is not None
        return self.run.server.address

    @property
    def name(self) -> str:
        assert self.run is not None
        return self.run.model.name

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.address}/v1", api_key="EMPTY", max_retries=0)

    def stop(self):
        self.stop_event.set()
        self.thread.join(120)
        assert not self.thread.is_alive()
        if self.error is not None:
            raise self.error
        return self.result


def play_episode(served: Served, reward_of=lambda text: float(len(text) % 2)) -> dict:
    """One episode: 2 choices of one prompt, a reward each, committed."""
    raw = served.client().chat.completions.with_raw_response.create(
        model=served.name, messages=QUESTION, n=2)
    response = raw.parse()
    rewards = [reward_of(c.message.content or "") for c in response.choices]
    status, _, _ = post(f"{served.address}/feedback",
                        {"response_id": response.id, "rewards": rewards})
    assert status == 200
    status, body, _ = post(f"{served.address}/commit", {"response_id": response.id})
    assert status == 200, body
    return {"id": response.id, "headers": dict(raw.headers),
            "version": response.model_extra["model_version"]}


def buffer_rows(tmp_path: Path) -> list[dict]:
    db = sqlite3.connect(tmp_path / "exp.db")
    try:
        return [json.loads(p) for (p,) in db.execute("SELECT payload FROM experiences ORDER BY id")]
    finally:
        db.close()


def test_serve_records_commits_and_refuses_with_one_line(tmp_path, tiny_model_dir):
    served = Served(write_config(tmp_path, tiny_model_dir,
                                 synchronizer__sync_method="checkpoint"))
    try:
        client = served.client()
        raw = client.chat.completions.with_raw_response.create(
            model=served.name, messages=QUESTION, n=2, logprobs=True,
            extra_headers={"X-Rft-Episode-Id": "user-7"})
        response = raw.parse()
        assert raw.headers["x-rft-response-id"] == response.id
        assert raw.headers["x-rft-episode-id"] == "user-7"
        assert response.model_extra["episode_id"] == "user-7"
        assert response.model_extra["model_version"] == 0
        second = client.chat.completions.create(
            model=served.name, messages=[*QUESTION, {"role": "assistant", "content": "3"},
                                 {"role": "user", "content": "max 11"}],
            extra_headers={"X-Rft-Episode-Id": "user-7"})
        stream = client.chat.completions.create(
            model=served.name, messages=QUESTION, stream=True,
            extra_headers={"X-Rft-Episode-Id": "user-8"})
        chunks = list(stream)
        assert {c.model_extra["episode_id"] for c in chunks} == {"user-8"}
        assert {c.model_extra["model_version"] for c in chunks} == {0}
        url = served.address
        # garbage and misuse: 4xx, one line each, nothing released
        for route, body, status, words in [
                ("/feedback", b"{not json", 400, "not valid JSON"),
                ("/feedback", {"response_id": "chatcmpl-nope", "reward": 1}, 404, "no pending"),
                ("/feedback", {"response_id": response.id, "reward": "good"}, 400, "finite"),
                ("/commit", {"episode_id": "user-7"}, 409, "has no reward yet"),
                ("/commit", {}, 400, "give one of")]:
            got, answer, _ = post(url + route, body)
            message = answer["error"]["message"]
            assert got == status and words in message and "\n" not in message, (route, answer)
        assert post(url + "/feedback", {"response_id": response.id, "rewards": [1, 0]})[0] == 200
        assert post(url + "/feedback", {"response_id": second.id, "reward": 0.5})[0] == 200
        status, body, _ = post(url + "/commit", {"episode_id": "user-7"})
        assert (status, body["experiences"]) == (200, 3)
        assert post(url + "/commit", {"episode_id": "user-7"})[0] == 409  # double commit
        assert post(url + "/feedback", {"episode_id": "user-7", "reward": 1})[0] == 409
        rows = buffer_rows(tmp_path)  # committed: in the SQLite file already
        assert [r["reward"] for r in rows] == [1.0, 0.0, 0.5]
        storage = open_storage("sql", "exp", str(tmp_path / "exp.db"))
        try:
            experiences = storage.read(3, timeout=1)
        finally:
            storage.close()
        for experience, choice in zip(experiences, response.choices, strict=False):
            sampled = [t.logprob for t in choice.logprobs.content]
            assert experience.logprobs.tolist() == pytest.approx(sampled, abs=1e-6)
            assert experience.eid.task == "user-7" and experience.model_version == 0
        assert experiences[2].eid.step == 1  # the second turn
    finally:
        served.stop()


def test_serve_trains_in_process_and_updates_live(tmp_path, tiny_model_dir):
    served = Served(write_config(tmp_path, tiny_model_dir, buffer__total_steps=2))
    assert served.run is not None and served.run.trains
    versions = []
    for episode in range(4):  # 2 episodes × 2 choices per step; the run ends after step 2
        versions.append(play_episode(served)["version"])
        if episode == 1:  # wait for the step this batch completes
            deadline = time.monotonic() + 60
            while served.run.step < 1 and time.monotonic() < deadline:
                time.sleep(0.05)
    served.thread.join(120)  # the run ends by itself after its 2 steps
    result = served.stop()
    assert versions == [0, 0, 1, 1]  # responses after a step carry its version
    assert result.steps == 2
    assert [c.step for c in list_checkpoints(served.stage.plan.job_dir)] == [2]
    assert len(buffer_rows(tmp_path)) == 8
    lines = (Path(served.stage.plan.job_dir) / "monitor" / "trainer.jsonl").read_text()
    logged = [json.loads(line) for line in lines.splitlines()]
    assert [m["step"] for m in logged if "serve/episodes_committed" in m["metrics"]] == [1, 2]
    assert logged[-1]["metrics"]["serve/episodes_committed"] == 4


def test_trainer_failure_is_one_line_and_serving_goes_on(tmp_path, tiny_model_dir, caplog):
    served = Served(write_config(tmp_path, tiny_model_dir))
    assert served.run is not None

    def broken(experiences):  # the fault: the trainer dies on its first step
        raise RuntimeError("CUDA error: an illegal memory access\nsecond line")

    setattr(served.run.trainer, "train_step", broken)  # noqa: B010
    try:
        with caplog.at_level(logging.ERROR, logger="rft.modes.serve"):
            play_episode(served)
            play_episode(served)  # a full batch: the step fails
            deadline = time.monotonic() + 60
            while served.run.trainer_error is None and time.monotonic() < deadline:
                time.sleep(0.05)
            assert served.run.trainer_error is not None
            after = play_episode(served)  # still answering, still committing
        assert after["version"] == 0
        errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert len(errors) == 1 and "\n" not in errors[0]
        assert "trainer failed at step 1" in errors[0] and "serving goes on" in errors[0]
    finally:
        served.stop()
    assert len(buffer_rows(tmp_path)) == 6  # every committed episode is there


def test_operators_and_the_pending_cap(tmp_path, tiny_model_dir):
    served = Served(write_config(
        tmp_path, tiny_model_dir, synchronizer__sync_method="checkpoint",
        explorer__serve_max_pending=1,
        data_processor__experience_pipeline__operators=[
            {"name": "reward_filter", "args": {"threshold": 0.5}}]))
    try:
        play_episode(served, reward_of=lambda text: 1.0)
        play_episode(served, reward_of=lambda text: 0.0)  # filtered out: not trained
        client = served.client()  # explorer.serve_max_pending=1: a second pending one drops
        first = client.chat.completions.create(model=served.name, messages=QUESTION)
        client.chat.completions.create(model=served.name, messages=QUESTION)
        status, body, _ = post(f"{served.address}/feedback",
                               {"response_id": first.id, "reward": 1})
        assert status == 410 and "explorer.serve_max_pending=1" in body["error"]["message"]
        with urllib.request.urlopen(f"{served.address}/health", timeout=30) as response:
            assert json.loads(response.read())["serve/responses_dropped"] == 1
    finally:
        served.stop()
    assert [row["reward"] for row in buffer_rows(tmp_path)] == [1.0, 1.0]


def test_serve_config_checks(tmp_path, tiny_model_dir):
    with pytest.raises(ConfigError) as caught:
        load_config(write_config(tmp_path, tiny_model_dir, explorer__serve_max_pending=0,
                                 synchronizer__sync_method="nccl",
                                 explorer__rollout_model__engine_num=2,
                                 synchronizer__streaming_batches=True))
    text = str(caught.value)
    assert "synchronizer.streaming_batches" not in text  # serve streams whole episodes
    assert "explorer.rollout_model.engine_num: mode 'serve' serves one engine" in text
    with pytest.raises(ConfigError) as caught:
        load_config(write_config(tmp_path, tiny_model_dir, algorithm__algorithm_type="sft",
                                 algorithm__repeat_times=1))
    assert "mode: algorithm 'sft' is train-only: mode 'serve'" in str(caught.value)
    assert "explorer.serve_max_pending: must be >= 1, got 0" in text
    assert "synchronizer.sync_method: 'nccl' does not work in mode 'serve'" in text


def test_streaming_batches_hold_whole_episodes_across_a_restart(tmp_path, tiny_model_dir):
    """``synchronizer.streaming_batches``: a batch is whole episodes; the episode a batch
    had no room for is held back, kept in the checkpoint, and trained once by the resumed
    run (its buffer rows were read, and their lease committed, by the first run)."""
    trained: list[list[str]] = []

    def spy(served: Served) -> None:  # records what each step trains
        assert served.run is not None
        train_step = served.run.trainer.train_step

        def recording(experiences):
            trained.append([e.info["episode_id"] for e in experiences])
            return train_step(experiences)

        setattr(served.run.trainer, "train_step", recording)  # noqa: B010

    def episode(served: Served, name: str) -> None:  # 3 choices of one prompt, one episode
        response = served.client().chat.completions.create(
            model=served.name, messages=QUESTION, n=3, extra_headers={"X-Rft-Episode-Id": name})
        assert post(f"{served.address}/feedback", {"episode_id": name, "reward": 1.0})[0] == 200
        assert post(f"{served.address}/commit", {"episode_id": name})[0] == 200
        assert response.id

    changes = {"synchronizer__streaming_batches": True, "trainer__save_interval": 1}
    served = Served(write_config(tmp_path, tiny_model_dir, buffer__total_steps=1, **changes))
    spy(served)
    episode(served, "A")
    episode(served, "B")  # 6 in the buffer, batch 4: A (3) fits, B (3) does not
    served.thread.join(120)
    assert served.stop().steps == 1
    state = json.loads((Path(served.stage.plan.job_dir) / "global_step_1" / "state.json")
                       .read_text())
    assert [e["info"]["episode_id"] for e in state["held_experiences"]] == ["B"] * 3
    served = Served(write_config(tmp_path, tiny_model_dir, buffer__total_steps=2,
                                 continue_from_checkpoint=True, **changes))
    assert served.run is not None and served.run.step == 1
    spy(served)
    episode(served, "C")  # 3 new + 3 held: step 2 trains B, C is held
    served.thread.join(120)
    assert served.stop().steps == 2
    assert trained == [["A"] * 3, ["B"] * 3]
    state = json.loads((Path(served.stage.plan.job_dir) / "global_step_2" / "state.json")
                       .read_text())
    assert [e["info"]["episode_id"] for e in state["held_experiences"]] == ["C"] * 3
    storage = open_storage("sql", "exp", str(tmp_path / "exp.db"))
    try:
        assert storage.available() == 0  # every row read; nothing handed out again
    finally:
        storage.close()


def test_trinity_serve_address_names(tmp_path, tiny_model_dir):
    """Trinity-RFT's ``explorer.listen_address`` / ``proxy_port`` are the endpoint's host
    and port; a different value in both spellings is one line."""
    loaded = load_config(write_config(tmp_path, tiny_model_dir,
                                      explorer__listen_address="127.0.0.2",
                                      explorer__proxy_port=8010))
    rm = loaded.stages[0].config.explorer.rollout_model
    assert (rm.openai_api_host, rm.openai_api_port) == ("127.0.0.2", 8010)
    with pytest.raises(ConfigError) as caught:
        load_config(write_config(tmp_path, tiny_model_dir, explorer__proxy_port=8010,
                                 explorer__rollout_model__openai_api_port=9000))
    assert ("explorer.proxy_port: 8010 differs from explorer.rollout_model.openai_api_port"
            "=9000; set one of them") in str(caught.value)


def child_env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


def wait_address(job_dir: Path, process: subprocess.Popen, timeout: float = 180) -> str:
    deadline = time.monotonic() + timeout
    path = job_dir / ADDRESS_FILE
    while time.monotonic() < deadline:
        if path.exists():
            address = json.loads(path.read_text())
            if address["pid"] == process.pid:
                return address["address"]
        assert process.poll() is None, process.communicate()
        time.sleep(0.2)
    raise AssertionError("serve did not write its address")


@pytest.mark.slow
def test_separate_train_process_and_sigterm(tmp_path, tiny_model_dir):
    """``sync_method: checkpoint``: a ``mode: train`` process of the same config trains on
    the committed episodes; the serve process loads its checkpoint (model_version 1) and on
    SIGTERM exits 143 with every committed experience in the buffer."""
    serve_cfg = write_config(tmp_path, tiny_model_dir, synchronizer__sync_method="checkpoint",
                             explorer__service_status_check_interval=0.5)
    train_cfg = write_config(tmp_path, tiny_model_dir, mode="train",
                             synchronizer__sync_method="checkpoint", buffer__total_steps=1)
    serve = subprocess.Popen([str(RFT), "run", str(serve_cfg)], env=child_env(),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        job_dir = tmp_path / "ck" / "serve" / "run"
        address = wait_address(job_dir, serve)
        client = openai.OpenAI(base_url=f"{address}/v1", api_key="EMPTY", max_retries=0)
        name = client.models.list().data[0].id
        for _ in range(2):
            response = client.chat.completions.create(model=name, messages=QUESTION, n=2)
            assert response.model_extra["model_version"] == 0
            assert post(f"{address}/feedback", {"response_id": response.id,
                                                 "rewards": [1, 0]})[0] == 200
            assert post(f"{address}/commit", {"response_id": response.id})[0] == 200
        trained = subprocess.run([str(RFT), "run", str(train_cfg)], env=child_env(),
                                 capture_output=True, text=True, timeout=300)
        assert trained.returncode == 0, trained.stderr[-2000:]
        deadline, version = time.monotonic() + 60, 0
        while version != 1 and time.monotonic() < deadline:
            version = client.chat.completions.create(
                model=name, messages=QUESTION).model_extra["model_version"]
        assert version == 1  # live: the train process's checkpoint
        response = client.chat.completions.create(model=name, messages=QUESTION)
        post(f"{address}/feedback", {"response_id": response.id, "reward": 1})
        assert post(f"{address}/commit", {"response_id": response.id})[0] == 200
        serve.send_signal(signal.SIGTERM)
        _, err = serve.communicate(timeout=60)
        assert serve.returncode == 143, err[-2000:]
        assert "terminated (SIGTERM)" in err
    finally:
        if serve.poll() is None:
            serve.kill()
    rows = buffer_rows(tmp_path)
    assert len(rows) == 5 and rows[-1]["model_version"] == 1


def test_serve_routes_need_the_key_and_keep_the_bounds(tmp_path, tiny_model_dir, monkeypatch):
    """The endpoint's API key and body bound hold for /feedback and /commit too; /health
    (no key) says the model version and the counters."""
    monkeypatch.setenv("SERVE_TEST_KEY", "s3cret")
    served = Served(write_config(
        tmp_path, tiny_model_dir, synchronizer__sync_method="checkpoint",
        explorer__rollout_model__openai_api_key_env="SERVE_TEST_KEY",
        explorer__rollout_model__openai_api_max_request_bytes=4096))
    try:
        url = served.address
        status, body, headers = post(f"{url}/feedback", {"response_id": "r", "reward": 1})
        assert status == 401 and headers.get("www-authenticate") == "Bearer"
        assert post(f"{url}/commit", {"episode_id": "r"},
                    {"Authorization": "Bearer wrong"})[0] == 401
        key = {"Authorization": "Bearer s3cret"}
        status, body, _ = post(f"{url}/commit", {"episode_id": "x" * 5000}, key)
        assert status == 413, body
        status, body, _ = post(f"{url}/commit", {"episode_id": "nope"}, key)
        assert status == 404 and body["error"]["message"] == "episode_id: no pending episode nope"
        with urllib.request.urlopen(f"{url}/health", timeout=30) as response:
            health = json.loads(response.read())
        assert health["status"] == "ok" and health["model_version"] == 0
        assert health["serve/episodes_committed"] == 0
    finally:
        served.stop()
