"""Tool calls and reasoning through the OpenAI endpoint.

The built-in parsers are checked on text (property tests for ``hermes``); the endpoint end
to end with the real ``openai`` client, the real HTTP server and the ``hf`` engine
(float32) on a tiny model taught (:func:`rft.testing.tiny_model.teach_replies`, greedy
decoding) to answer with a tool call, then with the tool's result, and to reason first —
a random model never writes any of them.
"""

from __future__ import annotations

import json

import openai
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rft.builtin.reply_parsers import deepseek_r1_reasoning, hermes_tool_calls, qwen3_reasoning
from rft.engines.engine import Completion, SamplingArgs
from rft.engines.hf_engine import HFEngine
from rft.rollout.history import History
from rft.rollout.model_wrapper import ModelWrapper
from rft.engines.reply_parsing import AssistantReply, FunctionCall, ReplyParser, call_of
from rft.testing.tiny_model import build_tiny_model, teach_replies
from rft.workflow import Task
from rft_plugin_workflows.tools import CALCULATE, ToolAgentArgs, ToolAgentWorkflow, calculate
from rft_plugin_workflows.tools import run_tool_call

TOOLS = [{"type": "function", "function": {
    "name": "add", "description": "Add two numbers.",
    "parameters": {"type": "object", "properties": {"a": {"type": "number"},
                                                    "b": {"type": "number"}},
                   "required": ["a", "b"]}}}]
QUESTION = [{"role": "user", "content": "What is 2 + 3?"}]
CALL_TEXT = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'
ANSWER_TEXT = "The sum is 5."
THINKING = [{"role": "user", "content": "Think: what is 2 + 3?"}]
THINK_TEXT = "<think>2 plus 3 makes 5</think>\n5"
EOS = "<|im_end|>"
AGENT_CALL_TEXT = ('<tool_call>\n{"name": "calculate", "arguments": {"expression": "2 + 3"}}'
                   '\n</tool_call>')


# ---- the parsers on text -------------------------------------------------------------


def hermes_text(content: str, calls: list[FunctionCall]) -> str:
    return content + "".join(
        f"<tool_call>\n{json.dumps({'name': c.name, 'arguments': c.arguments})}\n</tool_call>"
        for c in calls)


names = st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True)
arguments = st.dictionaries(st.text(min_size=1, max_size=4),
                            st.one_of(st.integers(), st.text(max_size=6), st.booleans(),
                                      st.lists(st.integers(), max_size=2)), max_size=3)
contents = st.text(max_size=20).filter(lambda t: "<tool_call>" not in t)


@settings(max_examples=200, deadline=None)
@given(contents, st.lists(st.builds(FunctionCall, names, arguments), min_size=1, max_size=3))
def test_hermes_reads_back_what_it_is_written(content, calls):
    parsed_content, parsed = hermes_tool_calls(hermes_text(content, calls))
    assert parsed == calls and parsed_content == content.strip()


@settings(max_examples=100, deadline=None)
@given(contents)
def test_hermes_text_without_calls_is_all_content(content):
    assert hermes_tool_calls(content) == (content, [])


def test_hermes_edge_cases():
    call = FunctionCall("add", {"a": 1})
    unterminated = 'Sure. <tool_call>\n{"name": "add", "arguments": {"a": 1}}'
    assert hermes_tool_calls(unterminated) == ("Sure.", [call])  # cut off before the end tag
    for broken in ('<tool_call>{"name": "add", "arguments": {"a": 1}</tool_call>',  # bad JSON
                   '<tool_call>{"arguments": {}}</tool_call>',  # no name
                   '<tool_call>{"name": "add", "arguments": [1]}</tool_call>',  # not an object
                   '<tool_call>{"name": "add"}</tool_call><tool_call>[]</tool_call>'):
        assert hermes_tool_calls(broken) == (broken, [])  # not a call: the text as written
    assert hermes_tool_calls('<tool_call>{"name": "f"}</tool_call>') == ("", [FunctionCall("f",
                                                                                           {})])


