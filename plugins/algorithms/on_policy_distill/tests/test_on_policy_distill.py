"""rft-plugin-on-policy-distill: the advantage fn by hand, its contract and its one-line
errors, the workflow with the tiny model as its own teacher, the preset after
validation, tiny runs whose teacher is the initial student and another tiny model. veRL
0.9.1 has no distillation advantage, so there is no veRL comparison."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from hypothesis import given

from rft.contracts import AdvantageInputs, MissingInputError
from rft.errors import RftError
from rft.plugins import PluginRegistry
from rft.testing.algorithms import SETTINGS, close, validated
from rft.testing.checks import check_advantage
from rft.testing.strategies import advantage_inputs
from rft.testing.tiny_model import build_tiny_model
from rft.workflow import Task
from rft_plugin_on_policy_distill import (OnPolicyDistillArgs, OnPolicyDistillMathWorkflow,
                                          OnPolicyDistillWorkflow,
                                          OnPolicyDistillWorkflowArgs,
                                          on_policy_distill_advantages)

torch.set_num_threads(1)


def _inputs(student: list[list[float]], teacher: list[list[float]] | None,
            mask: list[list[float]]) -> AdvantageInputs:
    mask_t = torch.tensor(mask, dtype=torch.float64)
    return AdvantageInputs(torch.zeros_like(mask_t), mask_t, ["g"] * len(mask),
                           rollout_log_prob=torch.tensor(student, dtype=torch.float64),
                           teacher_log_prob=(None if teacher is None
                                             else torch.tensor(teacher, dtype=torch.float64)))


def test_advantages_are_the_teacher_student_log_ratio() -> None:
    """``A_t = k (log π_T − log π_S)`` on the response mask; ``returns = A``."""
    inputs = _inputs([[-1.0, -2.0, -0.5], [-1.0, 0.0, 0.0]],
                     [[-0.5, -2.5, -3.0], [-1.25, 0.0, 0.0]],
                     [[1, 1, 0], [1, 0, 0]])
    advantages, returns = on_policy_distill_advantages(inputs, OnPolicyDistillArgs(kl_coef=2.0))
    close(advantages, torch.tensor([[1.0, -1.0, 0.0], [-0.5, 0.0, 0.0]], dtype=torch.float64))
    assert torch.equal(returns, advantages)


@SETTINGS
@given(advantage_inputs())
def test_keeps_the_advantage_contract(inputs: AdvantageInputs) -> None:
    """Finite, no gradient, zero at masked positions; the rewards play no part (shift
    and scale invariant)."""
    gen = torch.Generator().manual_seed(inputs.response_mask.numel())
    shape = inputs.response_mask.shape
    inputs = dataclasses.replace(
        inputs, rollout_log_prob=-torch.rand(shape, generator=gen, dtype=torch.float64) * 3,
        teacher_log_prob=-torch.rand(shape, generator=gen, dtype=torch.float64) * 3)
    check_advantage(on_policy_distill_advantages, OnPolicyDistillArgs(kl_coef=0.7), inputs,
                    shift_invariant=True, scale_invariant=True)
    same = dataclasses.replace(inputs, teacher_log_prob=inputs.rollout_log_prob)
    close(on_policy_distill_advantages(same, OnPolicyDistillArgs())[0],
          torch.zeros(shape, dtype=torch.float64))


def test_a_batch_without_teacher_log_probs_is_one_line() -> None:
    inputs = _inputs([[-1.0]], None, [[1]])
    with pytest.raises(MissingInputError, match=r"on_policy_distill needs teacher_log_prob.*"
                                                r"on_policy_distill_workflow"):
        on_policy_distill_advantages(inputs, OnPolicyDistillArgs())
    no_student = dataclasses.replace(_inputs([[-1.0]], [[-1.0]], [[1]]), rollout_log_prob=None)
    with pytest.raises(MissingInputError, match="rollout_log_prob comes from Experience.logprobs"):
        on_policy_distill_advantages(no_student, OnPolicyDistillArgs())


def test_workflow_with_the_student_as_its_own_teacher(rft_model) -> None:
    """The teacher scores the student's tokens at the sampling temperature: with the same
    weights its log-probs are the sampling log-probs."""
    task = Task(raw={}, index=0, taskset="t", prompt="3+1=", truth="4", repeat_times=2,
                sampling={"temperature": 1.0, "max_tokens": 6})
    workflow = OnPolicyDistillWorkflow(task, rft_model, auxiliary_models=[rft_model])
    workflow.args = OnPolicyDistillWorkflowArgs()
    experiences = workflow.run()
    assert len(experiences) == 2
    for exp in experiences:
        assert exp.reward == 0.0 and exp.teacher_logprobs.shape == (exp.response_length,)
        assert exp.teacher_logprobs.dtype == torch.float32
        torch.testing.assert_close(exp.teacher_logprobs, exp.logprobs, atol=1e-4, rtol=1e-4)
        assert abs(exp.metrics["distill/kl"]) < 1e-3


def test_math_workflow_asks_in_qwen_math_format_and_rewards_accuracy(rft_model) -> None:
    """Trinity-RFT's ``on_policy_distill_math_workflow``, selected by name: Qwen2.5-Math's
    prompt, teacher log-probs on every answer, the boxed answer's accuracy as reward."""
    cls = PluginRegistry.create().get("workflow", "on_policy_distill_math_workflow")
    assert cls is OnPolicyDistillMathWorkflow
    task = Task(raw={}, index=0, taskset="t", prompt="3+1=", truth="4", repeat_times=2,
                sampling={"temperature": 1.0, "max_tokens": 6})
    workflow = cls(task, rft_model, auxiliary_models=[rft_model])
    workflow.args = OnPolicyDistillWorkflowArgs()
    assert workflow.messages() == [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "3+1=\nPlease reason step by step, and put your final "
                                    "answer within \\boxed{}."}]
    assert workflow.accuracy("so it is \\boxed{4}") == 1.0
    assert workflow.accuracy("\\boxed{5}") == 0.0 and workflow.accuracy("4") == 0.0
    experiences = workflow.run()
    assert len(experiences) == 2
    for exp in experiences:  # a random tiny model never boxes 4
        assert exp.reward == 0.0 and exp.metrics["accuracy"] == 0.0
        assert exp.teacher_logprobs.shape == (exp.response_length,)
        text = rft_model.tokenizer.decode(exp.tokens[:exp.prompt_length].tolist())
        assert "You are a helpful assistant." in text and "\\boxed{}" in text


