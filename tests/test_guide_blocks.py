"""The configuration guide's own example blocks (issue #17), one by one.

``tests/data/reference_configs/guide_blocks/NN_<section>.yaml`` are the 17 YAML blocks of
Trinity-RFT's configuration guide (configuration-guide.md, Apache-2.0), in order, as
written except: the guide's ``...`` placeholder lines are dropped and the backticks
around `` `plaintext` `` removed (both are invalid YAML). Block 17 is the guide's veRL
file, so it is read as ``trainer.trainer_config``.

Each block is laid over a small CPU config (:func:`rft.testing.runs.tiny_run_config`:
tiny local model, a local JSONL taskset) with the guide's ``${oc.env:...}`` paths pointed
at local data through the environment; a key left empty by a placeholder means "fill in"
and keeps the small config's value. Every block then validates, except two that rft
refuses in one line naming the key (:data:`REFUSED`): the Data-Juicer operator, and the
algorithm block's ``advantage_fn: "ppo"`` (GAE needs a critic, which grpo does not train;
before, this failed at the first train step). The blocks that run on this CPU run
two steps (slow test).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from rft.config import load_config
from rft.errors import ConfigError
from rft.testing.runs import apply_overrides, tiny_run_config, write_taskset

BLOCKS_DIR = Path(__file__).parent / "data" / "reference_configs" / "guide_blocks"
BLOCKS = sorted(BLOCKS_DIR.glob("*.yaml"))

LAPTOP = {
    # 8 GPUs on one node give 8 trainer ranks: at least 8 rows per optimizer step; such
    # nodes are a cluster's (on this machine a run would refuse them: cluster.gpu_per_node)
    "06_cluster": {"buffer": {"batch_size": 4}, "cluster": {"ray_address": "10.0.0.1:6379"}},
}
"""Beyond local paths, what a block needs on this laptop-sized config, and why."""

REFUSED = {
    # grpo trains no critic; the block's advantage_fn "ppo" is GAE over critic values.
    "03_algorithm": ("algorithm.advantage_fn", "critic"),
    "14_data_processor": ("data_processor.experience_pipeline.operators[0].name", "data_juicer"),
}
"""Blocks rft refuses: the one problem expected (key, the name it must mention)."""

PLACEHOLDERS = ("01_skeleton", "07_buffer", "09_experience_buffer")
"""Blocks where a dropped ``...`` left keys empty (elsewhere a null is a written value)."""

RUNS = ("09_experience_buffer", "15_log", "16_stages", "17_trainer_config")
"""Blocks that run here (two steps each)."""


def without_placeholders(tree: Any) -> Any:
    """``tree`` without the keys whose value a dropped ``...`` left empty (null)."""
    if isinstance(tree, dict):
        return {k: without_placeholders(v) for k, v in tree.items() if v is not None}
    return tree


@pytest.fixture(scope="module")
def local_data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("guide")
    tasks = write_taskset(root / "tasks.jsonl")
    sft = root / "sft.jsonl"
    sft.write_text("".join(json.dumps({"question": f"{i}+1=", "answer": str(i + 1)}) + "\n"
                           for i in range(8)), encoding="utf-8")
    chats = root / "chats.jsonl"  # the default SFT format (format.messages_key 'message')
    chats.write_text("".join(json.dumps({"message": [
        {"role": "user", "content": f"{i}+1="}, {"role": "assistant", "content": str(i + 1)}]})
        + "\n" for i in range(8)), encoding="utf-8")
    return {"root": root, "tasks": tasks, "sft": sft, "chats": chats}


@pytest.fixture()
def guide_env(monkeypatch: pytest.MonkeyPatch, local_data: dict[str, Path],
              tiny_model_dir: Path, tmp_path: Path) -> Path:
    for name, value in (("MODEL_PATH", tiny_model_dir), ("TRINITY_TASKSET_PATH", local_data["tasks"]),
                        ("TRINITY_SFT_DATASET_PATH", local_data["sft"]),
                        ("TRINITY_DATASET_PATH", local_data["chats"]),
                        ("TRINITY_CHECKPOINT_ROOT_DIR", tmp_path / "checkpoints")):
        monkeypatch.setenv(name, str(value))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def block_config(path: Path, model: Path, tasks: Path, root: Path) -> Path:
    """The block laid over the small config, written to ``root/<block>.yaml``."""
    block = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if path.stem in PLACEHOLDERS:
        block = without_placeholders(block)
    if path.stem == "17_trainer_config":
        block = {"trainer": {"trainer_config": block}}
    config = tiny_run_config(model, tasks, root)
    del config["synchronizer"]  # the defaults must fit every mode (the stages block)
    config = apply_overrides(apply_overrides(config, block), LAPTOP.get(path.stem))
    out = root / f"{path.stem}.yaml"
    out.write_text(yaml.safe_dump(config), encoding="utf-8")
    return out


def test_the_guide_has_seventeen_blocks() -> None:
    assert [p.stem[:2] for p in BLOCKS] == [f"{i:02d}" for i in range(1, 18)]


@pytest.mark.parametrize("path", BLOCKS, ids=lambda p: p.stem)
def test_guide_block_validates(path: Path, guide_env: Path, tiny_model_dir: Path,
                               local_data: dict[str, Path]) -> None:
    config = block_config(path, tiny_model_dir, local_data["tasks"], guide_env)
    if path.stem in REFUSED:
        key, name = REFUSED[path.stem]
        with pytest.raises(ConfigError) as caught:
            load_config(config)
        assert len(caught.value.problems) == 1, caught.value.problems
        line = caught.value.problems[0]
        assert line.startswith(key) and name in line and "\n" not in line
        return
    load_config(config)


@pytest.mark.slow
def test_the_guide_blocks_that_run_here_train_two_steps(guide_env: Path, tiny_model_dir: Path,
                                                        local_data: dict[str, Path]) -> None:
    from rft.launcher import run
    from rft.testing.runs import read_metrics

    for stem in RUNS:
        root = guide_env / stem
        root.mkdir()
        config = load_config(block_config(BLOCKS_DIR / f"{stem}.yaml", tiny_model_dir,
                                          local_data["tasks"], root))
        run(config)
        jobs = sorted(monitor.parent for monitor in (root / "checkpoints").rglob("monitor"))
        assert jobs, f"{stem}: no job directory"
        for job in jobs:  # each stage of the stages block is its own job
            steps = read_metrics(job)
            assert len(steps) >= 2, f"{stem}: {job.name}: {len(steps)} steps logged"