def test_reasoning_parsers():
    assert qwen3_reasoning("<think>a</think>\n\nb") == ("a", "b")
    assert qwen3_reasoning("no thinking") == (None, "no thinking")
    assert qwen3_reasoning("<think>cut off") == (None, "<think>cut off")
    assert deepseek_r1_reasoning("a</think>b") == ("a", "b")  # <think> was in the prompt
    assert deepseek_r1_reasoning("<think>a</think>\nb") == ("a", "b")
    assert deepseek_r1_reasoning("still thinking") == ("still thinking", "")


def test_reply_round_trip_and_matching():
    parser = ReplyParser(hermes_tool_calls, qwen3_reasoning, auto_tool_choice=True)
    text = "<think>add them</think>\nLet me add." + hermes_text(
        "", [FunctionCall("add", {"a": 2, "b": 3}), FunctionCall("add", {"a": 5, "b": 1})])
    reply = parser.parse(text, call_tools=True)
    assert reply.reasoning == "add them" and reply.content == "Let me add."
    message = reply.to_openai(with_reasoning=True)
    assert [call_of(c) for c in message["tool_calls"]] == list(reply.tool_calls)
    assert len({c["id"] for c in message["tool_calls"]}) == 2
    assert reply.matches(message)
    assert reply.matches({**message, "reasoning_content": None})  # clients drop it
    assert not reply.matches({**message, "tool_calls": message["tool_calls"][:1]})
    assert not reply.matches({**message, "content": "Let me add!"})
    first_only = parser.parse(text, call_tools=True, parallel=False)
    assert first_only.tool_calls == reply.tool_calls[:1]
    untouched = parser.parse(text, call_tools=False)
    assert untouched.tool_calls == () and untouched.content == text.split("</think>\n")[1]
    assert ReplyParser().parse(text, call_tools=True) == AssistantReply(content=text)


# ---- the endpoint, end to end ---------------------------------------------------------


@pytest.fixture(scope="module")
def engine(tmp_path_factory) -> HFEngine:
    """A tiny model taught three greedy replies: a tool call, the answer after the tool's
    result, and a reply that reasons first."""
    from transformers import AutoTokenizer

    torch.set_num_threads(1)
    model_dir = build_tiny_model(tmp_path_factory.mktemp("tiny_tools"), seed=0)
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))

    def ids(text: str) -> list[int]:
        return tokenizer.encode(text, add_special_tokens=False)

    def prompt(messages, tools=None) -> list[int]:
        return ids(tokenizer.apply_chat_template(messages, tools=tools, tokenize=False,
                                                 add_generation_prompt=True))

    call_prompt, call_reply = prompt(QUESTION, TOOLS), ids(CALL_TEXT + EOS)
    # what the endpoint sends next: the sampled ids, then the tool's turn (see history)
    answer_prompt = call_prompt + call_reply + ids(
        "\n<|im_start|>tool\n5<|im_end|>\n<|im_start|>assistant\n")
    agent_prompt = prompt(QUESTION, [CALCULATE])  # tool_agent_workflow's first turn
    agent_call = ids(AGENT_CALL_TEXT + EOS)
    agent_answer_prompt = agent_prompt + agent_call + ids(
        "\n<|im_start|>tool\n5<|im_end|>\n<|im_start|>assistant\n")
    teach_replies(model_dir, [(call_prompt, call_reply),
                              (answer_prompt, ids(ANSWER_TEXT + EOS)),
                              (prompt(THINKING), ids(THINK_TEXT + EOS)),
                              (agent_prompt, agent_call),
                              (agent_answer_prompt, ids("5" + EOS))])
    return HFEngine(str(model_dir), dtype="float32", max_model_len=512,
                    max_response_tokens=64)