def test_workflow_without_a_teacher_says_so(rft_model) -> None:
    task = Task(raw={}, index=0, taskset="t", prompt="3+1=", repeat_times=1)
    with pytest.raises(RftError, match="no auxiliary model '0'"):
        OnPolicyDistillWorkflow(task, rft_model).run()


def test_registered_by_this_distribution() -> None:
    registry = PluginRegistry.create()
    for kind, name in (("algorithm", "on_policy_distill"), ("advantage_fn", "on_policy_distill"),
                       ("workflow", "on_policy_distill_workflow")):
        assert registry.registration(kind, name).distribution == "rft-plugin-on-policy-distill"


def test_preset_fills_defaults(tmp_path) -> None:
    """Trinity-RFT's form: ``advantage_fn_args.kl_coef`` reaches the advantage fn."""
    algorithm, plan = validated({"algorithm_type": "on_policy_distill",
                                 "advantage_fn_args": {"kl_coef": 0.5}}, str(tmp_path))
    assert (algorithm.advantage_fn, algorithm.policy_loss_fn, algorithm.kl_loss_fn,
            algorithm.kl_penalty_fn, algorithm.entropy_loss_fn, algorithm.sample_strategy,
            algorithm.repeat_times) == ("on_policy_distill", "ppo", "none", "none", "none",
                                        "default", 8)
    assert not plan.preset.advantage_in_explorer and not plan.preset.use_reference
    assert plan.loss.advantage.args == OnPolicyDistillArgs(kl_coef=0.5)


