"""Engine = trainer on image tasks: the ``hf`` engine's sampled log-probs, its teacher-forced
scoring and the torch trainer's forward (micro-batched, left-padded prompts) agree to
1e-5 in float32 on the tiny Qwen2-VL model."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from fixtures_vlm import solid_image, tiny_vision_dir  # noqa: F401  (session fixture)
from rft.engines.call_batching import experiences_from_completions
from rft.engines.engine import SamplingArgs
from rft.engines.hf_engine import HFEngine
from rft.errors import RftError
from rft.experience import pad_batch
from rft.trainer.batching import TensorBatch
from rft.trainer.models import load_causal_lm, response_logprobs

PROMPTS = (  # (question, image colours and sizes): different image token counts per row
    ("Which colour?", [((255, 0, 0), (40, 32))]),
    ("Name both colours.", [((0, 200, 0), (16, 16)), ((0, 0, 255), (24, 32))]),
    ("Colour?", [((250, 250, 0), (64, 48))]),
)


@pytest.fixture(scope="module")
def sampled(tiny_vision_dir: Path):
    engine = HFEngine(str(tiny_vision_dir), dtype="float32", seed=3)
    prompts = [engine.render_mm([{"role": "user", "content": q}],
                                [solid_image(c, s) for c, s in images])
               for q, images in PROMPTS]
    results = engine.generate_mm(prompts, SamplingArgs(temperature=1.0, max_tokens=6), n=2)
    experiences = experiences_from_completions([c for group in results for c in group])
    for index, experience in enumerate(experiences):
        experience.multi_modal_inputs = prompts[index // 2].multi_modal_inputs
    return engine, prompts, experiences


def test_engine_sampled_logprobs_equal_its_teacher_forced_scoring(sampled) -> None:
    engine, prompts, experiences = sampled
    assert engine.accepts_images()
    assert {len(p.token_ids) for p in prompts} == {len(p.token_ids) for p in prompts} and len(
        {len(p.token_ids) for p in prompts}) == 3  # three prompt lengths: padding is exercised
    scored = engine.compute_logprobs_mm([e.tokens.tolist() for e in experiences],
                                        [e.prompt_length for e in experiences],
                                        [e.multi_modal_inputs for e in experiences])
    for experience, logps in zip(experiences, scored, strict=True):
        assert experience.logprobs is not None and experience.response_length > 0
        torch.testing.assert_close(logps, experience.logprobs, atol=1e-5, rtol=0)


def test_trainer_forward_equals_the_engine_on_image_rows(sampled, tiny_vision_dir) -> None:
    _, _, experiences = sampled
    model = load_causal_lm(str(tiny_vision_dir)).eval()
    assert type(model).__name__ == "Qwen2VLForConditionalGeneration"
    batch = pad_batch(experiences, pad_token_id=0)
    tensors = TensorBatch(batch.prompt_width, {
        "input_ids": batch.input_ids, "attention_mask": batch.attention_mask,
        "position_ids": batch.position_ids, "response_mask": batch.response_mask},
        tuple(batch.multi_modal_inputs))
    assert batch.rollout_log_prob is not None
    for rows in ([0, 1, 2, 3, 4, 5], [5, 0], [3]):  # whole batch and micro-batches
        part = tensors.select(rows)
        with torch.no_grad():
            logps, _ = response_logprobs(model, part, device=torch.device("cpu"),
                                         shared_prompts=True)  # falls back: images
        for i, row in enumerate(rows):
            width = experiences[row].response_length
            torch.testing.assert_close(logps[i, :width], experiences[row].logprobs,
                                       atol=1e-5, rtol=0)


def test_trainer_forward_reads_each_rows_own_pixels(sampled, tiny_vision_dir) -> None:
    """The equality is not vacuous: row 0 scored with another colour's pixels (same size,
    so the same tokens) gives other log-probs."""
    engine, _, experiences = sampled
    row = experiences[0]
    blue = engine.render_mm([{"role": "user", "content": PROMPTS[0][0]}],
                            [solid_image((0, 0, 255), PROMPTS[0][1][0][1])])
    assert list(blue.token_ids) == row.tokens[:row.prompt_length].tolist()
    model = load_causal_lm(str(tiny_vision_dir)).eval()
    batch = pad_batch([row], pad_token_id=0)
    swapped = TensorBatch(batch.prompt_width, {
        "input_ids": batch.input_ids, "attention_mask": batch.attention_mask,
        "position_ids": batch.position_ids}, (blue.multi_modal_inputs,))
    with torch.no_grad():
        logps, _ = response_logprobs(model, swapped, device=torch.device("cpu"))
    assert row.logprobs is not None
    assert (logps[0, :row.response_length] - row.logprobs).abs().max() > 1e-3


def test_a_text_engine_refuses_images(tiny_model_dir) -> None:
    engine = HFEngine(str(tiny_model_dir), dtype="float32")
    assert not engine.accepts_images()
    with pytest.raises(RftError, match="takes no images"):
        engine.render_mm([{"role": "user", "content": "hi"}], [solid_image((0, 0, 0))])


def test_lora_on_the_language_model_only_keeps_the_forward(sampled, tiny_vision_dir) -> None:
    """``exclude_modules: .*visual.*`` leaves the vision tower without adapters; the peft
    model's forward with images equals the base model's at initialisation (B = 0)."""
    from peft import get_peft_model

    from rft.config.lora import peft_config, target_modules_problem
    from rft.config.schema import LoRAConfig

    _, _, experiences = sampled
    lora = LoRAConfig(lora_rank=4, lora_alpha=8, exclude_modules=".*visual.*")
    assert target_modules_problem(str(tiny_vision_dir), lora, False) is None
    model = get_peft_model(load_causal_lm(str(tiny_vision_dir)), peft_config(lora, None)).eval()
    adapted = [n for n, _ in model.named_modules() if n.endswith("lora_A")]
    assert adapted and not [n for n in adapted if "visual" in n]
    assert any("language_model" in n and "q_proj" in n for n in adapted)
    batch = pad_batch(experiences[:2], pad_token_id=0)
    tensors = TensorBatch(batch.prompt_width, {
        "input_ids": batch.input_ids, "attention_mask": batch.attention_mask,
        "position_ids": batch.position_ids}, tuple(batch.multi_modal_inputs))
    with torch.no_grad():
        logps, _ = response_logprobs(model, tensors, device=torch.device("cpu"))
    for i, experience in enumerate(experiences[:2]):
        torch.testing.assert_close(logps[i, :experience.response_length],
                                   experience.logprobs, atol=1e-5, rtol=0)


def test_prefix_sharing_falls_back_for_image_rows_with_one_line(sampled, tiny_vision_dir,
                                                                monkeypatch, caplog) -> None:
    import logging

    from rft.trainer import packed_forward
    from rft.trainer.models import uses_shared_prompts

    _, _, experiences = sampled
    monkeypatch.setattr(packed_forward, "_LOGGED", set())
    batch = pad_batch(experiences, pad_token_id=0)
    tensors = TensorBatch(batch.prompt_width, {
        "input_ids": batch.input_ids, "attention_mask": batch.attention_mask,
        "position_ids": batch.position_ids}, tuple(batch.multi_modal_inputs))
    model = load_causal_lm(str(tiny_vision_dir)).eval()
    with caplog.at_level(logging.INFO):
        assert not uses_shared_prompts(model, tensors, None)
        assert not uses_shared_prompts(model, tensors.select([0, 1]), None)
    lines = [r.getMessage() for r in caplog.records if "prefix sharing off" in r.getMessage()]
    assert lines == ["[trainer] prefix sharing off (trainer.prefix_sharing: auto): rows with "
                     "images (3-D rope positions and vision inputs are not packed); running "
                     "the model's plain forward"]
