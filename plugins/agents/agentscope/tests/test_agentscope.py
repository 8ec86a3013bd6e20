"""rft-plugin-agentscope: AgentScope ReAct agents as workflows, through rft's OpenAI
endpoint.

The episodes run the real AgentScope agent against the real endpoint (HTTP on 127.0.0.1)
and the ``hf`` engine on the tiny model, taught (:func:`rft.testing.tiny_model.teach_replies`,
greedy decoding) to answer the math agent's first prompt with a call of
``execute_python_code`` and the prompt after the tool's result with a boxed answer — a
random model never writes a tool call. The tool's code runs in the real sandbox.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from rft.builtin.reply_parsers import hermes_tool_calls
from rft.config import load_config
from rft.engines.engine import SamplingArgs
from rft.engines.hf_engine import HFEngine
from rft.engines.reply_parsing import ReplyParser
from rft.errors import ConfigError
from rft.plugins import PluginRegistry
from rft.rollout.model_wrapper import ModelWrapper
from rft.testing.tiny_model import build_tiny_model, teach_replies
from rft.workflow import Task
from rft_plugin_agentscope import (AgentScopeReActMathWorkflow, AgentScopeReActWorkflow,
                                   AgentScopeV0ReActMathWorkflow, ReActArgs)
from rft_plugin_agentscope.react import sampling_parameters
from rft_plugin_agentscope.sandbox import PythonLimits, run_python
from rft_plugin_agentscope.workflows import MATH_PROMPT, gsm8k_truth, python_tool
from rft_plugin_rewards import math_boxed_reward

CONFIGS = Path(__file__).parent / "configs"
QUESTION = "What is 2 + 3?"
CODE = "print(2 + 3)"
CALL_TEXT = ('<tool_call>\n{"name": "execute_python_code", "arguments": {"code": "'
             + CODE + '"}}\n</tool_call>')
TOOL_TURN = "\n<|im_start|>tool\n5\n<|im_end|>\n<|im_start|>assistant\n"
"""What the chat template renders after the call: the tool's result (the code's stdout,
``5\\n``) and the next generation prompt."""
ANSWER_TEXT = "The answer is \\boxed{5}."
EOS = "<|im_end|>"
SAMPLING = {"max_tokens": 96, "temperature": 0.0}


def tool_spec() -> dict:
    tool = python_tool(PythonLimits())
    return {"type": "function", "function": {"name": tool.name, "description": tool.description,
                                             "parameters": tool.parameters}}


# ---- registration, arguments, the sandbox ----------------------------------------------


def test_registered_by_this_distribution():
    registry = PluginRegistry.create()
    for name, cls in [("agentscope_react_workflow", AgentScopeReActWorkflow),
                      ("as_react_workflow", AgentScopeReActWorkflow),
                      ("agentscope_react_math_workflow", AgentScopeReActMathWorkflow),
                      ("agentscopev0_react_math_workflow", AgentScopeV0ReActMathWorkflow),
                      ("agentscope_reactv2_math_workflow", AgentScopeV0ReActMathWorkflow)]:
        registration = registry.registration("workflow", name)
        assert registration.distribution == "rft-plugin-agentscope"
        assert registration.implementation is cls
    assert not registry.has("workflow", "agentscope_v1_react_search_workflow")
    assert AgentScopeV0ReActMathWorkflow.Args().max_iters == 5
    assert ReActArgs().max_iters == 10


def test_without_this_distribution_the_names_say_where_they_are():
    registry = PluginRegistry.create(kinds=("workflow",), autoload=False)
    assert registry.unknown_name_message("workflow", "agentscope_react_math_workflow") == (
        "unknown workflow 'agentscope_react_math_workflow' (it is provided by "
        "rft-plugin-agentscope: pip install rft-plugin-agentscope)")
    assert "Trinity-RFT's e-mail search agent" in registry.unknown_name_message(
        "workflow", "email_search_workflow")
    assert "write a workflow plugin around your agent" in registry.unknown_name_message(
        "workflow", "agentscope_workflow_adapter_v1")


def test_python_tool_runs_code_in_a_limited_child():
    assert run_python(CODE).text == "5\n"
    silent = run_python("x = 1")
    assert not silent.failed and "printed nothing" in silent.text
    failed = run_python("print('before')\n1 / 0")
    assert failed.failed and failed.text.startswith("error: exit code 1\nbefore\n")
    assert "ZeroDivisionError: division by zero" in failed.text
    hung = run_python("while True: pass", PythonLimits(timeout=0.5))
    assert hung == type(hung)("error: the code ran longer than 0.5 s and was stopped", True)
    hungry = run_python("x = bytearray(512 << 20)", PythonLimits(memory_mb=256))
    assert hungry.failed and "MemoryError" in hungry.text
    isolated = run_python("import os, sys; print(sorted(os.environ)); print(sys.flags.isolated)")
    assert isolated.text == "['LANG', 'OMP_NUM_THREADS', 'PATH', 'PYTHONHASHSEED']\n1\n"
    long = run_python("print('a' * 3000)", PythonLimits(max_output_chars=100))
    assert long.text.startswith("a" * 100 + "\n… (2901 more characters cut)")


def test_tool_calls_and_failures_are_counted():
    from rft_plugin_agentscope.react import ToolLog, _wrapped

    log = ToolLog()
    call = _wrapped(python_tool(PythonLimits()), log)
    assert [b.text for b in call(code=CODE).content] == ["5\n"]
    assert call(code="1 / 0").content[0].text.startswith("error: exit code 1")
    assert call(source="print(1)").content[0].text.startswith("error: ")  # wrong argument
    assert (log.calls, log.errors) == (3, 2) and log.results[0] == "5\n"


def test_sampling_goes_to_the_model_parameters_or_the_extra_body():
    assert sampling_parameters({"temperature": 0.7, "max_tokens": 9, "top_p": 0.9, "n": 4,
                                "seed": 3, "top_k": 5, "logprobs": 1}) == (
        {"temperature": 0.7, "max_tokens": 9, "top_p": 0.9}, {"seed": 3, "top_k": 5})


def test_gsm8k_truth_is_read_after_the_marks():
    assert gsm8k_truth("2 + 3 = 5\n#### 5") == "5"
    assert gsm8k_truth("\\boxed{5}") == "\\boxed{5}" and gsm8k_truth(5) == 5


# ---- Trinity-RFT's example configs -----------------------------------------------------


@pytest.mark.parametrize("name", ["agentscope_react_workflow", "agentscope_react_math_workflow",
                                  "agentscopev0_react_math_workflow"])
def test_trinity_form_configs_validate(name, tmp_path):
    # written for nodes of 8 GPUs: validated as on a cluster of such nodes
    loaded = load_config(CONFIGS / f"{name}.yaml", [f"checkpoint_root_dir={tmp_path}",
                                                    "cluster.ray_address=10.0.0.1:6379"])
    (stage,) = loaded.stages
    taskset = stage.config.buffer.explorer_input.taskset
    assert taskset.default_workflow_type == name
    assert taskset.default_reward_fn_type == "math_boxed_reward"  # the workflows' default
    assert stage.config.algorithm.algorithm_type == "multi_step_grpo"
    model = stage.config.explorer.rollout_model
    assert model.enable_openai_api and model.enable_history and model.tool_call_parser == "hermes"


def one_problem(path: Path) -> str:
    with pytest.raises(ConfigError) as raised:
        load_config(path, ["cluster.ray_address=10.0.0.1:6379"])
    (line,) = str(raised.value).splitlines()
    return line


def test_the_web_search_agent_is_refused_in_one_line():
    assert one_problem(CONFIGS / "agentscope_v1_react_search_workflow.yaml") == (
        "buffer.explorer_input.taskset.default_workflow_type: unknown workflow "
        "'agentscope_v1_react_search_workflow' (Trinity-RFT's AgentScope web-search agent: its "
        "tool searches the web through a search API (Tavily), which needs the internet; "
        "rft-plugin-agentscope ships the offline ReAct workflows (agentscope_react_workflow, "
        "agentscope_react_math_workflow, agentscopev0_react_math_workflow))")


@pytest.mark.parametrize("args, message", [
    ({"type": "email_search"}, "workflow_args: type 'email_search' is not supported: it "
                               "searches Trinity-RFT's e-mail corpus"),
    ({"type": "countdown"}, "workflow_args: unknown type 'countdown' (known: gsm8k)"),
    ({"max_iters": 0}, "workflow_args: max_iters must be >= 1, got 0"),
])
def test_bad_workflow_args_are_one_line(args, message, tmp_path):
    text = (CONFIGS / "agentscope_react_workflow.yaml").read_text().replace(
        "workflow_args:\n        type: gsm8k", "workflow_args: " + json.dumps(args))
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    line = one_problem(path)
    assert line.startswith("buffer.explorer_input.taskset." + message)


# ---- episodes on the endpoint ------------------------------------------------------------


@pytest.fixture(scope="module")
def engine(tmp_path_factory) -> HFEngine:
    """The tiny model taught the math agent's two greedy replies: the tool call to the
    question, the boxed answer after the tool's result."""
    torch.set_num_threads(1)
    model_dir = build_tiny_model(tmp_path_factory.mktemp("tiny_agentscope"), seed=0)
    engine = HFEngine(str(model_dir), dtype="float32", max_model_len=1024,
                      max_response_tokens=96)

    def ids(text: str) -> list[int]:
        return engine.tokenizer.encode(text, add_special_tokens=False)

    # what the agent sends: its system prompt, the question, its one tool
    first = engine.apply_chat_template([{"role": "system", "content": MATH_PROMPT},
                                        {"role": "user", "content": QUESTION}],
                                       tools=[tool_spec()])
    call = ids(CALL_TEXT + EOS)
    teach_replies(model_dir, [(first, call),
                              (first + call + ids(TOOL_TURN), ids(ANSWER_TEXT + EOS))])
    return HFEngine(str(model_dir), dtype="float32", max_model_len=1024, max_response_tokens=96)


