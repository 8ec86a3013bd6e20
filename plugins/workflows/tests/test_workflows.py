"""Workflows on the tiny model: prompts, scoring, and exact multi-turn token accounting."""

from __future__ import annotations

import pytest
import torch

from rft.engines.engine import SamplingArgs
from rft.engines.hf_engine import HFEngine
from rft.rollout.model_wrapper import ModelWrapper
from rft.plugins import PluginRegistry
from rft.testing.tiny_model import build_tiny_model
from rft.workflow import Task
from rft_plugin_workflows import MultiTurnArgs, MultiTurnWorkflow


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = build_tiny_model(tmp_path_factory.mktemp("tiny"), seed=0)
    engine = HFEngine(str(path), max_model_len=256, max_response_tokens=6, seed=3)
    return ModelWrapper(engine, SamplingArgs(temperature=1.0, max_tokens=6))


def exact(response: str, truth: str) -> dict[str, float]:
    return {"accuracy": float(response.strip() == truth)}


def make_task(**kwargs) -> Task:
    base = dict(raw={}, index=0, taskset="t", prompt="2+2=", truth="4", repeat_times=3,
                reward_fn=exact)
    return Task(**{**base, **kwargs})


@pytest.mark.parametrize("name, expected", [
    ("simple_workflow", [{"role": "user", "content": "2+2="}]),
    ("math_boxed_workflow", [{"role": "user", "content": "2+2=\nPlease reason step by "
                                                         "step, and put your final answer "
                                                         "within \\boxed{}."}]),
    ("verl_gsm8k_workflow", [{"role": "user", "content": "2+2= Let's think step by step "
                                                         "and output the final answer "
                                                         "after \"####\"."}]),
])
def test_single_turn_prompts(name, expected, model):
    workflow = PluginRegistry.create().get("workflow", name)(make_task(), model)
    assert workflow.messages() == expected


def test_math_workflow_adds_its_system_prompt_unless_the_task_has_one(model):
    cls = PluginRegistry.create().get("workflow", "math_workflow")
    messages = cls(make_task(), model).messages()
    assert messages[0]["role"] == "system" and "<think>" in messages[0]["content"]
    own = cls(make_task(system_prompt="Be brief."), model).messages()
    assert own[0] == {"role": "system", "content": "Be brief."}


def test_simple_workflow_scores_every_rollout(model):
    cls = PluginRegistry.create().get("workflow", "simple_workflow")
    experiences = cls(make_task(), model).run()
    assert len(experiences) == 3
    for exp in experiences:
        assert exp.reward in (0.0, 1.0) and "reward/accuracy" in exp.metrics
        assert exp.logprobs.shape == (exp.response_length,)
        assert exp.response_text == model.decode(exp.response_tokens)


class Countdown(MultiTurnWorkflow):
    """Three turns: the environment answers 'again' twice, then ends (reward 1 at the end)."""

    def step(self, reply: str, turn: int) -> tuple[str | None, float]:
        return (None, 1.0) if turn == 2 else (f"again {turn}", 0.0)


def test_multi_turn_experience_has_exact_tokens_masks_and_logprobs(model):
    task = make_task(repeat_times=2, workflow_args=MultiTurnArgs(max_turns=5))
    experiences = Countdown(task, model).run()
    assert len(experiences) == 2
    tokenizer = model.tokenizer
    for exp in experiences:
        assert exp.reward == 1.0 and exp.metrics["multi_turn/turns"] == 3.0
        mask = exp.action_mask
        # three model segments separated by two environment segments
        changes = (mask[1:] != mask[:-1]).sum().item()
        assert bool(mask[0]) and changes == 4
        text = tokenizer.decode(exp.tokens.tolist(), skip_special_tokens=False)
        assert text.count("again 0") == 1 and text.count("again 1") == 1
        env_text = tokenizer.decode(exp.response_tokens[~mask].tolist(), skip_special_tokens=False)
        assert "again 0" in env_text and "<|im_start|>user" in env_text
        # the sampling log-probs of the model's tokens equal teacher-forced log-probs
        recomputed = model.logprobs(exp)
        torch.testing.assert_close(exp.logprobs[mask], recomputed[mask], atol=1e-4, rtol=0)
        assert torch.count_nonzero(exp.logprobs[~mask]) == 0


def test_multi_turn_stops_at_max_turns(model):
    class Endless(MultiTurnWorkflow):
        def step(self, reply, turn):
            return "more", 0.5

    (exp,) = Endless(make_task(repeat_times=1, workflow_args=MultiTurnArgs(max_turns=2)),
                     model).run()
    assert exp.metrics["multi_turn/turns"] == 2.0 and exp.reward == 1.0


def test_greedy_baseline_is_the_reward_of_the_greedy_answer(model):
    """ReMax's baseline: with ``task.greedy_baseline`` every experience carries the reward
    of one greedy answer to the same messages; without it, none."""
    cls = PluginRegistry.create().get("workflow", "simple_workflow")

    def first_char(response: str, truth: str) -> dict[str, float]:
        return {"code": float(ord(response[0])) if response else -1.0}

    plain = cls(make_task(reward_fn=first_char), model).run()
    assert all("reward_baseline" not in e.info for e in plain)
    task = make_task(reward_fn=first_char, greedy_baseline=True, sampling={"max_tokens": 4})
    workflow = cls(task, model)
    experiences = workflow.run()
    (greedy,) = model.chat(workflow.messages(), n=1, temperature=0.0, max_tokens=4)
    expected = first_char(model.decode(greedy.response_tokens), "4")["code"]
    assert len(experiences) == 3
    assert all(e.info["reward_baseline"] == expected for e in experiences)