@pytest.fixture(scope="module")
def served(engine):
    root = ModelWrapper(engine, SamplingArgs(max_tokens=64, temperature=0.0), name="tiny")
    root.serve_openai_api(reply_parser=ReplyParser(hermes_tool_calls, qwen3_reasoning,
                                                   auto_tool_choice=True))
    yield root
    root.close()


def test_tool_call_comes_back_as_tool_calls(served, engine):
    client = served.get_openai_client()
    response = client.chat.completions.create(model="tiny", messages=QUESTION, tools=TOOLS,
                                              extra_body={"return_token_ids": True})
    choice = response.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    assert choice.message.model_extra["reasoning_content"] is None
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name == "add" and json.loads(call.function.arguments) == {"a": 2, "b": 3}
    prompt = response.model_extra["prompt_token_ids"]
    assert prompt == engine.apply_chat_template(QUESTION, tools=TOOLS)
    assert '{"name": "add", "description": "Add two numbers."' in served.decode(prompt)
    assert served.decode(choice.model_extra["token_ids"]) == CALL_TEXT


def test_tool_result_continues_the_sampled_ids_and_merges(served):
    view = served.for_workflow(enable_history=True)
    client = view.get_openai_client()
    first = client.chat.completions.create(model="tiny", messages=QUESTION, tools=TOOLS,
                                           extra_body={"return_token_ids": True})
    message = first.choices[0].message
    conversation = QUESTION + [message, {"role": "tool", "content": "5",
                                         "tool_call_id": message.tool_calls[0].id}]
    second = client.chat.completions.create(model="tiny", messages=conversation, tools=TOOLS,
                                            extra_body={"return_token_ids": True})
    assert second.choices[0].message.content == ANSWER_TEXT
    assert second.choices[0].finish_reason == "stop" and not second.choices[0].message.tool_calls
    sampled = first.model_extra["prompt_token_ids"] + first.choices[0].model_extra["token_ids"]
    assert second.model_extra["prompt_token_ids"][:len(sampled)] == sampled
    (episode,) = view.extract_experience_from_history(merge_turns=True)
    assert episode.metrics["multi_turn/turns"] == 2.0
    assert episode.prompt_length == len(first.model_extra["prompt_token_ids"])
    mask = episode.action_mask
    assert served.decode(episode.response_tokens[mask], skip_special_tokens=False) == \
        CALL_TEXT + EOS + ANSWER_TEXT + EOS
    assert served.decode(episode.response_tokens[~mask], skip_special_tokens=False) == \
        "\n<|im_start|>tool\n5<|im_end|>\n<|im_start|>assistant\n"


def test_streamed_reply_has_the_same_parts(served):
    client = served.get_openai_client()
    whole = client.chat.completions.create(model="tiny", messages=QUESTION, tools=TOOLS)
    chunks = list(client.chat.completions.create(
        model="tiny", messages=QUESTION, tools=TOOLS, stream=True, logprobs=True,
        stream_options={"include_usage": True}))
    assert all(c.object == "chat.completion.chunk" and c.id == chunks[0].id for c in chunks)
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert deltas[0].role == "assistant"
    assert "".join(d.content or "" for d in deltas) == ""
    calls = [call for d in deltas for call in d.tool_calls or []]
    assert [(c.index, c.function.name, json.loads(c.function.arguments)) for c in calls] == \
        [(0, "add", {"a": 2, "b": 3})]
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"
    logprobs = [t for c in chunks if c.choices and c.choices[0].logprobs
                for t in c.choices[0].logprobs.content]
    assert "".join(t.token for t in logprobs) == CALL_TEXT + EOS
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens == whole.usage.total_tokens


