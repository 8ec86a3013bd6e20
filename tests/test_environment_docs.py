"""docs/agents.md's environment section can't drift: its example environment keeps the
contract (``check_environment``), and its taskset block validates over the tiny config."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from rft.config import load_config
from rft.testing.checks import check_environment
from rft.testing.runs import apply_overrides, tiny_run_config

DOC = Path(__file__).resolve().parents[1] / "docs" / "agents.md"


def section_blocks(language: str) -> list[str]:
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("## Environments: writing your own environment plugin"):]
    return re.findall(rf"```{language}\n(.*?)```", section, re.DOTALL)


def test_the_example_environment_keeps_the_contract():
    namespace: dict = {}
    exec(compile(section_blocks("python")[0], str(DOC), "exec"), namespace)
    guess, args = namespace["Guess"], namespace["GuessArgs"]
    played = check_environment(guess, [{"secret": 3}, {"secret": 7}], args(top=10),
                               actions=["1", "5", "3"])
    assert played[0][1][-1] == ("Right!", 1.0, True, False)


def test_the_taskset_block_validates(tiny_model_dir, tmp_path):
    taskset = yaml.safe_load(section_blocks("yaml")[0])["buffer"]["explorer_input"]["taskset"]
    rows = tmp_path / "lakes.jsonl"
    rows.write_text('{"seed": 3, "size": 4}\n{"seed": 4, "size": 3}\n')
    config = apply_overrides(tiny_run_config(tiny_model_dir, rows, tmp_path),
                             {"buffer.explorer_input.taskset": {**taskset, "path": str(rows)},
                              "model.max_prompt_tokens": 1024})
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    plan = load_config(path).stages[-1].plan
    (chosen,) = plan.tasksets
    assert chosen.environment.name == "frozen_lake" and chosen.environment.args.max_steps == 6
    assert chosen.action_parser.name == "last_code_block"
    assert chosen.workflow.args.invalid_action_reward == -0.1