def _distil(rft_run, teacher_path: str, steps: int = 2, **overrides):
    return rft_run({
        "algorithm.algorithm_type": "on_policy_distill", "algorithm.repeat_times": 2,
        "explorer.auxiliary_models": [{"name": "teacher", "model_path": teacher_path,
                                       "engine_type": "hf", "dtype": "float32"}],
        "buffer.explorer_input.taskset.default_workflow_type": "on_policy_distill_workflow",
        "buffer.explorer_input.taskset.workflow_args": {"teacher": "teacher"},
        **overrides,
    }, steps=steps)


def test_a_tiny_run_with_the_initial_student_as_teacher(rft_run, rft_tiny_model) -> None:
    """Before the first update the teacher is the student: the advantages vanish."""
    outcome = _distil(rft_run, str(rft_tiny_model))
    assert len(outcome.metrics) == 2
    for step in outcome.metrics:
        assert "actor/pg_loss" in step
        assert all(math.isfinite(v) for v in step.values() if isinstance(v, float))
    first = outcome.metrics[0]
    assert abs(first["critic/advantages/max"]) < 1e-3 and abs(first["critic/advantages/min"]) < 1e-3


def _teacher_forced(model_dir, exp) -> torch.Tensor:
    """``(R,)`` log-probs of ``exp``'s response tokens under the model at ``model_dir``
    (plain transformers, independent of rft's engines)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    with torch.no_grad():
        logits = model(input_ids=exp.tokens[None]).logits[0, :-1]  # (L − 1, V)
    logps = torch.log_softmax(logits.double(), -1)
    targets = exp.tokens[1:]  # (L − 1,)
    return logps[torch.arange(len(targets)), targets][exp.prompt_length - 1:]  # (R,)


@pytest.mark.slow
def test_a_tiny_run_distils_from_another_model(rft_run, tmp_path) -> None:
    """The teacher is another tiny model (other random weights, same tokenizer). The
    experiences the run wrote (a SQLite buffer) carry the teacher's log-probs as plain
    transformers computes them, and the trainer's advantages of step 1 are
    ``k (log π_T − log π_S)`` over them: ``critic/advantages/mean`` equals that masked
    mean, computed here from the stored rows."""
    import json
    import sqlite3

    from rft.buffer.storage import experience_from_dict

    teacher = build_tiny_model(tmp_path / "teacher", seed=7)
    db = tmp_path / "exp.db"
    outcome = _distil(rft_run, str(teacher), steps=2, **{
        "algorithm.advantage_fn_args": {"kl_coef": 2.0},
        "buffer.trainer_input.experience_buffer": {"name": "exp", "storage_type": "sql",
                                                   "path": str(db)}})
    assert len(outcome.metrics) == 2
    with sqlite3.connect(db) as conn:
        rows = [experience_from_dict(json.loads(payload)) for (payload,)
                in conn.execute("SELECT payload FROM experiences ORDER BY id")]
    first = [exp for exp in rows if exp.eid.batch == 1]
    assert len(first) == 4
    gaps, count = [], 0
    for exp in first:
        torch.testing.assert_close(exp.teacher_logprobs.double(), _teacher_forced(teacher, exp),
                                   atol=1e-4, rtol=1e-4)
        mask = exp.action_mask.double()
        gaps.append((2.0 * (exp.teacher_logprobs.double() - exp.logprobs.double()) * mask).sum())
        count += int(mask.sum())
    expected = float(sum(gaps)) / count
    assert expected < -0.01  # another model: a real gap
    assert outcome.metrics[0]["critic/advantages/mean"] == pytest.approx(expected, abs=1e-5)
