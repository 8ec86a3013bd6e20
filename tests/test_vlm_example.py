"""The VLM quickstart (``make vlm-example`` = ``rft run examples/vlm_quickstart.yaml``),
shortened: the tiny Qwen2-VL, the visual toy task (fewer rows), SFT then GRPO with
``simple_mm_workflow`` through the hf engine and the torch trainer, and the exports keep
the processor. The learning result of the full run is in the README."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fixtures_vlm import tiny_vision_dir  # noqa: F401  (session fixture)
from rft.config import load_config
from rft.launcher import run

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "examples" / "vlm_quickstart.yaml"
ACCURACY = "eval/heldout/accuracy"


def make_data(out: Path, sizes: dict[str, int]) -> Path:
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_vlm_data",
                                                  REPO / "examples" / "make_vlm_data.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.SETS = sizes
    module.main(out)
    return out


def test_the_toy_data_is_balanced_and_its_answer_is_the_largest_shape(tmp_path: Path) -> None:
    from PIL import Image

    data = make_data(tmp_path / "shapes", {"heldout": 8, "sft": 8, "rl": 8})
    colours = {"red": (230, 30, 30), "green": (30, 200, 30), "blue": (40, 60, 240),
               "yellow": (240, 220, 20)}
    images = set()
    for name in ("heldout", "sft", "rl"):
        rows = [json.loads(line) for line in (data / f"{name}.jsonl").read_text().splitlines()]
        assert sorted(r["answer"] for r in rows) == sorted(list(colours) * 2)
        for row in rows:
            image = Image.open(data / row["image"]).convert("RGB")
            counts = {c: sum(1 for p in image.getdata() if p == rgb) for c, rgb in colours.items()}
            assert max(counts, key=counts.__getitem__) == row["answer"]
            images.add(image.tobytes())
    assert len(images) == 24  # no image twice


@pytest.mark.slow
def test_vlm_quickstart_shortened_end_to_end(tiny_vision_dir, tmp_path: Path,
                                             monkeypatch) -> None:
    data = make_data(tmp_path / "shapes", {"heldout": 16, "sft": 64, "rl": 32})
    monkeypatch.chdir(REPO)
    overrides = [f"model.model_path={tiny_vision_dir}", f"checkpoint_root_dir={tmp_path}",
                 "stages.0.buffer.total_steps=4", "stages.1.buffer.total_steps=2",
                 "stages.1.buffer.batch_size=4", "stages.1.algorithm.repeat_times=4"]
    for stage, key in ((0, "trainer_input.experience_buffer"), (1, "explorer_input.taskset")):
        name = "sft" if stage == 0 else "rl"
        overrides.append(f"stages.{stage}.buffer.{key}.path={data}/{name}.jsonl")
    overrides.append(f"buffer.explorer_input.eval_tasksets.0.path={data}/heldout.jsonl")
    loaded = load_config(CONFIG, overrides)
    assert run(loaded) == 0

    job = tmp_path / "vlm_quickstart"
    (summary_path,) = job.glob("*/summary.json")
    summary = json.loads(summary_path.read_text(encoding="utf-8"))
    sft, grpo = summary["stages"]
    assert (sft["name"], grpo["name"]) == ("sft", "grpo")
    assert (sft["steps"], grpo["steps"]) == (4, 2)
    for stage in (sft, grpo):
        assert ACCURACY in stage["eval_before"] and ACCURACY in stage["eval_after"]
        final = Path(stage["final_model_path"])
        for name in ("config.json", "model.safetensors", "tokenizer.json",
                     "preprocessor_config.json", "processor_config.json",
                     "chat_template.jinja"):
            assert (final / name).is_file(), f"{final / name} is missing"
    assert grpo["eval_before"][ACCURACY] == sft["eval_after"][ACCURACY]
    rollouts = [json.loads(line) for line in
                (summary_path.parent / "grpo" / "monitor" / "explorer.jsonl")
                .read_text().splitlines()]
    assert any("rollout/accuracy" in r["metrics"] for r in rollouts)


def test_vlm_quickstart_validates_and_refuses_images_with_a_text_workflow(
        tiny_vision_dir, tmp_path: Path, monkeypatch) -> None:
    from rft.errors import ConfigError

    monkeypatch.chdir(REPO)
    data = make_data(tmp_path / "shapes", {"heldout": 4, "sft": 4, "rl": 4})
    paths = [f"buffer.explorer_input.eval_tasksets.0.path={data}/heldout.jsonl",
             f"model.model_path={tiny_vision_dir}"]
    loaded = load_config(CONFIG, paths)
    assert [(s.name, s.config.mode) for s in loaded.stages] == [("sft", "train"),
                                                               ("grpo", "colocate")]
    with pytest.raises(ConfigError) as caught:
        load_config(CONFIG, [*paths, "buffer.explorer_input.eval_tasksets.0."
                             "default_workflow_type=simple_workflow"])
    assert [p for p in caught.value.problems if "image_key" in p] == [
        "stages[0].buffer.explorer_input.eval_tasksets[0].format.image_key: workflow "
        "'simple_workflow' does not send images to the model (it would train on the text "
        "alone); use simple_mm_workflow (default_workflow_type)"]