@pytest.fixture(scope="module")
def served(engine):
    root = ModelWrapper(engine, SamplingArgs(**SAMPLING), name="tiny")
    root.serve_openai_api(reply_parser=ReplyParser(hermes_tool_calls, None,
                                                   auto_tool_choice=True))
    yield root
    root.close()


def math_task(truth: str, repeat_times: int = 1, **args) -> Task:
    return Task(raw={}, index=0, taskset="t", prompt=QUESTION, truth=truth,
                repeat_times=repeat_times, sampling=dict(SAMPLING),
                workflow_args=ReActArgs(**args), reward_fn=math_boxed_reward)


TRANSCRIPT = [
    {"role": "user", "text": QUESTION},
    {"role": "assistant", "tool_call": {"id": "?", "name": "execute_python_code",
                                        "arguments": {"code": CODE}}},
    {"role": "tool", "tool_call_id": "?", "name": "execute_python_code", "result": "5\n"},
    {"role": "assistant", "text": ANSWER_TEXT},
]


def without_ids(transcript: list[dict]) -> list[dict]:
    out = json.loads(json.dumps(transcript))
    for entry in out:
        if "tool_call" in entry:
            entry["tool_call"]["id"] = "?"
        if "tool_call_id" in entry:
            entry["tool_call_id"] = "?"
    return out


