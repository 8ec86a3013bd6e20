"""Converted configs validate and run.

- Every script of ``data/shell_forms`` and ``data/verl_scripts`` converts, and every
  conversion validates (``load_config``) with only ``model.model_path`` pointed at the
  tiny model, once its dataset files exist (LoRA included).
- ``verl_workflow`` (the workflow converted configs name) scores a veRL dataset row as
  veRL's default reward manager does.
- A converted GRPO script (GSM8K, veRL's dataset layout) runs two steps on the tiny model
  on CPU with ``rft run``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from rft.cli import main as rft_main
from rft.errors import ConfigError, RftError
from rft.workflow import Task
from rft_plugin_convert_verl import convert_text
from rft_plugin_convert_verl.workflow import (
    VerlWorkflow,
    VerlWorkflowArgs,
    ground_truth,
)

DATA = Path(__file__).parent / "data"
SCRIPTS = sorted([*(DATA / "shell_forms").glob("*.sh"), *(DATA / "verl_scripts").glob("*.sh")])
REFUSED: dict[str, str] = {}
"""Scripts whose conversion rft refuses on purpose, and the key it names (none since
rft trains LoRA adapters)."""


def test_every_script_converts_and_validates(validate_converted: Callable[..., Any]) -> None:
    converted, validated, refused = [], [], {}
    for script in SCRIPTS:
        result = convert_text(script.read_text(), script.name, str(script))
        converted.append(script.name)
        try:
            validate_converted(result.yaml)
        except ConfigError as error:
            refused[script.name] = sorted({p.split(":")[0] for p in error.problems})
        else:
            validated.append(script.name)
    assert len(converted) == len(SCRIPTS) == 20
    assert refused == {name: [key] for name, key in REFUSED.items()}
    assert len(validated) == 20


# ---------------------------------------------------------------------------------------
# verl_workflow
# ---------------------------------------------------------------------------------------


def _row(data_source: str = "openai/gsm8k", truth: str = "5") -> dict[str, Any]:
    return {"data_source": data_source,
            "prompt": [{"role": "user", "content": "What is 2+3?"}],
            "reward_model": {"style": "rule", "ground_truth": truth},
            "extra_info": {"index": 0}}


def _workflow(row: dict[str, Any], reward_fn: Any = None, args: Any = None) -> VerlWorkflow:
    task = Task(raw=row, index=0, taskset="t", messages=row["prompt"],
                truth=row["reward_model"], reward_fn=reward_fn, workflow_args=args)
    return VerlWorkflow(task, model=None)  # type: ignore[arg-type]


def _score(workflow: VerlWorkflow, response: str) -> tuple[float, dict[str, float]]:
    experience = SimpleNamespace(reward=None, metrics={})
    reward = workflow.score(experience, response)  # type: ignore[arg-type]
    assert reward == experience.reward
    return reward, experience.metrics


def test_ground_truth_of_a_verl_row() -> None:
    assert ground_truth(_row(truth="72"), None) == "72"
    assert ground_truth({}, {"ground_truth": "3", "style": "rule"}) == "3"
    assert ground_truth({}, "plain") == "plain"


def test_the_tasksets_reward_function_gets_the_ground_truth() -> None:
    from rft_plugin_rewards import gsm8k_reward

    workflow = _workflow(_row(truth="5"), reward_fn=gsm8k_reward)
    assert _score(workflow, "2 + 3 = 5\n#### 5") == (1.0, {"reward/accuracy": 1.0})
    assert _score(workflow, "#### 6")[0] == 0.0


def test_a_reward_declaring_extra_inputs_gets_the_response_tokens() -> None:
    seen = {}

    def reward(response: str, truth: Any, args: Any = None,
               response_tokens: Any = None) -> dict[str, float]:
        seen["tokens"] = response_tokens
        return {"ok": float(truth == "5")}

    reward.extra_inputs = ("response_tokens",)  # type: ignore[attr-defined]
    experience = SimpleNamespace(reward=None, metrics={}, response_tokens=[1, 2, 3])
    assert _workflow(_row(), reward_fn=reward).score(experience, "x") == 1.0  # type: ignore[arg-type]
    assert seen == {"tokens": [1, 2, 3]}


def test_custom_reward_function_is_called_as_veRL_calls_it(tmp_path: Path) -> None:
    path = tmp_path / "my_reward.py"
    path.write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None, "
        "bonus=0.0):\n"
        "    right = solution_str.strip().endswith(ground_truth)\n"
        "    return {'score': float(right) + bonus, 'acc': float(right), 'pred': 'x',\n"
        "            'index': extra_info['index'], 'source': len(data_source)}\n")
    args = VerlWorkflowArgs(custom_reward_path=str(path), reward_kwargs={"bonus": 0.5})
    reward, metrics = _score(_workflow(_row(truth="5"), args=args), "it is 5")
    assert reward == 1.5
    assert metrics == {"reward/score": 1.5, "reward/acc": 1.0, "reward/index": 0.0,
                       "reward/source": 12.0}
    missing = VerlWorkflowArgs(custom_reward_path=str(tmp_path / "nope.py"))
    with pytest.raises(RftError, match="custom_reward_path: .*nope.py' does not exist"):
        _score(_workflow(_row(), args=missing), "5")
    wrong_name = VerlWorkflowArgs(custom_reward_path=str(path), custom_reward_name="other")
    with pytest.raises(RftError, match="has no function 'other'"):
        _score(_workflow(_row(), args=wrong_name), "5")


def test_rows_without_data_source_need_one() -> None:
    row = _row()
    del row["data_source"]
    with pytest.raises(RftError, match="row 0 has no data_source column"):
        _score(_workflow(row), "5")


@pytest.mark.slow
def test_other_data_sources_are_scored_by_veRLs_default_compute_score() -> None:
    pytest.importorskip("verl")
    row = _row("lighteval/MATH", truth="\\frac{1}{2}")
    assert _score(_workflow(row), "so the answer is \\boxed{\\frac{1}{2}}")[0] == 1.0
    assert _score(_workflow(row), "\\boxed{3}")[0] == 0.0
    with pytest.raises(RftError, match="veRL has no reward function for it"):
        _score(_workflow(_row("my_dataset")), "5")


# ---------------------------------------------------------------------------------------
# a converted GRPO script runs
# ---------------------------------------------------------------------------------------


def _write_gsm8k_like(folder: Path) -> None:
    """veRL's GSM8K layout (examples/data_preprocess/gsm8k.py): chat messages in
    ``prompt``, the answer in ``reward_model.ground_truth``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True)
    for split, count in (("train", 8), ("test", 2)):
        rows = [{"data_source": "openai/gsm8k",
                 "prompt": [{"role": "user", "content": f"What is {i}+3? Let's think step by "
                             "step and output the final answer after \"####\"."}],
                 "ability": "math",
                 "reward_model": {"style": "rule", "ground_truth": str(i + 3)},
                 "extra_info": {"split": split, "index": i}} for i in range(count)]
        pq.write_table(pa.Table.from_pylist(rows), folder / f"{split}.parquet")


