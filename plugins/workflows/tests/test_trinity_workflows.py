"""Trinity-RFT's workflow names on rft: the math workflows and their args (``use_base``,
``with_think``, ``format_score_coef``), tool-call prediction, the judged workflows (reward
model, RULER, trainable RULER, rubric judge) with the tiny model as their auxiliary model,
and the step-wise base class — through rft's testing kit and by hand."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rft.plugins import PluginRegistry
from rft.testing.checks import check_workflow
from rft.testing.strategies import workflow_tasks
from rft.workflow import Task
from rft_plugin_rewards.dapo import DAPOArgs, math_dapo_reward, overlong_penalty
from rft_plugin_rewards.math import math_reward
from rft_plugin_workflows import (
    WORKFLOWS,
    MathBoxedArgs,
    MathBoxedWorkflow,
    MathRMWorkflow,
    MathRULERWorkflow,
    MathTrainableRULERWorkflow,
    MathWorkflow,
    RewardModelArgs,
    RubricJudgeArgs,
    RubricJudgeWorkflow,
    RulerArgs,
    SimpleArgs,
    StepWiseArgs,
    StepWiseMathArgs,
    StepWiseMathWorkflow,
    StepWiseWorkflow,
    ToolCallWorkflow,
    TrainableRulerArgs,
)
from rft_plugin_workflows.agent import verdict_probability
from rft_plugin_workflows.judges import parse_rating, parse_scores, rubric_messages, ruler_messages
from rft_plugin_workflows.single_turn import BOXED_WITH_THINK_PROMPT, base_model_prompt
from rft_plugin_workflows.toolcall import toolcall_messages, toolcall_score

FEW = settings(max_examples=4, deadline=None,
               suppress_health_check=[HealthCheck.function_scoped_fixture])
"""Each example generates with the tiny model."""


def exact(response: str, truth: str) -> dict[str, float]:
    return {"accuracy": float(response.strip() == str(truth))}


def make_task(**kwargs) -> Task:
    base = dict(raw={"question": "2+2=", "answer": "4"}, index=0, taskset="t", prompt="2+2=",
                truth="4", repeat_times=3, reward_fn=exact, sampling={"max_tokens": 6})
    return Task(**{**base, **kwargs})


# ---- registration -----------------------------------------------------------------------

def test_every_name_is_registered_by_this_distribution():
    registry = PluginRegistry.create()
    for name, cls in WORKFLOWS.items():
        registration = registry.registration("workflow", name)
        assert registration.distribution == "rft-plugin-workflows"
        assert registration.implementation is cls
    assert WORKFLOWS["async_math_workflow"] is WORKFLOWS["math_workflow"] is MathWorkflow
    assert WORKFLOWS["toolcall_workflow"] is WORKFLOWS["tool_call_workflow"] is ToolCallWorkflow
    assert WORKFLOWS["async_math_ruler_workflow"] is MathRULERWorkflow


@pytest.mark.parametrize("name", ["agentscope_v1_react_search_workflow", "webshop_workflow",
                                  "email_search_workflow"])
def test_names_rft_does_not_provide_are_unknown(name):
    assert not PluginRegistry.create().has("workflow", name)


# ---- math workflows: contract -------------------------------------------------------------

@FEW
@given(task=workflow_tasks(greedy_baseline=None), args=st.sampled_from([
    SimpleArgs(), SimpleArgs(use_base=True), SimpleArgs(system_prompt="Be brief.")]))
def test_math_workflow_keeps_the_contract(rft_model, task, args):
    check_workflow(MathWorkflow, args, task, rft_model)


@FEW
@given(task=workflow_tasks(greedy_baseline=None, reward_fn=math_dapo_reward,
                           reward_args=DAPOArgs(True, 1.0, 6, 3)),
       args=st.builds(MathBoxedArgs, use_base=st.booleans(), with_think=st.booleans()))
def test_math_boxed_workflow_with_the_dapo_reward_keeps_the_contract(rft_model, task, args):
    experiences = check_workflow(MathBoxedWorkflow, args, task, rft_model)
    for exp in experiences:
        assert exp.metrics["reward/format_score"] == pytest.approx(
            overlong_penalty(exp.response_length, task.reward_args))
        assert exp.metrics["reward/accuracy"] in (1.0, -1.0)


# ---- math workflows: prompts and args by hand ---------------------------------------------

def test_use_base_prompts_trinitys_plain_text(rft_model):
    task = make_task(system_prompt="Be brief.", repeat_times=2)
    workflow = MathWorkflow(dataclasses.replace(task, workflow_args=SimpleArgs(use_base=True)),
                            rft_model)
    prompt = "System:Be brief.\nUser:\n2+2=\nAssistant:\n"
    assert workflow.base_prompt() == prompt
    assert base_model_prompt([{"role": "user", "content": "q"}]) == "User:\nq\nAssistant:\n"
    experiences = workflow.run()
    expected = rft_model.tokenizer.encode(prompt, add_special_tokens=False)
    assert [e.prompt_tokens.tolist() for e in experiences] == [expected, expected]
    assert all(e.reward in (0.0, 1.0) for e in experiences)


def test_with_think_swaps_the_instruction_for_a_system_prompt(rft_model):
    plain = MathBoxedWorkflow(make_task(), rft_model).messages()
    assert plain == [{"role": "user", "content": "2+2=\nPlease reason step by step, and put "
                                                 "your final answer within \\boxed{}."}]
    think = MathBoxedWorkflow(make_task(workflow_args=MathBoxedArgs(with_think=True)),
                              rft_model).messages()
    assert think == [{"role": "system", "content": BOXED_WITH_THINK_PROMPT},
                     {"role": "user", "content": "2+2="}]
    own = MathBoxedWorkflow(make_task(system_prompt="Mine.",
                                      workflow_args=MathBoxedArgs(with_think=True)),
                            rft_model).messages()
    assert own[0] == {"role": "system", "content": "Mine."}


def test_declared_extra_inputs_reach_the_reward(rft_model):
    seen = []

    def spy(response, truth, *, response_tokens=None, with_think=None,
            format_score_coef=None, unknown=None):
        seen.append((response_tokens, with_think, format_score_coef, unknown))
        return {"accuracy": 0.0}

    spy.extra_inputs = ("response_tokens", "with_think", "format_score_coef", "unknown")
    args = MathBoxedArgs(with_think=True, format_score_coef=0.3)
    experiences = MathBoxedWorkflow(make_task(reward_fn=spy, workflow_args=args), rft_model).run()
    assert [s[0] for s in seen] == [e.response_tokens.tolist() for e in experiences]
    assert {s[1:] for s in seen} == {(True, 0.3, None)}
    # a simple workflow passes only the tokens; an undeclaring reward gets nothing extra
    seen.clear()
    MathWorkflow(make_task(reward_fn=spy, repeat_times=1), rft_model).run()
    assert seen[0][1:] == (None, None, None) and seen[0][0] is not None
    plain = MathWorkflow(make_task(repeat_times=1), rft_model).run()
    assert plain[0].reward in (0.0, 1.0)


def test_math_boxed_reward_gets_with_think_from_the_workflow(rft_model):
    boxed = PluginRegistry.create().get("reward_fn", "math_boxed_reward")
    task = make_task(reward_fn=boxed, workflow_args=MathBoxedArgs(with_think=True,
                                                                  format_score_coef=0.25))
    for exp in MathBoxedWorkflow(task, rft_model).run():  # random text: no think block
        assert exp.metrics["reward/format_score"] == -0.25
        assert exp.reward == exp.metrics["reward/accuracy"] - 0.25


def test_greedy_baseline_of_base_model_prompts(rft_model):
    task = make_task(greedy_baseline=True, workflow_args=SimpleArgs(use_base=True),
                     reward_fn=lambda r, t: {"n": float(len(r))})
    experiences = MathWorkflow(task, rft_model).run()
    (greedy,) = rft_model.generate([MathWorkflow(task, rft_model).base_prompt()], n=1,
                                   temperature=0.0, max_tokens=6)
    assert {e.info["reward_baseline"] for e in experiences} == {float(len(greedy.response_text))}


# ---- toolcall_workflow --------------------------------------------------------------------

WEATHER = {"name": "weather", "description": "The weather of a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}
ROW = {"tools": '[{"name": "weather", "description": "The weather of a city.", '
                '"parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]',
       "raw_system": "You are helpful.",
       "conversations": [{"from": "human", "value": "Weather in Paris and Rome?"},
                         {"from": "function_call", "value": {"name": "weather"}},
                         {"from": "observation", "value": "sunny"}],
       "answer": '[{"name": "weather", "arguments": {"city": "Paris"}}, '
                 '{"name": "weather", "arguments": {"city": "Rome"}}]'}
GOOD = ('<think>two cities</think><tool_call>[{"name": "weather", "arguments": {"city": "Rome"}},'
        ' {"name": "weather", "arguments": {"city": "Paris"}}]</tool_call>')


def test_toolcall_messages_follow_tool_n1():
    messages = toolcall_messages(ROW)
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool"]
    assert messages[0]["content"].startswith("You are helpful.# Tool\n\n<tools>\n")
    assert '{"type": "function", "function": {"name": "weather"' in messages[0]["content"]
    assert messages[2]["content"] == '{"name": "weather"}'


@pytest.mark.parametrize("response, score", [
    (GOOD, 1.0),                                                     # order does not matter
    (GOOD.replace("Rome", "Oslo"), 0.0),                             # wrong argument
    (GOOD.replace("<think>two cities</think>", ""), 0.0),            # no thinking
    ("<think>a</think>" + GOOD, 0.0),                                # two think blocks
    (GOOD.replace("<think>two cities</think>", "") + "<think>late</think>", 0.0),  # after
    ('<think>x</think><tool_call>[{"name": "weather"}]</tool_call>', 0.0),  # no arguments
    ("<think>x</think><tool_call>not json</tool_call>", 0.0),
    ("<think>x</think> no call", 0.0),
])
def test_toolcall_score_by_hand(response, score):
    assert toolcall_score(response, ROW["answer"]) == score


def test_toolcall_score_edge_cases():
    assert toolcall_score("<think>x</think><tool_call>[]</tool_call>", "[]") == 1.0
    assert toolcall_score("<think>x</think><tool_call>[]</tool_call>", ROW["answer"]) == 0.0
    single = '<think>x</think><tool_call>{"name": "f", "arguments": {}}</tool_call>'
    assert toolcall_score(single, [{"name": "f", "arguments": {}}]) == 1.0
    assert toolcall_score(single, "not json") == 0.0


def test_toolcall_workflow_keeps_the_contract(rft_model):
    task = make_task(raw=ROW, prompt=None, truth=None, reward_fn=None, repeat_times=2)
    experiences = check_workflow(ToolCallWorkflow, None, task, rft_model)
    assert all(e.reward == 0.0 and e.metrics["reward/accuracy"] == 0.0 for e in experiences)
    workflow = ToolCallWorkflow(dataclasses.replace(task, repeat_times=1), rft_model)
    (exp,) = workflow.sample(1)
    exp.response_text = GOOD
    workflow.reward([exp])
    assert exp.reward == 1.0


# ---- judged workflows ---------------------------------------------------------------------

def test_ruler_scores_are_parsed_as_trinity_does():
    assert parse_scores("I think... [0.2, 1.5, -1]", 3) == [0.2, 1.0, 0.0]
    assert parse_scores("[1, 2] then [0.5, 0.25]", 2) == [0.5, 0.25]   # the last list
    assert parse_scores("[0.5, 0.25]", 3) is None                       # not one per answer
    assert parse_scores("no list", 1) is None
    assert parse_scores("[__import__('os')]", 1) is None                # never evaluated
    assert parse_scores("[True]", 1) is None and parse_scores("[nan]", 1) is None


def test_rubric_ratings_are_parsed_as_trinity_does():
    assert parse_rating('```json\n{"rating": 7}\n```') == pytest.approx(6 / 9)
    assert parse_rating('Sure.\n```\n{"rating": 10}\n```') == 1.0
    assert parse_rating('```json\n{"rating": 1}```') == 0.0
    for bad in ('{"rating": 7}', '```json\n{"rating": 11}\n```', '```json\n[7]\n```',
                '```json\n{"rating": "7"}\n```', '```json\n{"score": 7}\n```', "```json {"):
        assert parse_rating(bad) is None


def test_judge_prompts_hold_the_question_answers_and_rubrics():
    system, user = ruler_messages("2+2=", ["4", "five"])
    assert "2 candidate solutions" in system["content"]
    assert "Candidate solution 1: 4" in user["content"]
    assert "Candidate solution 2: five" in user["content"]
    assert user["content"].endswith("[score of solution 1, ..., score of solution 2]")
    _, user = rubric_messages("Q?", "A.", [{"weight": 2, "description": "Is polite"}])
    assert "<prompt>\nQ?\n</prompt>" in user["content"]
    assert "Rubric 0 (weight: 2): Is polite" in user["content"]
    _, user = rubric_messages("Q?", "A.", '[{"weight": 1, "description": "Short"}]')
    assert "Rubric 0 (weight: 1): Short" in user["content"]
    assert "Rubrics are not provided." in rubric_messages("Q?", "A.", [])[1]["content"]


def test_ruler_rewards_each_answer_with_its_score(rft_model, scripted_judge):
    judge = scripted_judge("Solution 2 is best. [0.2, 1.5, -1]")
    task = make_task(workflow_args=RulerArgs(judge="judge", judge_temperature=0.0))
    experiences = MathRULERWorkflow(task, rft_model, auxiliary_models=[judge]).run()
    assert [e.reward for e in experiences] == [0.2, 1.0, 0.0]
    assert all(e.metrics["judge_success"] == 1.0 for e in experiences)
    for exp in experiences:  # the taskset's reward is the gold one, logged only
        assert exp.metrics["gold_reward"] == exp.metrics["reward/accuracy"]
    ((messages, sampling),) = judge.calls
    assert sampling == {"temperature": 0.0}
    assert "Candidate solution 3:" in messages[1]["content"]
    assert "Question: 2+2=" in messages[1]["content"]


def test_ruler_without_a_readable_list_gives_zeros(rft_model, scripted_judge):
    judge = scripted_judge("[0.3, 0.4]")  # two scores for three answers
    experiences = MathRULERWorkflow(make_task(reward_fn=None), rft_model,
                                    auxiliary_models=[judge]).run()
    assert [e.reward for e in experiences] == [0.0] * 3
    assert all(e.metrics["judge_success"] == 0.0 and "gold_reward" not in e.metrics
               for e in experiences)


def test_rubric_judge_rates_each_answer(rft_model, scripted_judge):
    judge = scripted_judge('```json\n{"rating": 10}\n```', "no idea", '```json\n{"rating": 4}```')
    task = make_task(raw={"question": "2+2=", "rubric": [{"weight": 1, "description": "right"}]},
                     workflow_args=RubricJudgeArgs())
    experiences = RubricJudgeWorkflow(task, rft_model, auxiliary_models=[judge]).run()
    assert [e.reward for e in experiences] == [1.0, 0.0, pytest.approx(1 / 3)]
    assert [e.metrics["judge_success"] for e in experiences] == [pytest.approx(2 / 3)] * 3
    assert all("Rubric 0 (weight: 1): right" in m[1]["content"] for m, _ in judge.calls)
    assert all(s == {"temperature": 0.0} for _, s in judge.calls)


def test_reward_model_gives_its_verdict_probability(rft_model, judge):
    task = make_task(workflow_args=RewardModelArgs(reward_model="judge"), repeat_times=2)
    experiences = MathRMWorkflow(task, rft_model, auxiliary_models=[judge]).run()
    for exp in experiences:
        content = RewardModelArgs().prompt.format(question="2+2=", answer=exp.response_text,
                                                  truth="4")
        p = verdict_probability(judge, [{"role": "user", "content": content}], "yes", "no")
        assert exp.reward == pytest.approx(p) and 0.0 < p < 1.0
        assert exp.metrics["reward/reward_model"] == exp.reward
        assert "gold_reward" in exp.metrics


@settings(max_examples=3, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(task=workflow_tasks(greedy_baseline=None),
       name=st.sampled_from(["math_rm_workflow", "math_ruler_workflow", "rubric_judge_workflow"]))
def test_judged_workflows_keep_the_contract_with_the_tiny_model_as_judge(
        rft_model, judge, bind, task, name):
    cls = PluginRegistry.create().get("workflow", name)
    args = cls.Args(**({"reward_model": "judge"} if name == "math_rm_workflow"
                       else {"judge": "judge"}))
    experiences = check_workflow(bind(cls, judge), args, task, rft_model)
    if name != "math_rm_workflow":  # a random model writes no scores
        assert all(e.reward == 0.0 and e.metrics["judge_success"] == 0.0 for e in experiences)


class ScriptedPolicy:
    """The tiny model, except that its replies to RULER's prompt read ``reply``."""

    def __init__(self, model, reply: str) -> None:
        self.model, self.reply = model, reply

    def chat(self, messages, n=1, **sampling):
        experiences = self.model.chat(messages, n=n, **sampling)
        if messages[0]["content"].startswith("You are a fair judge"):
            for exp in experiences:
                exp.response_text = self.reply
        return experiences

    def __getattr__(self, name):
        return getattr(self.model, name)


