"""The ``external`` engine against a real OpenAI-compatible server on 127.0.0.1: rft's own
explorer endpoint (:mod:`rft.endpoint.openai_server`, uvicorn, the ``hf`` engine in
float32) in a process of its own, serving a tiny model fine-tuned here for a few seconds so
that its greedy answers to ``i+1=`` are right for some tasks and wrong for others.

- ``bench`` through the external engine gives exactly the in-process accuracy and answers;
- an auxiliary judge through it gives exactly the rewards of the same judge in-process;
- ``explore`` through it writes text experiences and loads no checkpoint;
- a dead server: one line naming the URL within the timeout; a bench whose server is
  killed midway keeps what it finished, and the next bench goes on from it;
- validation refuses the engine where it cannot work, in one line naming the key.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from rft.checkpoint import save_checkpoint
from rft.cli import main as rft_main
from rft.config import load_config
from rft.errors import ConfigError, RftError, ServerUnavailableError
from rft.experience import Experience
from rft.engines.engine import SamplingArgs
from rft.engines.external_engine import ExternalEngine, ExternalEngineArgs, engine_args
from rft.engines.hf_engine import HFEngine
from rft.rollout.model_wrapper import ModelWrapper
from rft.hookspecs import hookimpl
from rft.launcher import run
from rft.modes.bench_results import read_results
from rft.testing.runs import run_tiny, write_taskset
from rft_plugin_workflows.agent import verdict_probability
from rft_plugin_workflows.single_turn import SimpleWorkflow

URL_VAR = "RFT_TEST_EXTERNAL_URL"
KEY_VAR = "RFT_TEST_EXTERNAL_KEY"
SERVED_NAME = "tiny-arith"
TASKS = 12

SERVER_SCRIPT = """
import sys, time, torch
torch.set_num_threads(1)
from rft.engines.engine import SamplingArgs
from rft.engines.hf_engine import HFEngine
from rft.rollout.model_wrapper import ModelWrapper
engine = HFEngine(sys.argv[1], dtype="float32", max_model_len=136, max_prompt_tokens=128,
                  max_response_tokens=8)
# the same sampling defaults as the in-process runs (model.min_response_tokens: 1)
model = ModelWrapper(engine, SamplingArgs(max_tokens=8, min_tokens=1), name=sys.argv[2])
server = model.serve_openai_api("127.0.0.1", 0)
print(server.address, flush=True)
while True:
    time.sleep(3600)
"""


# ---- the served model and its server --------------------------------------------------------


@pytest.fixture(scope="module")
def trained_model(tiny_model_dir, tmp_path_factory) -> Path:
    """The tiny model after 100 Adam steps on ``i+1=`` → ``i+1`` for i < 8 (chat
    template, answer then ``<|im_end|>``): greedy answers right for those, wrong for most
    others (seeded: the same model every time)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(1)
    torch.manual_seed(0)
    out = tmp_path_factory.mktemp("tiny_arith")
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    rows = []
    for i in range(8):
        prompt = tokenizer.apply_chat_template([{"role": "user", "content": f"{i}+1="}],
                                               tokenize=False, add_generation_prompt=True)
        prompt_ids = tokenizer.encode(prompt, add_special_tokens=False)
        answer_ids = tokenizer.encode(f"{i + 1}<|im_end|>", add_special_tokens=False)
        ids = torch.tensor([prompt_ids + answer_ids])
        labels = ids.clone()
        labels[0, :len(prompt_ids)] = -100
        rows.append((ids, labels))
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(100):
        loss = sum(model(input_ids=ids, labels=labels).loss for ids, labels in rows)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


class ServerProcess:
    """rft's OpenAI endpoint serving ``model`` in a process of its own (killable)."""

    def __init__(self, model: Path) -> None:
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        self.process = subprocess.Popen([sys.executable, "-c", SERVER_SCRIPT, str(model),
                                         SERVED_NAME], stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL, text=True, env=env)
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: lines.put(self.process.stdout.readline()),
                         daemon=True).start()
        try:
            self.address = lines.get(timeout=120).strip()
        except queue.Empty:
            self.kill()
            raise RuntimeError("the server process did not start within 120 s") from None
        assert self.address.startswith("http://127.0.0.1:"), self.address
        self.url = f"{self.address}/v1"

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(timeout=30)


@pytest.fixture(scope="module")
def server(trained_model):
    process = ServerProcess(trained_model)
    yield process
    process.kill()


