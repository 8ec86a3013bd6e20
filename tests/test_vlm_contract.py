"""The vision-language contract: the tiny Qwen2-VL model, its processor, and how vision
inputs travel on experiences and through micro-batches."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
import torch

from fixtures_vlm import solid_image, tiny_vision_dir  # noqa: F401  (session fixture)
from rft.experience import Experience, pad_batch
from rft.multimodal import MultiModalInputs, forward_inputs, join_inputs
from rft.multimodal.processor import load_processor, render_prompt
from rft.trainer.batching import TensorBatch


def _inputs(num_patches: list[int], dim: int = 4, start: float = 0.0) -> MultiModalInputs:
    grids = torch.tensor([[1, 1, n] for n in num_patches])  # (n, 3)
    total = sum(num_patches)
    values = torch.arange(total * dim, dtype=torch.float32).view(total, dim) + start
    return MultiModalInputs(pixel_values=values, image_grid_thw=grids)


def test_tiny_vision_model_loads_with_the_auto_classes(tiny_vision_dir: Path) -> None:
    from transformers import AutoConfig, AutoModelForImageTextToText

    config = AutoConfig.from_pretrained(str(tiny_vision_dir))
    assert config.model_type == "qwen2_vl" and config.vision_config.depth == 2
    model = AutoModelForImageTextToText.from_pretrained(str(tiny_vision_dir),
                                                        dtype=torch.float32)
    assert type(model).__name__ == "Qwen2VLForConditionalGeneration"
    assert sum(p.numel() for p in model.parameters()) < 1_000_000
    for name in ("preprocessor_config.json", "processor_config.json", "chat_template.jinja",
                 "tokenizer.json"):
        assert (tiny_vision_dir / name).is_file(), name


def test_processor_expands_each_image_into_its_merged_patches(tiny_vision_dir: Path) -> None:
    processor = load_processor(str(tiny_vision_dir))
    image_id = processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    ids, vision = render_prompt(processor, [{"role": "user", "content": "Colour?"}],
                                [solid_image((255, 0, 0), (40, 32)),
                                 solid_image((0, 0, 255), (16, 16))])
    assert vision is not None and vision.num_images == 2
    grids = vision.image_grid_thw.tolist()
    assert grids == [[1, 8, 10], [1, 4, 4]]  # 4-px patches: 32/4 × 40/4, 16/4 × 16/4
    assert ids.count(image_id) == (8 * 10 + 4 * 4) // 4  # merge 2×2
    assert vision.pixel_values.shape == (8 * 10 + 4 * 4, 3 * 2 * 4 * 4)  # (N, C·T·P·P)
    text = processor.tokenizer.decode(ids)
    assert text.startswith("<|im_start|>user\n<|vision_start|>") and "Colour?" in text


def test_multimodal_inputs_refuse_patches_that_do_not_match_the_grid() -> None:
    with pytest.raises(ValueError, match="5 image patches but the grid"):
        MultiModalInputs(pixel_values=torch.zeros(5, 4), image_grid_thw=torch.tensor([[1, 2, 2]]))
    with pytest.raises(ValueError, match="go together"):
        MultiModalInputs(pixel_values=torch.zeros(4, 4))


def test_join_keeps_row_order_and_skips_text_rows() -> None:
    a, b = _inputs([2, 3]), _inputs([4], start=100.0)
    joined = join_inputs([a, None, b])
    assert joined is not None
    assert joined.image_grid_thw.tolist() == [[1, 1, 2], [1, 1, 3], [1, 1, 4]]
    assert torch.equal(joined.pixel_values, torch.cat([a.pixel_values, b.pixel_values]))
    assert join_inputs([None, None]) is None


def test_micro_batches_keep_each_rows_vision_inputs() -> None:
    rows = [_inputs([1]), None, _inputs([2], start=50.0)]
    experiences = [Experience(tokens=torch.arange(4 + i), prompt_length=2,
                              multi_modal_inputs=m) for i, m in enumerate(rows)]
    batch = pad_batch(experiences, pad_token_id=0)
    assert batch.multi_modal_inputs == rows
    tensors = TensorBatch(batch.prompt_width, {"input_ids": batch.input_ids,
                                               "attention_mask": batch.attention_mask},
                          tuple(batch.multi_modal_inputs))
    picked = tensors.select([2, 0])
    assert picked.multi_modal == (rows[2], rows[0])
    joined = picked.vision_inputs()
    assert joined is not None and joined.image_grid_thw.tolist() == [[1, 1, 2], [1, 1, 1]]
    assert tensors.select([1]).vision_inputs() is None


def test_vision_inputs_survive_pickling_on_an_experience() -> None:
    experience = Experience(tokens=torch.arange(5), prompt_length=3,
                            multi_modal_inputs=_inputs([2, 1]))
    back = pickle.loads(pickle.dumps(experience))
    assert back.multi_modal_inputs is not None
    assert torch.equal(back.multi_modal_inputs.pixel_values,
                       experience.multi_modal_inputs.pixel_values)
    assert back.multi_modal_inputs.image_grid_thw.dtype == torch.long


def test_forward_inputs_mark_image_tokens_for_the_rope_index() -> None:
    class Config:
        image_token_id, video_token_id = 7, 8

    ids = torch.tensor([[1, 7, 7, 2, 8]])  # (1, 5)
    kwargs = forward_inputs(Config(), ids, _inputs([2]))
    assert kwargs["mm_token_type_ids"].tolist() == [[0, 1, 1, 0, 2]]
    assert set(kwargs) == {"pixel_values", "image_grid_thw", "mm_token_type_ids"}
    assert forward_inputs(Config(), ids, None) == {}


def test_cli_tiny_model_vision_builds_a_vision_language_model(tmp_path: Path, capsys) -> None:
    from rft.cli import main

    assert main(["tiny-model", "--vision", str(tmp_path / "vlm"), "--layers", "1"]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "vlm")
    config = json.loads((tmp_path / "vlm" / "config.json").read_text())
    assert config["model_type"] == "qwen2_vl" and config["text_config"]["num_hidden_layers"] == 1
    assert (tmp_path / "vlm" / "preprocessor_config.json").is_file()


def test_vision_inputs_survive_the_storage_codec() -> None:
    """The SQL / file storages' row format keeps an experience's vision inputs."""
    from rft.buffer.experience_codec import experience_from_dict, experience_to_dict

    experience = Experience(tokens=torch.arange(5), prompt_length=3,
                            multi_modal_inputs=_inputs([2, 1]))
    back = experience_from_dict(json.loads(json.dumps(experience_to_dict(experience))))
    assert back.multi_modal_inputs is not None and experience.multi_modal_inputs is not None
    assert torch.equal(back.multi_modal_inputs.pixel_values,
                       experience.multi_modal_inputs.pixel_values)
    assert torch.equal(back.multi_modal_inputs.image_grid_thw,
                       experience.multi_modal_inputs.image_grid_thw)
    assert experience_from_dict(experience_to_dict(Experience(
        tokens=torch.arange(3), prompt_length=1))).multi_modal_inputs is None
