"""docs/metrics.md can't drift: every name its table says a side always logs is logged by
a real embedded run (GRPO, one eval taskset), and every name that run logs is in the table
under the same side."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from rft.config import load_config
from rft.launcher import run
from test_embedded_run import write_config

DOC = Path(__file__).resolve().parents[1] / "docs" / "metrics.md"


def table_rows() -> list[tuple[str, str]]:
    """(rft name, logged by) of each row of the table; rows with no rft name are left out."""
    rows = []
    for line in DOC.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("| `") or len(cells) != 4:
            continue
        name = cells[0].strip("`")
        rows.append((name, cells[2]))
    return rows


def pattern(name: str) -> re.Pattern[str]:
    """``eval/<taskset>/pass@<k>`` matches ``eval/held/pass@2``; ``<metric>`` (a metric's
    own name) may hold slashes: ``rollout/<metric>/mean`` matches
    ``rollout/reward/accuracy/mean``."""
    parts = re.split(r"(<[a-z]+>)", name)
    return re.compile("".join((".+" if p == "<metric>" else "[^/]+") if p.startswith("<")
                              else re.escape(p) for p in parts) + "$")


def test_table_parses():
    rows = table_rows()
    assert len(rows) > 40
    sides = {by.split(" ")[0] for _, by in rows}
    assert sides == {"trainer", "explorer"}


@pytest.fixture(scope="module")
def logged(tmp_path_factory, tiny_model_dir) -> dict[str, set[str]]:
    tmp = tmp_path_factory.mktemp("metric_names")
    tasks = tmp / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"question": f"{i}+1=", "answer": str(i + 1)}) + "\n"
                             for i in range(4)))
    eval_set = {"name": "held", "path": str(tasks), "repeat_times": 2,
                "format": {"prompt_key": "question", "response_key": "answer"},
                "default_workflow_type": "simple_workflow",
                "default_reward_fn_type": "accuracy_reward"}
    config = write_config(tmp, tiny_model_dir, tasks, trainer__save_interval=0,
                          buffer__total_steps=1, explorer__eval_interval=1,
                          buffer__explorer_input__eval_tasksets=[eval_set])
    assert run(load_config(config)) == 0
    monitor = tmp / "ck" / "e2e" / "run" / "monitor"
    names: dict[str, set[str]] = {}
    for side in ("explorer", "trainer"):
        names[side] = set()
        for line in (monitor / f"{side}.jsonl").read_text().splitlines():
            names[side] |= set(json.loads(line)["metrics"])
    return names


@pytest.mark.parametrize("side", ["trainer", "explorer"])
def test_every_always_logged_name_is_logged(logged, side):
    always = [name for name, by in table_rows() if by == side]
    assert always
    missing = [n for n in always if not any(pattern(n).match(x) for x in logged[side])]
    assert not missing, f"docs/metrics.md says the {side} logs these, the run did not: {missing}"


@pytest.mark.parametrize("side", ["trainer", "explorer"])
def test_every_logged_name_is_in_the_table(logged, side):
    documented = [pattern(name) for name, by in table_rows() if by.split(" ")[0] == side]
    undocumented = sorted(x for x in logged[side] if not any(p.match(x) for p in documented))
    assert not undocumented, f"{side} logs names missing from docs/metrics.md: {undocumented}"