@pytest.fixture
def served(server, monkeypatch) -> str:
    """The server's base URL, in ``$RFT_TEST_EXTERNAL_URL``."""
    monkeypatch.setenv(URL_VAR, server.url)
    monkeypatch.delenv(KEY_VAR, raising=False)
    return server.url


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# ---- configs ---------------------------------------------------------------------------------


EXTERNAL = {"external_model": {"enable": True, "base_url_env": URL_VAR, "api_key_env": KEY_VAR}}


def bench_config(root: Path, tasks: Path, name: str, *, external: bool, model: Path | None,
                 **explorer: Any) -> Path:
    """A ``bench`` of the ``arith`` eval taskset (greedy), one task at a time, through the
    external engine or the ``hf`` engine (float32)."""
    model_section: dict[str, Any] = {"max_prompt_tokens": 128, "max_response_tokens": 8}
    if model is not None:
        model_section["model_path"] = str(model)
    if external:
        model_section.update(EXTERNAL)
    config = {
        "project": "ext", "name": name, "mode": "bench", "continue_from_checkpoint": True,
        "checkpoint_root_dir": str(root / "ck"),
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 2},
        "model": model_section,
        "cluster": {"node_num": 1, "gpu_per_node": 0},
        "buffer": {"batch_size": 2, "explorer_input": {"eval_tasksets": [{
            "name": "arith", "path": str(tasks),
            "format": {"prompt_key": "question", "response_key": "answer"},
            "default_workflow_type": "simple_workflow",
            "default_reward_fn_type": "accuracy_reward",
            "rollout_args": {"temperature": 0.0}}]}},
        "explorer": {"runner_per_model": 1, "max_timeout": 30, "max_retry_times": 1,
                     "rollout_model": ({} if external else {"engine_type": "hf",
                                                            "dtype": "float32"}),
                     **explorer},
        "synchronizer": {"sync_method": "checkpoint"},
        "trainer": {"trainer_type": "torch"},
        "monitor": {"monitor_type": "jsonl"},
    }
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def job_dir(root: Path, name: str) -> Path:
    return root / "ck" / "ext" / name


def bench_evals(root: Path, name: str) -> list[dict[str, Any]]:
    summary = json.loads((job_dir(root, name) / "summary.json").read_text())
    return summary["stages"][-1]["checkpoint_evals"]


def answers(root: Path, name: str, step: int) -> dict[int, str]:
    rows = read_results(str(job_dir(root, name) / "bench" / f"step_{step}" / "arith.jsonl"))
    return {row["task"]: row["response"] for row in rows}


# ---- bench: the same accuracy as in-process ----------------------------------------------------


@pytest.mark.slow
def test_bench_through_the_external_engine_equals_the_in_process_bench(tmp_path, served,
                                                                       trained_model):
    tasks = write_taskset(tmp_path / "tasks.jsonl", TASKS)
    # in-process: the same weights as a checkpoint of a run, evaluated by the hf engine
    local_job = job_dir(tmp_path, "local")
    save_checkpoint(str(local_job), 1, {}, {},
                    save_hf=lambda path: shutil.copytree(trained_model, path))
    assert run(load_config(bench_config(tmp_path, tasks, "local", external=False,
                                        model=trained_model))) == 0
    # external: the served model (no local model path: text only), evaluated as step 0
    loaded = load_config(bench_config(tmp_path, tasks, "hosted", external=True, model=None))
    assert loaded.stages[0].plan.rollout_model.engine.name == "external"
    assert run(loaded) == 0

    (local,), (hosted,) = bench_evals(tmp_path, "local"), bench_evals(tmp_path, "hosted")
    assert hosted["step"] == 0 and hosted["path"] == f"external model '{SERVED_NAME}' at {served}"
    accuracy = local["metrics"]["eval/arith/accuracy"]
    assert 0.0 < accuracy < 1.0  # some answers right, some wrong: a real comparison
    assert hosted["metrics"]["eval/arith/accuracy"] == accuracy
    assert hosted["metrics"]["eval/arith/reward/mean"] == local["metrics"]["eval/arith/reward/mean"]
    assert hosted["metrics"]["eval/arith/failed_tasks"] == 0.0
    assert answers(tmp_path, "hosted", 0) == answers(tmp_path, "local", 1)
    assert len(answers(tmp_path, "hosted", 0)) == TASKS


