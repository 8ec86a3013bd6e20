"""Trinity-RFT's vision-language examples (``examples/grpo_vlm/vlm.yaml`` with its veRL file
``train_vlm.yaml``, ``examples/mix_vlm/mix_vlm.yaml``), in test copies under
``tests/data/trinity_vlm_examples`` written in their form with their values, validate here
on the tiny Qwen2-VL model and an offline image set drawn with Pillow (``geometry3k``'s
columns: ``problem``, ``answer``, ``images``; the SFT expert set's ``response``); the mix
example trains 2 steps, its SFT rows carrying their images (slow).

Paths come from ``${oc.env:...}`` (set by the fixture); ``cluster.gpu_per_node=0`` is this
CPU machine."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import rft_plugin_grpo
import rft_plugin_mix
import rft_plugin_mix_chord
import rft_plugin_rewards
import rft_plugin_selectors
import rft_plugin_verl
import rft_plugin_workflows

from fixtures_vlm import tiny_vision_dir  # noqa: F401  (session fixture)
from rft.buffer.errors import TasksetError
from rft.buffer.offline import dataset_experiences
from rft.config import load_config
from rft.plugins import PluginRegistry

EXAMPLES = Path(__file__).parent / "data" / "trinity_vlm_examples"
MACHINE = ("cluster.gpu_per_node=0",)
"""This machine has no GPU (the examples ask for 8)."""
TWO_STEPS = ("mode=colocate", "synchronizer.sync_method=memory",
             "explorer.rollout_model.engine_type=hf", "explorer.rollout_model.dtype=float32",
             "explorer.rollout_model.engine_num=1", "explorer.runner_per_model=1",
             "buffer.total_steps=2", "buffer.batch_size=2", "algorithm.repeat_times=2",
             "model.max_response_tokens=8", "model.max_model_len=256",
             "monitor.monitor_type=jsonl")
"""Two short steps in one process on this machine (the examples' sizes are for 8 GPUs)."""
COLOURS = {"red": (220, 30, 30), "blue": (30, 30, 220)}


@pytest.fixture(scope="module")
def registry() -> PluginRegistry:
    """The plugins the examples name (no entry-point scan)."""
    return PluginRegistry.create(autoload=False, extra_plugins=[
        rft_plugin_grpo, rft_plugin_mix, rft_plugin_mix_chord, rft_plugin_workflows,
        rft_plugin_rewards, rft_plugin_selectors, rft_plugin_verl])


def _image_rows(folder: Path, answer_key: str, answer: str, *, absolute: bool) -> None:
    """4 rows: a 16×16 red or blue square (a PNG beside the file; its path absolute or
    relative to the file's folder) and the question; ``answer`` formats the colour."""
    from PIL import Image

    folder.mkdir(parents=True)
    rows = []
    for i in range(4):
        colour = ("red", "blue")[i % 2]
        Image.new("RGB", (16, 16), COLOURS[colour]).save(folder / f"square{i}.png")
        image = folder / f"square{i}.png"
        rows.append({"problem": "Which colour is the square?",
                     "images": [str(image) if absolute else image.name],
                     answer_key: answer.format(colour)})
    (folder / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict[str, Path]:
    """The taskset (``subset_name: default``: a subfolder) and the SFT expert set."""
    root = tmp_path_factory.mktemp("trinity_vlm")
    _image_rows(root / "tasks" / "default", "answer", "{}", absolute=True)
    _image_rows(root / "sft", "response", "<think>\nThe square is {0}.\n</think>\n\\boxed{{{0}}}",
                absolute=False)
    return {"tasks": root / "tasks", "sft": root / "sft"}


@pytest.fixture
def environ(monkeypatch, tmp_path, tiny_vision_dir, data) -> None:  # noqa: F811
    monkeypatch.setenv("TRINITY_CHECKPOINT_ROOT_DIR", str(tmp_path / "checkpoints"))
    monkeypatch.setenv("TRINITY_MODEL_PATH", str(tiny_vision_dir))
    monkeypatch.setenv("TRINITY_TASKSET_PATH", str(data["tasks"]))
    monkeypatch.setenv("TRINITY_SFT_DATASET_PATH", str(data["sft"]))


def test_grpo_vlm_example_validates_with_its_verl_file(environ, registry) -> None:
    loaded = load_config(EXAMPLES / "vlm.yaml", MACHINE + (
        f"trainer.trainer_config_path={EXAMPLES / 'train_vlm.yaml'}",), registry=registry)
    config = loaded.stages[0].config
    taskset = config.buffer.explorer_input.taskset
    assert taskset.default_workflow_type == "simple_mm_workflow"
    assert taskset.format.image_key == "images"
    assert config.trainer.trainer_type == "verl"
    keys = {w.split(":")[0].split(" ")[0] for w in loaded.warnings}
    assert "trainer.trainer_config.actor_rollout_ref.hybrid_engine" in keys
    # the example names no reward function: simple_mm_workflow's default, said in one line
    assert taskset.default_reward_fn_type == "math_boxed_reward"
    assert "buffer.explorer_input.taskset.default_reward_fn_type" in keys


@pytest.mark.slow
def test_grpo_vlm_example_trains_two_steps(environ, registry) -> None:
    """The example as written on the torch trainer in one process (its veRL file's
    actor settings need GPUs); every task scored by the default reward."""
    from rft.launcher import run
    from rft.testing.runs import read_metrics

    loaded = load_config(EXAMPLES / "vlm.yaml", MACHINE + TWO_STEPS + (
        "trainer.trainer_type=torch", "trainer.trainer_config_path=null",
        "buffer.train_batch_size=4"), registry=registry)
    run(loaded)
    metrics = read_metrics(loaded.stages[-1].plan.job_dir)
    assert len(metrics) == 2
    for step in metrics:
        assert step["rollout/failed_tasks"] == 0.0
        assert all(math.isfinite(v) for v in step.values() if isinstance(v, float))


def test_mix_vlm_example_validates_as_written(environ, registry) -> None:
    loaded = load_config(EXAMPLES / "mix_vlm.yaml", MACHINE, registry=registry)
    config = loaded.stages[0].config
    assert config.algorithm.algorithm_type == "mix_chord"
    sft = config.buffer.trainer_input.auxiliary_buffers["sft_dataset"]
    assert sft.format.image_key == "images"
    assert config.buffer.explorer_input.taskset.workflow_args == {"with_think": True}


def test_sft_rows_carry_their_images(environ, registry, data, tiny_vision_dir) -> None:  # noqa: F811
    from transformers import AutoTokenizer

    config = load_config(EXAMPLES / "mix_vlm.yaml", MACHINE, registry=registry).stages[0].config
    sft = config.buffer.trainer_input.auxiliary_buffers["sft_dataset"]
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_vision_dir))
    experiences = dataset_experiences(sft, tokenizer, "sft", "sft_dataset")
    image_id = tokenizer.convert_tokens_to_ids("<|image_pad|>")
    assert len(experiences) == 4
    for e in experiences:
        vision = e.multi_modal_inputs
        assert vision is not None and vision.image_grid_thw.tolist() == [[1, 4, 4]]
        prompt = e.tokens[: e.prompt_length].tolist()
        assert prompt.count(image_id) == 4  # 16×16 px: 4×4 patches, merged 2×2
        assert image_id not in e.tokens[e.prompt_length:].tolist()
        assert "boxed" in tokenizer.decode(e.tokens[e.prompt_length:])
    (data["sft"] / "square1.png").write_bytes(b"not a png")
    try:
        with pytest.raises(TasksetError) as caught:
            dataset_experiences(sft, tokenizer, "sft", "sft_dataset")
    finally:
        _redraw(data["sft"] / "square1.png", "blue")
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("sft_dataset: row 2: 'images' (format.image_key): ")


def _redraw(path: Path, colour: str) -> None:
    from PIL import Image

    Image.new("RGB", (16, 16), COLOURS[colour]).save(path)


@pytest.mark.slow
def test_mix_vlm_example_trains_two_steps(environ, registry, tmp_path) -> None:
    from rft.launcher import run
    from rft.testing.runs import read_metrics

    loaded = load_config(EXAMPLES / "mix_vlm.yaml",
                         MACHINE + TWO_STEPS + ("buffer.train_batch_size=5",),
                         registry=registry)
    run(loaded)
    metrics = read_metrics(loaded.stages[-1].plan.job_dir)
    assert len(metrics) == 2
    for step in metrics:
        assert step["rollout/failed_tasks"] == 0.0
        assert step["sample/expert_count"] >= 1  # SFT image rows in every batch
        assert math.isfinite(step["expert/sft_loss"]) and step["expert/sft_loss"] > 0
        # workflow_args.with_think reached math_boxed_reward: no <think> → format penalty
        assert step["rollout/reward/format_score/mean"] == pytest.approx(-0.1)
        assert all(math.isfinite(v) for v in step.values() if isinstance(v, float))