def test_react_episode_calls_the_tool_and_every_call_is_an_experience(served):
    workflow = AgentScopeReActMathWorkflow(math_task("2 + 3 = 5\n#### 5", repeat_times=2),
                                           served.for_workflow(enable_history=True))
    experiences = workflow.run()
    assert len(experiences) == 4  # 2 episodes × (the call, the answer)
    assert experiences[0].info["episode"] != experiences[2].info["episode"]
    for step, exp in zip([0, 1, 0, 1], experiences, strict=True):
        assert exp.eid.step == step and exp.metrics["step_wise/steps"] == 2.0
        assert exp.reward == 1.0 and exp.metrics["reward/accuracy"] == 1.0
        assert exp.metrics["agent/tool_calls"] == 1.0 and exp.metrics["agent/tool_errors"] == 0.0
        assert exp.metrics["agent/model_calls"] == 2.0
        transcript = exp.info["agent/transcript"]
        assert without_ids(transcript) == TRANSCRIPT
        assert transcript[1]["tool_call"]["id"] == transcript[2]["tool_call_id"]
        json.dumps(exp.info)  # the record is plain JSON, as the buffer writes it
    call, answer = experiences[:2]
    assert served.decode(call.response_tokens, skip_special_tokens=False) == CALL_TEXT + EOS
    # the second call's prompt is the first call's tokens, then the tool's result
    assert torch.equal(answer.tokens[:len(call.tokens)], call.tokens)
    assert served.decode(answer.tokens[len(call.tokens):answer.prompt_length],
                         skip_special_tokens=False) == TOOL_TURN
    assert served.decode(answer.response_tokens, skip_special_tokens=False) == ANSWER_TEXT + EOS