@pytest.mark.slow
def test_token_ids_and_logprobs_from_the_server_equal_the_engines(served, trained_model):
    """``return_token_ids``: the experiences carry the ids the server sampled, and its
    log-probs, equal to what the same engine gives in this process."""
    local = HFEngine(str(trained_model), dtype="float32", max_model_len=136,
                     max_prompt_tokens=128, max_response_tokens=8)
    remote = ExternalEngine(served, max_response_tokens=8, timeout=30.0,
                            tokenizer_path=str(trained_model),
                            args=ExternalEngineArgs(return_token_ids=True))
    try:
        assert remote.model_name == SERVED_NAME  # the one model GET /models lists
        conversations = [[{"role": "user", "content": f"{i}+1="}] for i in (2, 9)]
        sampling = SamplingArgs(temperature=0.7, max_tokens=8, min_tokens=1, seed=5)
        theirs = remote.chat(conversations[:1], sampling, n=2)[0]
        ours = local.chat(conversations[:1], sampling, n=2)[0]
        for a, b in zip(theirs, ours, strict=True):
            assert a.prompt_token_ids == b.prompt_token_ids
            assert a.token_ids == b.token_ids and a.text == b.text
            assert torch.equal(a.logprobs, b.logprobs)
        wrapper = ModelWrapper(remote, SamplingArgs(max_tokens=8, min_tokens=1))
        (exp,) = wrapper.chat(conversations[1], temperature=0.0)
        (greedy,) = local.chat(conversations[1:], SamplingArgs(temperature=0.0, max_tokens=8,
                                                              min_tokens=1))[0]
        assert exp.tokens.tolist() == greedy.tokens  # the ids as sampled, EOS included
        assert exp.prompt_length == len(greedy.prompt_token_ids)
        assert torch.equal(exp.logprobs, greedy.logprobs)
        # without return_token_ids: the local tokenizer's ids (the text re-encoded, no EOS)
        plain = ExternalEngine(served, max_response_tokens=8, timeout=30.0,
                               tokenizer_path=str(trained_model))
        (answer,) = plain.chat(conversations[1:], SamplingArgs(temperature=0.0, max_tokens=8,
                                                               min_tokens=1))[0]
        plain.close()
        assert answer.prompt_token_ids == greedy.prompt_token_ids
        assert answer.text == greedy.text
        assert answer.token_ids == local.tokenizer.encode(greedy.text, add_special_tokens=False)
        assert answer.logprobs is None or len(answer.logprobs) == len(answer.token_ids)
    finally:
        remote.close()


# ---- an auxiliary judge through the external engine ---------------------------------------------


class AgreementJudgeWorkflow(SimpleWorkflow):
    """Judged without a reference answer: the auxiliary model ``judge`` answers the question
    itself (greedy) and an answer earns 1 when it says the same (``reward/judge_agrees``)."""

    def reward(self, experiences: list[Experience]) -> None:
        judge = self.auxiliary_model("judge")
        (verdict,) = judge.chat(self.messages(), n=1, temperature=0.0)
        for exp in experiences:
            exp.reward = float(self.response_text(exp).strip() == verdict.response_text.strip())
            exp.metrics["reward/judge_agrees"] = exp.reward


class JudgePlugin:
    @hookimpl
    def register_workflows(self) -> dict[str, Any]:
        return {"agreement_judge_workflow": AgreementJudgeWorkflow}


@pytest.mark.slow
def test_auxiliary_judge_through_the_external_engine_in_a_grpo_run(tmp_path, served,
                                                                   trained_model, monkeypatch):
    """GRPO (colocate, 2 steps) on the trained model, sampling at temperature 2, judged by
    the same model: in this process (``hf``) or behind the server (``external``). Equal
    rewards step by step, neither all 0 nor all 1."""
    tasks = write_taskset(tmp_path / "tasks.jsonl", TASKS)
    common = {"buffer.explorer_input.taskset.default_workflow_type": "agreement_judge_workflow",
              "algorithm.repeat_times": 4, "explorer.runner_per_model": 1,
              "model.temperature": 2.0}  # samples that disagree with the greedy judge too
    judges = {
        "local": {"name": "judge", "engine_type": "hf", "dtype": "float32",
                  "model_path": str(trained_model)},
        "hosted": {"name": "judge", "engine_type": "external",
                   "external_model_config": {"base_url_env": URL_VAR, "api_key_env": KEY_VAR}},
    }
    requests: list[int] = []  # a spy on the engine's requests (they still go to the server)
    send = ExternalEngine._chat_one
    monkeypatch.setattr(ExternalEngine, "_chat_one",
                        lambda self, *args: requests.append(1) or send(self, *args))
    rewards = {}
    for name, judge in judges.items():
        (tmp_path / name).mkdir()
        outcome = run_tiny(trained_model, tasks, tmp_path / name,
                           {**common, "explorer.auxiliary_models": [judge]},
                           plugins=[JudgePlugin()])
        rewards[name] = [step["rollout/reward/mean"] for step in outcome.metrics]
    assert len(rewards["hosted"]) == 2
    assert len(requests) == 2 * 2  # one verdict per task: 2 steps × 2 tasks, all hosted
    assert rewards["hosted"] == rewards["local"]
    assert any(0.0 < r < 1.0 for r in rewards["hosted"]), rewards