def test_trainable_ruler_with_gold_trains_the_judge_too(rft_model):
    def gold(response, truth):
        return {"accuracy": 1.0 if response.startswith("!") else 0.0}

    policy = ScriptedPolicy(rft_model, "[1.0, 0.5, 0.0]")
    task = make_task(reward_fn=gold, workflow_args=TrainableRulerArgs(
        gold_probability=1.0, gold_min=0.0, gold_max=1.0))
    experiences = MathTrainableRULERWorkflow(task, policy).run()
    answers, judges = experiences[:3], experiences[3:]
    assert len(judges) == 3 and all(j.info["ruler_judge"] for j in judges)
    assert [j.eid.suffix for j in judges] == ["ruler"] * 3
    golds = [a.metrics["gold_reward"] for a in answers]
    assert [a.reward for a in answers] == golds
    error = sum(abs(s - g) for s, g in zip([1.0, 0.5, 0.0], golds, strict=True)) / 3
    assert all(j.reward == pytest.approx(1 - error) for j in judges)
    assert all(e.metrics["judge_success"] == 1.0 for e in experiences)


def test_trainable_ruler_without_gold_rewards_the_scores(rft_model):
    policy = ScriptedPolicy(rft_model, "[0.25, 0.5, 0.75]")
    task = make_task(workflow_args=TrainableRulerArgs(gold_probability=0.0))
    experiences = MathTrainableRULERWorkflow(task, policy).run()
    assert [e.reward for e in experiences] == [0.25, 0.5, 0.75]
    with pytest.raises(Exception, match="needs a reward function"):
        MathTrainableRULERWorkflow(make_task(reward_fn=None), policy).run()