def test_tool_choice_none_leaves_the_text(served):
    client = served.get_openai_client()
    response = client.chat.completions.create(model="tiny", messages=QUESTION, tools=TOOLS,
                                              tool_choice="none")
    assert response.choices[0].message.content == CALL_TEXT
    assert not response.choices[0].message.tool_calls
    assert response.choices[0].finish_reason == "stop"
    with pytest.raises(openai.BadRequestError, match="tool_choice 'required' is not supported"):
        client.chat.completions.create(model="tiny", messages=QUESTION, tools=TOOLS,
                                       tool_choice="required")


def test_reasoning_comes_back_as_reasoning_content(served):
    client = served.get_openai_client()
    response = client.chat.completions.create(model="tiny", messages=THINKING)
    message = response.choices[0].message
    assert message.model_extra["reasoning_content"] == "2 plus 3 makes 5"
    assert message.content == "5"


def test_continuation_keeps_a_call_as_it_was_sampled(engine):
    """A call written unlike the chat template writes it (compact JSON, other key order):
    the next prompt holds the sampled ids, not the template's rendering of the call."""
    text = '<tool_call>{"name":"add","arguments":{"b":3,"a":2}}</tool_call>'
    prompt = engine.apply_chat_template(QUESTION, tools=TOOLS)
    eos = engine.tokenizer.convert_tokens_to_ids(EOS)
    reply_ids = engine.tokenizer.encode(text, add_special_tokens=False) + [eos]
    reply = ReplyParser(hermes_tool_calls, auto_tool_choice=True).parse(text, call_tools=True)
    history = History()
    history.remember(QUESTION, [Completion(prompt, reply_ids, None, text, "stop")],
                     tools=TOOLS, replies=[reply])
    message = reply.to_openai(with_reasoning=False)
    result = {"role": "tool", "content": "5", "tool_call_id": message["tool_calls"][0]["id"]}
    follow = QUESTION + [message, result]
    ids = history.continuation_ids(engine, follow, TOOLS)
    assert ids is not None and ids[:len(prompt) + len(reply_ids)] == prompt + reply_ids
    assert engine.tokenizer.decode(ids[len(prompt) + len(reply_ids):]) == \
        "\n<|im_start|>tool\n5<|im_end|>\n<|im_start|>assistant\n"
    canonical = engine.apply_chat_template(follow, tools=TOOLS)
    assert canonical != ids and len(canonical) > len(ids)  # the template re-spaces the JSON
    assert history.continuation_ids(engine, follow, None) is None  # other tools offered
    other = json.loads(json.dumps(message))
    other["tool_calls"][0]["function"]["arguments"] = '{"a": 2, "b": 4}'
    assert history.continuation_ids(engine, QUESTION + [other, result], TOOLS) is None


# ---- tool_agent_workflow --------------------------------------------------------------


def exact(response: str, truth: str) -> dict[str, float]:
    return {"accuracy": float(response.strip() == truth)}


def tool_task(max_turns: int, repeat_times: int = 1) -> Task:
    return Task(raw={}, index=0, taskset="t", prompt="What is 2 + 3?", truth="5",
                repeat_times=repeat_times, sampling={"max_tokens": 64, "temperature": 0.0},
                workflow_args=ToolAgentArgs(max_turns=max_turns), reward_fn=exact)


def test_tool_agent_episode_runs_the_call_and_masks_the_result(served):
    workflow = ToolAgentWorkflow(tool_task(max_turns=3, repeat_times=2),
                                 served.for_workflow(enable_history=True))
    episodes = workflow.run()
    assert len(episodes) == 2
    for episode in episodes:
        assert episode.reward == 1.0 and episode.metrics["reward/accuracy"] == 1.0
        assert episode.metrics["multi_turn/turns"] == 2.0
        assert episode.metrics["agent/tool_calls"] == 1.0
        assert episode.metrics["agent/tool_errors"] == 0.0
        mask = episode.action_mask
        assert served.decode(episode.response_tokens[mask], skip_special_tokens=False) == \
            AGENT_CALL_TEXT + EOS + "5" + EOS
        assert served.decode(episode.response_tokens[~mask], skip_special_tokens=False) == \
            "\n<|im_start|>tool\n5<|im_end|>\n<|im_start|>assistant\n"
    (cut,) = ToolAgentWorkflow(tool_task(max_turns=1),
                               served.for_workflow(enable_history=True)).run()
    assert cut.reward == 0.0 and cut.metrics["agent/tool_calls"] == 0.0  # no turn left to answer
    assert bool(cut.action_mask.all())