def test_token_id_paths_give_one_line_errors():
    """Teacher-forced scoring (``llm_judge_workflow``'s verdicts), raw token-id prompts and
    weight updates are refused in one line naming the server (no request is made)."""
    engine = ExternalEngine("http://127.0.0.1:9/v1", model_name="judge")
    judge = ModelWrapper(engine, name="judge")
    checks = [
        lambda: engine.compute_logprobs([[1, 2, 3]], [1]),
        lambda: judge.generate_from_ids([1, 2, 3]),
        lambda: engine.update_weights([], version=1),
        lambda: verdict_probability(judge, [{"role": "user", "content": "ok?"}], "yes", "no"),
    ]
    for check in checks:
        with pytest.raises(RftError) as caught:
            check()
        message = str(caught.value)
        assert "\n" not in message and "http://127.0.0.1:9/v1" in message, message
    engine.close()


def test_engine_args_are_checked_and_extra_body_is_sent():
    args = engine_args({"extra_body": {"provider": {"sort": "price"}}, "max_concurrency": 2},
                       "explorer.rollout_model.extra_engine_args")
    assert args == ExternalEngineArgs(max_concurrency=2, extra_body={"provider": {"sort": "price"}})
    with pytest.raises(RftError, match=r"^explorer.rollout_model.extra_engine_args.max_concurrency"
                                       r": must be >= 1, got 0$"):
        engine_args({"max_concurrency": 0}, "explorer.rollout_model.extra_engine_args")
    engine = ExternalEngine("http://127.0.0.1:9/v1", model_name="m", args=args)
    body = engine.request_body(SamplingArgs(max_tokens=4, logprobs=False), n=1, seed=1)
    assert body["extra_body"] == {"provider": {"sort": "price"}} and "logprobs" not in body
    engine.close()


def test_request_body_sends_vllm_extras_only_when_they_matter():
    engine = ExternalEngine("http://127.0.0.1:9/v1", model_name="m", max_response_tokens=16)
    plain = engine.request_body(SamplingArgs(temperature=0.0, min_tokens=1), n=2, seed=3)
    assert plain == {"model": "m", "n": 2, "temperature": 0.0, "top_p": 1.0, "seed": 3,
                     "max_tokens": 16, "logprobs": True}
    tuned = engine.request_body(SamplingArgs(top_k=5, min_tokens=2, repetition_penalty=1.1,
                                             stop=("##",), max_tokens=4), n=1, seed=0)
    assert tuned["max_tokens"] == 4 and tuned["stop"] == ["##"]
    assert tuned["extra_body"] == {"top_k": 5, "min_tokens": 2, "repetition_penalty": 1.1}
    engine.close()