@settings(max_examples=3, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(task=workflow_tasks(greedy_baseline=None), probability=st.sampled_from([0.0, 1.0]))
def test_trainable_ruler_keeps_the_contract(rft_model, task, probability):
    experiences = check_workflow(MathTrainableRULERWorkflow,
                                 TrainableRulerArgs(gold_probability=probability), task, rft_model)
    assert len(experiences) == task.repeat_times * (2 if probability else 1)


# ---- step-wise ----------------------------------------------------------------------------

class Countdown(StepWiseWorkflow):
    """The environment rewards step k with k/10 and ends after three steps."""

    def step(self, reply, step):
        return (None, 1.0) if step == 2 else (f"again {step}", step / 10)


def test_step_wise_gives_one_experience_per_step_with_its_own_reward(rft_model):
    task = make_task(repeat_times=2, workflow_args=StepWiseArgs(max_steps=5))
    experiences = Countdown(task, rft_model).run()
    assert [e.reward for e in experiences] == [0.0, 0.1, 1.0] * 2
    assert [e.eid.step for e in experiences] == [0, 1, 2] * 2
    episodes = [e.info["episode"] for e in experiences]
    assert episodes[0] == episodes[1] == episodes[2] != episodes[3] == episodes[4] == episodes[5]
    assert episodes[0].endswith("-0") and episodes[3].endswith("-1")
    again = Countdown(task, rft_model).run()  # another run of the task: other episode ids
    assert not {e.info["episode"] for e in again} & set(episodes)
    assert [e.eid.suffix for e in experiences[:3]] == ["step0", "step1", "step2"]
    assert all(e.metrics["step_wise/steps"] == 3.0 for e in experiences)
    last = experiences[2]
    text = rft_model.tokenizer.decode(last.prompt_tokens.tolist(), skip_special_tokens=False)
    assert "again 0" in text and "again 1" in text  # the conversation so far is the prompt
    assert last.action_mask.all() and last.logprobs.shape == (last.response_length,)
    propagated = Countdown(dataclasses.replace(task, workflow_args=StepWiseArgs(
        max_steps=2, propagate_final_reward=True)), rft_model).run()
    assert [e.reward for e in propagated] == [0.1, 0.1] * 2  # cut at two steps


def test_step_wise_math_retries_until_success(rft_model):
    answers = iter([{"accuracy": 0.0}, {"accuracy": 1.0}])

    def second_time_right(response, truth):
        return next(answers)

    task = make_task(repeat_times=1, reward_fn=second_time_right,
                     workflow_args=StepWiseMathArgs(max_steps=3))
    first, second = StepWiseMathWorkflow(task, rft_model).run()
    assert (first.reward, second.reward) == (0.0, 1.0)
    assert second.metrics["reward/accuracy"] == 1.0
    text = rft_model.tokenizer.decode(second.prompt_tokens.tolist(), skip_special_tokens=False)
    assert "Your answer scored 0. Check it and answer again." in text


@FEW
@given(task=workflow_tasks(greedy_baseline=False))
def test_step_wise_math_keeps_the_contract(rft_model, task):
    experiences = check_workflow(StepWiseMathWorkflow, StepWiseMathArgs(max_steps=2), task,
                                 rft_model)
    assert task.repeat_times <= len(experiences) <= 2 * task.repeat_times


def test_math_reward_scores_math_workflow_answers(rft_model):
    task = make_task(reward_fn=math_reward, repeat_times=2)
    for exp in MathWorkflow(task, rft_model).run():
        assert exp.metrics["reward/format_score"] == -0.1  # random text: no think/answer
        assert torch.isfinite(torch.tensor(exp.reward))