def test_calculate_and_failing_tool_calls():
    from types import SimpleNamespace

    assert calculate("(3 + 4) * 2") == "14" and calculate("7 / 2") == "3.5"
    assert calculate("-2 ** 3") == "-8" and calculate("6 / 3") == "2"
    for bad, reason in [("2 ** 100", "exponent 100 is over 64"), ("1 / 0", "division by zero"),
                        ("__import__('os')", "not arithmetic"), ("2 +", "invalid syntax")]:
        with pytest.raises(ValueError, match=reason):
            calculate(bad)

    def call(name: str, arguments: str) -> SimpleNamespace:
        return SimpleNamespace(function=SimpleNamespace(name=name, arguments=arguments))

    assert run_tool_call(call("calculate", '{"expression": "2 + 3"}')) == ("5", False)
    assert run_tool_call(call("search", "{}")) == \
        ("error: no tool named 'search' (tools: calculate)", True)
    assert run_tool_call(call("calculate", '{"expr": "1"}'))[1]
    assert run_tool_call(call("calculate", "{oops"))[1]
    assert run_tool_call(call("calculate", '{"expression": "1 / 0"}')) == \
        ("error: division by zero", True)


@pytest.mark.slow
def test_tool_agent_trains_two_steps_with_the_configured_parser(engine, tmp_path):
    """A ``colocate`` run: the explorer serves the endpoint with the config's ``hermes``
    parser; greedy rollouts of the taught model call the tool, then answer."""
    from rft.config import load_config
    from rft.launcher import run
    from test_embedded_run import write_config

    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"question": "What is 2 + 3?", "answer": "5"}) + "\n")
    buffer = tmp_path / "experiences.jsonl"
    loaded = load_config(write_config(
        tmp_path, engine.model_path, tasks,
        model__max_prompt_tokens=400, model__max_response_tokens=64, buffer__batch_size=1,
        buffer__explorer_input__taskset__default_workflow_type="tool_agent_workflow",
        buffer__explorer_input__taskset__workflow_args={"max_turns": 3},
        buffer__explorer_input__taskset__rollout_args={"temperature": 0.0},
        buffer__trainer_input__experience_buffer={"name": "exp", "storage_type": "file",
                                                  "path": str(buffer)},
        explorer__rollout_model={"engine_type": "hf", "dtype": "float32",
                                 "enable_openai_api": True, "enable_history": True,
                                 "enable_auto_tool_choice": True,
                                 "tool_call_parser": "hermes"}))
    assert run(loaded) == 0
    job = tmp_path / "ck" / "e2e" / "run"
    trainer = [json.loads(x) for x in (job / "monitor" / "trainer.jsonl").read_text().splitlines()]
    assert [r["step"] for r in trainer] == [1, 2]
    experiences = [json.loads(line) for line in buffer.read_text().splitlines()]
    assert len(experiences) == 4  # 2 steps × 1 task × repeat_times 2
    first_step = [e for e in experiences if e["model_version"] == 0]
    assert len(first_step) == 2
    for exp in first_step:
        assert exp["metrics"]["agent/tool_calls"] == 1.0 and exp["reward"] == 1.0
        response = torch.tensor(exp["tokens"][exp["prompt_length"]:])
        mask = torch.tensor(exp["action_mask"], dtype=torch.bool)
        assert engine.tokenizer.decode(response[~mask]) == \
            "\n<|im_start|>tool\n5<|im_end|>\n<|im_start|>assistant\n"