# ---- explore ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_explore_writes_text_experiences_and_loads_no_checkpoint(tmp_path, served,
                                                                  trained_model):
    tasks = write_taskset(tmp_path / "tasks.jsonl", 4)
    buffer = tmp_path / "experiences.jsonl"
    path = bench_config(tmp_path, tasks, "explore", external=True, model=None)
    config = yaml.safe_load(path.read_text())
    config["mode"] = "explore"
    config["buffer"].update({"total_steps": 1, "explorer_input": {
        "taskset": {**config["buffer"]["explorer_input"]["eval_tasksets"][0], "name": "train"}},
        "trainer_input": {"experience_buffer": {"name": "exp", "storage_type": "file",
                                                "path": str(buffer)}}})
    path.write_text(yaml.safe_dump(config))
    # a trainer's checkpoint in the job dir: the remote model cannot take it
    save_checkpoint(str(job_dir(tmp_path, "explore")), 1, {}, {},
                    save_hf=lambda out: shutil.copytree(trained_model, out))
    loaded = load_config(path)
    assert any("explorer.rollout_model.engine_type: 'external' serves a remote model: mode "
               "'explore' explores it as it is served" in w for w in loaded.warnings)
    assert run(loaded) == 0
    rows = [json.loads(line) for line in buffer.read_text().splitlines()]
    assert len(rows) == 2 * 2  # batch_size 2 × repeat_times 2
    assert {row["model_version"] for row in rows} == {0}
    for row in rows:
        assert row["tokens"] == [] and row["response_text"] is not None
        assert row["reward"] == float(row["response_text"] == str(row["eid"]["task"] + 1))


# ---- failures: a dead server, a server killed midway ---------------------------------------


def test_nothing_listening_is_one_line_naming_the_url_within_the_timeout(tmp_path, monkeypatch,
                                                                         capsys):
    url = f"http://127.0.0.1:{free_port()}/v1"
    monkeypatch.setenv(URL_VAR, url)
    tasks = write_taskset(tmp_path / "tasks.jsonl", 4)
    path = bench_config(tmp_path, tasks, "down", external=True, model=None, max_timeout=5)
    started = time.monotonic()
    assert rft_main(["run", str(path)]) != 0
    elapsed = time.monotonic() - started
    errors = [line for line in capsys.readouterr().err.splitlines()
              if line.startswith("rft: ") and "warning" not in line.lower()]
    assert len(errors) == 1, errors
    assert f"external model at {url}: model list failed: " in errors[0]
    assert "is the server running?" in errors[0]
    assert elapsed < 5.0 + 10.0  # the budget (0.9 × max_timeout), plus loading the config


@pytest.mark.slow
def test_refusals_name_the_server_and_stop_only_when_every_call_would_fail(served):
    """HTTP 404 (a model the server does not serve) is fatal: every call would get it;
    HTTP 400 (a request it refuses) fails that call only."""
    messages = [[{"role": "user", "content": "1+1="}]]
    unknown = ExternalEngine(served, model_name="no-such-model", timeout=30.0)
    with pytest.raises(ServerUnavailableError) as fatal:
        unknown.chat(messages, SamplingArgs(max_tokens=4))
    unknown.close()
    assert str(fatal.value).startswith(f"external model 'no-such-model' at {served}: chat "
                                       "completion refused with HTTP 404: ")
    engine = ExternalEngine(served, timeout=30.0)
    with pytest.raises(RftError) as refused:  # more new tokens than the server allows
        engine.chat(messages, SamplingArgs(max_tokens=64))
    assert not isinstance(refused.value, ServerUnavailableError)
    assert f"external model '{SERVED_NAME}' at {served}: chat completion refused with HTTP " \
           "400: " in str(refused.value) and "\n" not in str(refused.value)
    (ok,) = engine.chat(messages, SamplingArgs(max_tokens=4, temperature=0.0))[0]
    assert ok.text  # the engine goes on after a refused request
    engine.close()