def test_merged_episode_masks_the_tool_result_and_a_wrong_answer_scores_zero(served):
    workflow = AgentScopeReActMathWorkflow(math_task("6", merge_turns=True),
                                           served.for_workflow(enable_history=True))
    (episode,) = workflow.run()
    assert episode.reward == 0.0 and episode.metrics["reward/accuracy"] == 0.0
    assert "episode" not in episode.info and "step_wise/steps" not in episode.metrics
    assert episode.metrics["agent/model_calls"] == 2.0
    assert without_ids(episode.info["agent/transcript"]) == TRANSCRIPT
    mask = episode.action_mask
    assert served.decode(episode.response_tokens[mask], skip_special_tokens=False) == \
        CALL_TEXT + EOS + ANSWER_TEXT + EOS
    assert served.decode(episode.response_tokens[~mask], skip_special_tokens=False) == TOOL_TURN


def test_max_iters_ends_the_episode_at_the_tool_call(served):
    workflow = AgentScopeV0ReActMathWorkflow(
        Task(raw={}, index=0, taskset="t", prompt=QUESTION, truth="5", sampling=dict(SAMPLING),
             workflow_args=AgentScopeV0ReActMathWorkflow.Args(max_iters=1),
             reward_fn=math_boxed_reward),
        served.for_workflow(enable_history=True))
    experiences = workflow.run()
    assert experiences[0].metrics["agent/model_calls"] == float(len(experiences))
    assert all(exp.reward == 0.0 for exp in experiences)  # no boxed answer


def test_without_the_endpoint_the_episode_fails_in_one_line(engine):
    bare = ModelWrapper(engine, SamplingArgs(**SAMPLING), name="tiny", enable_history=True)
    workflow = AgentScopeReActMathWorkflow(math_task("5"), bare)
    with pytest.raises(Exception, match="has no OpenAI API: set enable_openai_api: true"):
        workflow.run()


# ---- training by name ---------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("name, args", [
    ("agentscope_react_workflow", {"type": "gsm8k"}),
    ("agentscope_react_math_workflow", {}),
    ("agentscopev0_react_math_workflow", {"merge_turns": True}),
])
def test_trains_two_steps_by_name(engine, tmp_path, name, args):
    """A colocate run selecting the workflow by name: the explorer serves the endpoint with
    the config's ``hermes`` parser; greedy rollouts of the taught model call the tool, then
    answer; step-wise GRPO (Trinity-RFT's ``multi_step_grpo``) trains on the calls."""
    from rft.testing.runs import run_tiny

    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"question": QUESTION, "answer": "2 + 3 = 5\n#### 5"}) + "\n")
    buffer = tmp_path / "experiences.jsonl"
    step_wise = {"algorithm.algorithm_type": "multi_step_grpo",
                 "data_processor.experience_pipeline.operators": [{"name": "step_wise_grpo"}]}
    outcome = run_tiny(engine.model_path, tasks, tmp_path, {
        **({} if args.get("merge_turns") else step_wise),
        "model": {"max_prompt_tokens": 600, "max_response_tokens": 96},
        "buffer.batch_size": 1,
        "buffer.explorer_input.taskset": {"default_workflow_type": name,
                                          "default_reward_fn_type": None,
                                          "workflow_args": args,
                                          "rollout_args": {"temperature": 0.0}},
        "buffer.trainer_input.experience_buffer": {"name": "exp", "storage_type": "file",
                                                   "path": str(buffer)},
        "explorer.rollout_model": {"enable_openai_api": True, "enable_history": True,
                                   "enable_auto_tool_choice": True,
                                   "tool_call_parser": "hermes"}})
    assert len(outcome.metrics) == 2
    for step in outcome.metrics:
        assert step["rollout/failed_tasks"] == 0.0 and "actor/pg_loss" in step
    first = [json.loads(line) for line in buffer.read_text().splitlines()
             if json.loads(line)["model_version"] == 0]
    per_episode = 1 if args.get("merge_turns") else 2
    assert len(first) == 2 * per_episode  # repeat_times 2
    for exp in first:
        assert exp["reward"] == 1.0 and exp["metrics"]["agent/tool_calls"] == 1.0
        assert without_ids(exp["info"]["agent/transcript"]) == TRANSCRIPT
