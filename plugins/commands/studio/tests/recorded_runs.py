"""Two short real runs shared by the studio's run, rollout, plot and record tests (built
once per session under one checkpoint root):

- ``quickstart_like/vowels``: colocate GRPO on the tiny model, 10 steps × 4 tasks × 4
  rollouts, the vowel-share reward (a dense reward the tiny model learns within a few
  steps, as the quickstart's curve rises over its 400), the rollout record every 2nd step;
- ``tools/toolcall``: one step of ``toolcall_workflow`` (Tool-N1 rows whose conversation
  holds a function call and its result), the rollout record every step.
"""

from __future__ import annotations

import contextlib
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from rft.testing.runs import apply_overrides, tiny_run_config, write_taskset
from rft.testing.tiny_model import build_tiny_model
from rft.testing.toy_rewards import VowelRewardPlugin

STEPS = 10
RECORD_EVERY = 2


TOOL_ROW = {
    "tools": [{"name": "weather", "description": "The weather of a city.",
               "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}],
    "raw_system": "You are helpful.",
    "conversations": [{"from": "human", "value": "Weather in Paris?"},
                      {"from": "function_call",
                       "value": {"name": "weather", "arguments": {"city": "Paris"}}},
                      {"from": "observation", "value": "sunny, 21 C"},
                      {"from": "human", "value": "And in Rome?"}],
    "answer": [{"name": "weather", "arguments": {"city": "Rome"}}],
    "question": "And in Rome?"}
"""A Tool-N1 row: the model has called ``weather`` once and read its result (``question``:
the taskset's prompt key; the workflow builds its prompt from ``conversations``)."""


@dataclass(frozen=True)
class RecordedRuns:
    """The session's runs."""

    root: Path
    """The checkpoint root holding both."""
    vowels: Path
    """``<root>/quickstart_like/vowels``."""
    tools: Path
    """``<root>/tools/toolcall``."""
    stdout: str
    """What ``rft run`` printed for the vowel run (its end-of-run summary)."""


def _run(config: dict[str, Any], folder: Path) -> None:
    from rft.config import load_config
    from rft.launcher import run
    from rft.plugins import PluginRegistry

    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    loaded = load_config(path, registry=PluginRegistry.create(extra_plugins=[VowelRewardPlugin()]))
    assert run(loaded) == 0


_BUILT: dict[int, RecordedRuns] = {}


def recorded_runs_of(factory: pytest.TempPathFactory) -> RecordedRuns:
    """Build (once per session) the two runs."""
    if id(factory) in _BUILT:
        return _BUILT[id(factory)]
    base = factory.mktemp("studio_runs")
    model = build_tiny_model(base / "model", seed=0)
    root = base / "checkpoints"
    vowels = apply_overrides(tiny_run_config(model, write_taskset(base / "tasks.jsonl", 16), base,
                                             STEPS), {
        "project": "quickstart_like", "name": "vowels", "checkpoint_root_dir": str(root),
        "model.temperature": 0.1, "algorithm.optimizer.lr": 1e-3,
        "algorithm.repeat_times": 4, "buffer.batch_size": 4,
        "buffer.explorer_input.taskset.default_reward_fn_type": "vowel_reward",
        "monitor.rollout_record": True, "monitor.rollout_record_every": RECORD_EVERY})
    (base / "vowels").mkdir()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        _run(vowels, base / "vowels")
    tools_file = base / "tools.jsonl"
    tools_file.write_text(json.dumps(TOOL_ROW) + "\n", encoding="utf-8")
    tools = apply_overrides(tiny_run_config(model, tools_file, base, 1), {
        "project": "tools", "name": "toolcall", "checkpoint_root_dir": str(root),
        "model.max_prompt_tokens": 2048, "buffer.batch_size": 1,
        "buffer.explorer_input.taskset.default_workflow_type": "toolcall_workflow",
        "monitor.rollout_record": True})
    (base / "tools").mkdir()
    _run(tools, base / "tools")
    built = RecordedRuns(root, root / "quickstart_like" / "vowels", root / "tools" / "toolcall",
                         out.getvalue())
    _BUILT.clear()
    _BUILT[id(factory)] = built
    return built


@pytest.fixture(scope="session")
def recorded_runs(tmp_path_factory: pytest.TempPathFactory) -> RecordedRuns:
    """The session's two real runs (module docstring)."""
    return recorded_runs_of(tmp_path_factory)