def test_a_silent_server_times_out_within_the_budget():
    """A server that accepts the connection and never answers: one line naming the URL
    once the call's budget (all attempts together) is spent."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
        started = time.monotonic()
        with pytest.raises(ServerUnavailableError) as caught:
            ExternalEngine(url, timeout=1.5, max_retries=3)  # the model list never comes
        elapsed = time.monotonic() - started
    assert 1.4 < elapsed < 3.0
    assert str(caught.value).startswith(f"external model at {url}: model list failed: timed out")


@pytest.mark.slow
def test_a_bench_whose_server_dies_keeps_its_results_and_goes_on_later(tmp_path, monkeypatch,
                                                                      trained_model, server,
                                                                      capsys):
    tasks = write_taskset(tmp_path / "tasks.jsonl", 24)
    path = bench_config(tmp_path, tasks, "killed", external=True, model=None)
    results = job_dir(tmp_path, "killed") / "bench" / "step_0" / "arith.jsonl"
    first = ServerProcess(trained_model)
    monkeypatch.setenv(URL_VAR, first.url)

    def kill_after_three() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if results.exists() and len(read_results(str(results))) >= 3:
                first.kill()
                return
            time.sleep(0.005)

    killer = threading.Thread(target=kill_after_three, daemon=True)
    killer.start()
    try:
        status = rft_main(["run", str(path)])
    finally:
        killer.join(timeout=130)
        first.kill()
    errors = [line for line in capsys.readouterr().err.splitlines()
              if line.startswith("rft: ") and first.url in line]
    assert status != 0 and len(errors) == 1, errors
    kept = read_results(str(results))
    assert 3 <= len(kept) < 24  # what finished before the server died is on disk
    assert "complete" not in results.read_text()
    unfinished = job_dir(tmp_path, "killed") / "bench" / "unfinished"
    assert unfinished.exists()  # the next bench goes on from the results
    assert len({row["task"] for row in kept}) == len(kept)

    # the model is served again, at another address (the module's server)
    monkeypatch.setenv(URL_VAR, server.url)
    assert server.url != first.url
    assert rft_main(["run", str(path)]) == 0
    # an uninterrupted bench of the same model, for comparison
    assert rft_main(["run", str(bench_config(tmp_path, tasks, "whole", external=True,
                                             model=None))]) == 0
    assert not unfinished.exists()
    finished = read_results(str(results))
    assert finished[:len(kept)] == kept  # kept as they were: not run again
    assert sorted(row["task"] for row in finished) == list(range(24))  # each task once
    assert answers(tmp_path, "killed", 0) == answers(tmp_path, "whole", 0)
    (resumed,), (whole,) = bench_evals(tmp_path, "killed"), bench_evals(tmp_path, "whole")
    assert resumed["metrics"] == whole["metrics"]


def test_bench_records_go_on_only_after_an_unfinished_bench(tmp_path):
    """The record files: resumed (complete ones too) after a bench that did not finish,
    written afresh after one that did; another identity is moved aside."""
    from rft.experience import EID
    from rft.modes.bench_results import BenchRecord, BenchRun

    def rollout(task: int) -> Experience:
        return Experience(tokens=torch.zeros(0, dtype=torch.long), prompt_length=0,
                          reward=float(task % 2), eid=EID(task=task, run=0),
                          response_text=str(task))

    identity = {"model": "m", "tasksets": {"t": {"config": {"path": "x"}}}}
    job = str(tmp_path)
    first = BenchRun(job)
    assert not first.continues
    first.start()
    record = BenchRecord(job, 0, identity, resume=first.continues)
    assert record.restore("t") == []
    record.add("t", [rollout(0)])
    record.add("t", [rollout(1)])
    record.finish("t")  # complete, but the bench stops before its next checkpoint
    record.close()
    second = BenchRun(job)
    assert second.continues
    again = BenchRecord(job, 0, identity, resume=True)
    assert [(e.eid.task, e.reward, e.response_text) for e in again.restore("t")] == \
        [(0, 0.0, "0"), (1, 1.0, "1")]
    again.finish("t")
    again.close()
    assert read_results(again.path("t")) == read_results(record.path("t"))
    assert Path(again.path("t")).read_text().count("complete") == 1
    second.finished()
    assert not BenchRun(job).continues
    fresh = BenchRecord(job, 0, identity, resume=False)
    assert fresh.restore("t") == [] and read_results(fresh.path("t")) == []
    fresh.add("t", [rollout(5)])
    fresh.close()
    other = BenchRecord(job, 0, {**identity, "model": "n"}, resume=True)
    assert other.restore("t") == []  # not the same model: nothing to go on from
    other.close()
    assert [r["task"] for r in read_results(other.path("t") + ".replaced")] == [5]


# ---- validation -------------------------------------------------------------------------------


def problems_of(path: Path) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    return caught.value.problems


def edited(path: Path, edit) -> Path:
    config = yaml.safe_load(path.read_text())
    edit(config)
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.parametrize("mode", ["colocate", "both", "train"])
def test_external_as_the_trained_policy_is_one_line(tmp_path, monkeypatch, mode):
    monkeypatch.setenv(URL_VAR, "http://127.0.0.1:1/v1")
    tasks = write_taskset(tmp_path / "tasks.jsonl", 4)

    def training(config: dict[str, Any]) -> None:
        config["mode"] = mode
        config["buffer"]["explorer_input"]["taskset"] = {
            **config["buffer"]["explorer_input"]["eval_tasksets"][0], "name": "train"}
        config["buffer"]["trainer_input"] = {"experience_buffer": {"name": "e",
                                                                   "storage_type": "sql"}}
        config["synchronizer"]["sync_method"] = "checkpoint"

    path = edited(bench_config(tmp_path, tasks, "policy", external=True, model=None), training)
    lines = [p for p in problems_of(path) if p.startswith("explorer.rollout_model.engine_type")]
    assert lines == [(f"explorer.rollout_model.engine_type: 'external' serves a model on a "
                      f"remote server whose weights rft cannot change: it cannot be the policy "
                      f"trained in mode '{mode}'; evaluate it with mode 'bench' or 'explore', "
                      "or train with an in-process engine (hf, vllm)")]


def test_missing_base_url_variable_is_one_line_naming_it(tmp_path, monkeypatch):
    monkeypatch.delenv("RFT_TEST_NO_SUCH_VARIABLE", raising=False)
    tasks = write_taskset(tmp_path / "tasks.jsonl", 4)

    def unset(config: dict[str, Any]) -> None:
        config["model"]["external_model"]["base_url_env"] = "RFT_TEST_NO_SUCH_VARIABLE"
        config["explorer"]["auxiliary_models"] = [{
            "name": "judge", "engine_type": "external",
            "external_model_config": {"base_url_env": "RFT_TEST_NO_SUCH_VARIABLE"}}]

    path = edited(bench_config(tmp_path, tasks, "unset", external=True, model=None), unset)
    problems = problems_of(path)
    reason = ("environment variable RFT_TEST_NO_SUCH_VARIABLE is not set; it must hold the "
              "OpenAI-compatible server's base URL, e.g. http://127.0.0.1:8000/v1")
    assert f"model.external_model.base_url_env: {reason}" in problems
    assert (f"explorer.auxiliary_models[0].external_model_config.base_url_env: {reason}"
            in problems)
    assert len(problems) == 2, problems


@pytest.mark.parametrize("edit, line", [
    (lambda c: c["explorer"]["rollout_model"].update(engine_type="hf"),
     ("model.external_model.enable: true makes the rollout model the external API model "
      "(engine 'external'), but explorer.rollout_model.engine_type is 'hf': remove one of "
      "them")),
    (lambda c: c["explorer"]["rollout_model"].update(extra_engine_args={"max_concurency": 2}),
     ("explorer.rollout_model.extra_engine_args.max_concurency: unknown key; did you mean "
      "'max_concurrency'?")),
    (lambda c: c["explorer"]["rollout_model"].update(enable_history=True),
     ("explorer.rollout_model.enable_history: engine 'external' takes chat messages only, "
      "and this needs token ids; set it false")),
    (lambda c: c["model"].update(tinker={"enable": True}),
     "model.tinker.enable: the Tinker training service is not supported by rft"),
])
def test_external_config_problems_are_one_line(tmp_path, monkeypatch, edit, line):
    monkeypatch.setenv(URL_VAR, "http://127.0.0.1:1/v1")
    tasks = write_taskset(tmp_path / "tasks.jsonl", 4)
    path = edited(bench_config(tmp_path, tasks, "bad", external=True, model=None), edit)
    problems = problems_of(path)
    assert [p for p in problems if p.startswith(line)], problems
    assert len(problems) == 1, problems


def test_engine_type_external_alone_enables_the_external_model(tmp_path, monkeypatch):
    """``engine_type: external`` without ``model.external_model.enable`` (and without a
    model path) is the same as ``enable: true``; no checkpoint or GPU is needed."""
    monkeypatch.setenv(URL_VAR, "http://127.0.0.1:1/v1")
    tasks = write_taskset(tmp_path / "tasks.jsonl", 4)

    def by_engine_type(config: dict[str, Any]) -> None:
        config["model"]["external_model"]["enable"] = False
        config["explorer"]["rollout_model"] = {"engine_type": "external"}
        config["continue_from_checkpoint"] = False
        # a GPU node of a cluster (not this machine)
        config["cluster"] = {"node_num": 1, "gpu_per_node": 1, "ray_address": "10.0.0.1:6379"}

    loaded = load_config(edited(bench_config(tmp_path, tasks, "alone", external=True,
                                             model=None), by_engine_type))
    config = loaded.stages[0].config
    assert config.model.external_model.enable is True
    assert config.cluster.explorer_gpu_num == 0
    assert any(w.startswith(f"model.external_model.api_key_env: environment variable {KEY_VAR}")
               for w in loaded.warnings)
