"""The rollouts page: a real run's record shown per step and task — the whole
conversation with tool calls and tool results marked, reward, advantage, tokens coloured
by log-prob — with task and reward filters; in a real browser, the tool-call episode."""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from recorded_runs import RecordedRuns
from starlette.applications import Starlette
from starlette.testclient import TestClient

from rft_plugin_studio.app import build_app
from rft_plugin_studio.page import StudioContext
from rft_plugin_studio.rollouts_view import (Filters, message_parts, response_tokens,
                                             split_messages, token_colour,
                                             transcript_messages)
from rft_plugin_studio.run_files import find_run, read_record
from rft_plugin_studio.testing import screenshot


def _tool_row(recorded_runs: RecordedRuns) -> dict[str, Any]:
    stage = find_run(recorded_runs.root, "tools/toolcall").stages[0]
    return read_record(stage, 1)[0]


def test_the_tool_call_episode_splits_into_marked_turns(recorded_runs: RecordedRuns) -> None:
    messages = split_messages(_tool_row(recorded_runs)["prompt"])
    assert [m.role for m in messages] == ["system", "user", "assistant", "tool", "user"]
    system, _, call, result, _ = messages
    assert [p.kind for p in system.parts] == ["text"]  # the format shown to the model
    assert [(p.kind, json.loads(p.text)) for p in call.parts] == [
        ("tool_call", {"name": "weather", "arguments": {"city": "Paris"}})]
    assert [(p.kind, p.text) for p in result.parts] == [("tool_result", "sunny, 21 C")]


def test_replies_transcripts_and_colours() -> None:
    reply = message_parts("assistant", '<think>x</think><tool_call>[{"name": "f", '
                                       '"arguments": {}}]</tool_call>')
    assert [p.kind for p in reply] == ["text", "tool_call"]
    assert [p.kind for p in message_parts("user", "<tool_response>4</tool_response>")] == \
        ["tool_result"]
    transcript = transcript_messages([
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "calculate", "arguments": '{"expression": "2+2"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "4"}])
    assert [(m.role, [p.kind for p in m.parts]) for m in transcript] == [
        ("user", ["text"]), ("assistant", ["tool_call"]), ("tool", ["tool_result"])]
    assert token_colour(0.0, "logprob", 0) == "hsl(120, 75%, 82%)"  # certain: green
    assert token_colour(-20.0, "logprob", 0) == "hsl(0, 75%, 82%)"  # unlikely: red
    assert token_colour(2.0, "entropy", 2.0) == "hsl(0, 75%, 82%)"
    assert token_colour(None, "logprob", 0) == "#e8e8e8"
    tokens = response_tokens({"tokens": ["a", "b"], "logprobs": [-0.1, -3.0],
                              "action_mask": [1, 0]})
    assert [(t.model, t.title) for t in tokens] == [
        (True, "logprob -0.100 (p 0.905)"),
        (False, "logprob -3.000 (p 0.050) (not generated: workflow's text)")]


def test_filters_by_task_and_reward(recorded_runs: RecordedRuns) -> None:
    rows = read_record(find_run(recorded_runs.root, "quickstart_like/vowels").stages[0], 2)
    rewards = sorted(r["reward"] for r in rows)
    middle = rewards[len(rewards) // 2]
    kept = [r for r in rows if Filters(min_reward=middle).keeps(r)]
    assert kept and all(r["reward"] >= middle for r in kept) and len(kept) < len(rows)
    task = f"train[{rows[0]['task']}]"
    assert {r["task"] for r in rows if Filters(task=task).keeps(r)} == {rows[0]["task"]}


def test_the_rollouts_route(recorded_runs: RecordedRuns) -> None:
    client = TestClient(build_app(StudioContext(recorded_runs.root)))
    rows = read_record(find_run(recorded_runs.root, "quickstart_like/vowels").stages[0], 4)
    task = rows[0]["task"]
    page = client.get(f"/rollouts?run=quickstart_like/vowels&step=4&task=train[{task}]")
    assert page.status_code == 200
    assert page.text.count('class="sample"') == sum(r["task"] == task for r in rows) == 4
    assert "16 samples of step 4" in page.text and "(trainer)" in page.text
    top = max(r["reward"] for r in rows)
    best = client.get(f"/rollouts?run=quickstart_like/vowels&step=4&min_reward={top}")
    assert best.text.count('class="sample"') == sum(r["reward"] >= top for r in rows)
    assert client.get("/rollouts?run=quickstart_like/vowels&step=3").text.startswith(
        "rft studio: ") and "step 3 is not in the rollout record (recorded: 2, 4, 6, 8, 10)" \
        in client.get("/rollouts?run=quickstart_like/vowels&step=3").text
    assert client.get("/rollouts?min_reward=high").text == \
        "rft studio: min_reward=high: not a number"


def test_the_rollouts_page_shows_the_tool_call_episode(
        recorded_runs: RecordedRuns, tmp_path: Path, studio_browser: Any,
        serve_studio: Callable[[Starlette], AbstractContextManager[str]]) -> None:
    row = _tool_row(recorded_runs)
    with serve_studio(build_app(StudioContext(recorded_runs.root))) as url:
        studio_browser.get(url + "/rollouts?run=tools/toolcall")
        sample = studio_browser.find_element("css selector", ".sample")
        call = sample.find_element("css selector", ".msg.role-assistant .part.tool_call")
        assert json.loads(call.text.removeprefix("tool call ").strip()) == \
            {"name": "weather", "arguments": {"city": "Paris"}}
        result = sample.find_element("css selector", ".msg.role-tool .part.tool_result")
        assert result.text.endswith("sunny, 21 C")
        # shown distinctly: each kind has its own colours
        assert call.value_of_css_property("background-color") != \
            result.value_of_css_property("background-color")
        tokens = sample.find_elements("css selector", ".reply .tok")
        assert len(tokens) == len(row["tokens"])
        assert tokens[0].get_attribute("title").startswith(
            f"logprob {row['logprobs'][0]:.3f}")
        screenshot(studio_browser, tmp_path / "rollouts.png")