@pytest.mark.slow
def test_a_converted_grpo_script_runs_two_steps_on_cpu(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rft_tiny_model: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    home = tmp_path / "home"
    _write_gsm8k_like(home / "data" / "gsm8k")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    script = DATA / "shell_forms" / "grpo_gsm8k_1gpu.sh"
    config = tmp_path / "grpo.yaml"
    assert rft_main(["convert-verl", str(script), "-o", str(config), "-q"]) == 0
    text = config.read_text()
    assert "mode: colocate" in text and "default_workflow_type: verl_workflow" in text
    # only the model, the engine (no vLLM on CPU), the device and the output change
    code = rft_main(["run", str(config), f"model.model_path={rft_tiny_model}",
                     "explorer.rollout_model.engine_type=hf",
                     "explorer.rollout_model.dtype=float32", "cluster.gpu_per_node=0",
                     f"checkpoint_root_dir={tmp_path / 'ckpt'}", "monitor.monitor_type=jsonl"])
    assert code == 0, capsys.readouterr().err[-2000:]
    job = tmp_path / "ckpt" / "verl_grpo_gsm8k" / "tiny"
    records = {name: [json.loads(line) for line in
                      (job / "monitor" / f"{name}.jsonl").read_text().splitlines()]
               for name in ("explorer", "trainer")}
    assert [r["step"] for r in records["trainer"]] == [1, 2]
    explorer = [r for r in records["explorer"] if r["step"] >= 1 and
                "rollout/failed_tasks" in r["metrics"]]
    assert [r["step"] for r in explorer] == [1, 2]
    for record in explorer:
        metrics = record["metrics"]
        assert metrics["rollout/failed_tasks"] == 0
        assert metrics["rollout/experiences"] == 4  # 2 prompts × rollout.n 2
        assert "rollout/accuracy" in metrics  # gsm8k_reward's part, from the ground truth
