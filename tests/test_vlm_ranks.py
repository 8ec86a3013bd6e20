"""The sharded torch trainer with a vision-language actor (tiny Qwen2-VL).

- every forward runs the vision tower (a dummy image × 0 when the call has no pixels,
  :mod:`rft.trainer.vision_step`): outputs unchanged, every vision parameter gets a
  gradient, so FSDP's collectives of the vision blocks match over ranks whatever rows
  each rank holds;
- FSDP2 wraps the vision blocks one by one (``Qwen2VLVisionBlock``), beside the decoder
  layers.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from fixtures_vlm import solid_image, tiny_vision_dir  # noqa: F401  (session fixture)
from rft.multimodal import forward_inputs
from rft.multimodal.processor import load_processor, render_prompt
from rft.trainer.fsdp import decoder_layers
from rft.trainer.vision_step import keep_vision_in_step


@pytest.fixture(scope="module")
def model(tiny_vision_dir: Path):  # noqa: F811
    from transformers import AutoModelForImageTextToText

    torch.manual_seed(0)
    return AutoModelForImageTextToText.from_pretrained(str(tiny_vision_dir),
                                                       dtype=torch.float32)


def _vision_grads(model) -> dict[str, torch.Tensor | None]:
    return {name: p.grad for name, p in model.model.visual.named_parameters()}


def test_a_text_forward_runs_the_tower_for_zero_and_leaves_the_output(model) -> None:
    ids = torch.tensor([[5, 6, 7, 8, 9]])  # (1, 5): no image tokens
    model.zero_grad(set_to_none=True)
    plain = model(input_ids=ids).logits  # (1, 5, V)
    plain.sum().backward()
    assert all(g is None for g in _vision_grads(model).values())  # the tower did not run
    hooks = keep_vision_in_step(model)
    assert hooks is not None
    try:
        model.zero_grad(set_to_none=True)
        hooked = model(input_ids=ids).logits  # (1, 5, V)
        assert torch.equal(hooked, plain)
        hooked.sum().backward()
        grads = _vision_grads(model)
        assert grads and all(g is not None and not g.any() for g in grads.values())
        assert hooks.dummy_runs == 1
    finally:
        hooks.remove()
        model.zero_grad(set_to_none=True)


def test_a_forward_with_images_runs_no_dummy(model, tiny_vision_dir: Path) -> None:  # noqa: F811
    processor = load_processor(str(tiny_vision_dir))
    ids, vision = render_prompt(processor, [{"role": "user", "content": "Colour?"}],
                                [solid_image((255, 0, 0), (16, 16))])
    input_ids = torch.tensor([ids])  # (1, L)
    kwargs = forward_inputs(model.config, input_ids, vision)
    hooks = keep_vision_in_step(model)
    assert hooks is not None
    try:
        logits = model(input_ids=input_ids, **kwargs).logits  # (1, L, V)
        logits.sum().backward()
        assert hooks.dummy_runs == 0
        assert any(g is not None and g.abs().sum() > 0 for g in _vision_grads(model).values())
    finally:
        hooks.remove()
        model.zero_grad(set_to_none=True)


def test_fsdp_wraps_the_vision_blocks_too(model) -> None:
    names = {type(m).__name__ for m in decoder_layers(model)}
    assert names == {"Qwen2VLDecoderLayer", "Qwen2VLVisionBlock"}
    blocks = [m for m in decoder_layers(model) if type(m).__name__ == "Qwen2VLVisionBlock"]
    assert len(blocks) == model.config.vision_config.depth
