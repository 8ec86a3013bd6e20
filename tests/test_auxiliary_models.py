"""Auxiliary models (validation, engines, lookup) and the agent / judge workflows in real
``colocate`` runs on the tiny model."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import torch

from fixtures_models import arithmetic_tasks
from rft.config import load_config
from rft.errors import ConfigError, RftError
from rft.rollout.auxiliary import build_auxiliary_models, close_models
from rft.launcher import run
from rft.workflow import Task
from rft_plugin_workflows.agent import AgentArgs, AgentOpenAIWorkflow
from test_embedded_run import write_config


@pytest.fixture
def tasks(tmp_path) -> Path:
    return arithmetic_tasks(tmp_path, 4)


def judge_changes(model: Path, **extra) -> dict:
    return {"explorer__auxiliary_models": [{"name": "judge", "model_path": str(model),
                                            "engine_type": "hf", "dtype": "float32", **extra}]}


def test_colocate_on_cpu_accepts_auxiliary_models(tmp_path, tiny_model_dir, tasks):
    loaded = load_config(write_config(tmp_path, tiny_model_dir, tasks,
                                      **judge_changes(tiny_model_dir)))
    assert loaded.stages[0].config.explorer.auxiliary_models[0].name == "judge"
    assert loaded.stages[0].plan.auxiliary_models[0].engine.name == "hf"


@pytest.mark.parametrize("changes, message", [
    ({"cluster__gpu_per_node": 1},
     "explorer.auxiliary_models: mode 'colocate' on a GPU machine (1 GPU(s) per node) runs no "
     "auxiliary models"),
    ({"explorer__auxiliary_models": [{"name": "j", "model_path": "MODEL", "engine_type": "hff"}]},
     "explorer.auxiliary_models[0].engine_type"),
    ({"explorer__auxiliary_models": [{"name": "j", "engine_type": "hf"}]},
     "explorer.auxiliary_models[0].model_path: must be set"),
    ({"explorer__auxiliary_models": [{"name": "j", "model_path": "/no/such/judge"}]},
     "explorer.auxiliary_models[0].model_path: path '/no/such/judge' does not exist"),
    ({"explorer__auxiliary_models": [{"name": "j", "model_path": "MODEL", "engine_type": "hf"},
                                     {"name": "j", "model_path": "MODEL", "engine_type": "hf"}]},
     "explorer.auxiliary_models[1].name: 'j' is also the name of explorer.auxiliary_models[0]"),
    ({"explorer__rollout_model": {"engine_type": "hf", "openai_api_port": 70000}},
     "explorer.rollout_model.openai_api_port: must be 0 (any free port) or a port number"),
])
def test_auxiliary_model_problems_are_named(tmp_path, tiny_model_dir, tasks, changes, message):
    if "explorer__auxiliary_models" in changes and "cluster__gpu_per_node" not in changes:
        for aux in changes["explorer__auxiliary_models"]:
            if aux.get("model_path") == "MODEL":
                aux["model_path"] = str(tiny_model_dir)
    if "cluster__gpu_per_node" in changes:
        changes = {**changes, **judge_changes(tiny_model_dir)}
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")
                       .replace("[", r"\[").replace("]", r"\]")):
        load_config(write_config(tmp_path, tiny_model_dir, tasks, **changes))


def test_auxiliary_engines_are_built_named_and_looked_up(tmp_path, tiny_model_dir, tasks):
    stage = load_config(write_config(
        tmp_path, tiny_model_dir, tasks, explorer__auxiliary_models=[
            {"name": "judge", "model_path": str(tiny_model_dir), "engine_type": "hf",
             "dtype": "float32", "max_response_tokens": 3, "enable_openai_api": True},
            {"model_path": str(tiny_model_dir), "engine_type": "hf", "dtype": "float32"}],
        model__custom_chat_template="{{ 'policy template' }}")).stages[0]
    models = build_auxiliary_models(stage.config, stage.plan.auxiliary_models)
    try:
        judge, second = models
        assert (judge.name, second.name) == ("judge", "1")
        assert judge.engine.chat_template is None  # the policy's template is not inherited
        assert judge.defaults.max_tokens == 3 and second.defaults.max_tokens == 8
        (reply,) = judge.chat([{"role": "user", "content": "hi"}], temperature=0.0)
        assert reply.response_length <= 3
        client = judge.get_openai_client()
        assert client.models.list().data[0].id == "judge"
        address = judge.api_address
        task = Task(raw={}, index=0, taskset="t", prompt="1+1=", truth="2",
                    workflow_args=AgentArgs())
        workflow = AgentOpenAIWorkflow(task, judge, auxiliary_models=models)
        assert workflow.auxiliary_model("judge") is judge
        assert workflow.auxiliary_model(1) is second and workflow.auxiliary_model("1") is second
        with pytest.raises(RftError, match=r"no auxiliary model 'critic' \(explorer.auxiliary_"
                                           r"models: 'judge', '1'\)"):
            workflow.auxiliary_model("critic")
    finally:
        close_models(models)
    with pytest.raises(RftError, match="has no OpenAI API"):
        judge.get_openai_client()
    with pytest.raises(urllib.error.URLError, match="Connection refused"):
        urllib.request.urlopen(f"{address}/v1/models", timeout=10)


def read_buffer(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow
def test_agent_workflow_trains_two_steps_over_the_openai_endpoint(tmp_path, tiny_model_dir, tasks):
    buffer = tmp_path / "experiences.jsonl"
    loaded = load_config(write_config(
        tmp_path, tiny_model_dir, tasks,
        buffer__explorer_input__taskset__default_workflow_type="agent_openai_workflow",
        buffer__explorer_input__taskset__workflow_args={"max_turns": 2},
        buffer__trainer_input__experience_buffer={"name": "exp", "storage_type": "file",
                                                  "path": str(buffer)},
        explorer__rollout_model={"engine_type": "hf", "dtype": "float32",
                                 "enable_openai_api": True, "enable_history": True}))
    assert run(loaded) == 0
    job = tmp_path / "ck" / "e2e" / "run"
    trainer = [json.loads(x) for x in (job / "monitor" / "trainer.jsonl").read_text().splitlines()]
    assert [r["step"] for r in trainer] == [1, 2]
    experiences = read_buffer(buffer)
    assert len(experiences) == 8  # 2 steps × 2 tasks × repeat_times 2, one per episode
    for exp in experiences:
        mask = torch.tensor(exp["action_mask"])
        response = exp["tokens"][exp["prompt_length"]:]
        assert len(mask) == len(response) and exp["metrics"]["multi_turn/turns"] == 2.0
        # model answer, environment feedback (masked out), model answer
        changes = (mask[1:] != mask[:-1]).sum().item()
        assert mask[0] and mask[-1] and changes == 2 and not mask.all()
        feedback = torch.tensor(response)[~mask]
        assert feedback.tolist() == [t for t, m in zip(response, mask.tolist()) if not m]
        logprobs = torch.tensor(exp["logprobs"])
        assert torch.all(logprobs[~mask] == 0) and torch.all(logprobs[mask] < 0)
    assert {e["model_version"] for e in experiences} == {0, 1}


@pytest.mark.slow
def test_judge_reward_from_an_auxiliary_model_in_a_run(tmp_path, tiny_model_dir, tasks):
    loaded = load_config(write_config(
        tmp_path, tiny_model_dir, tasks,
        buffer__explorer_input__taskset__default_workflow_type="llm_judge_workflow",
        buffer__explorer_input__taskset__workflow_args={"judge": "judge"},
        **judge_changes(tiny_model_dir)))
    assert run(loaded) == 0
    job = tmp_path / "ck" / "e2e" / "run"
    explorer = [json.loads(x)
                for x in (job / "monitor" / "explorer.jsonl").read_text().splitlines()]
    assert [e["metrics"]["rollout/experiences"] for e in explorer] == [4.0, 4.0]
    for record in explorer:
        reward = record["metrics"]["rollout/reward/mean"]
        assert 0.0 < reward < 1.0  # the judge's probability of "yes", not a 0/1 check
        assert record["metrics"]["rollout/reward/max"] > record["metrics"]["rollout/reward/min"]
