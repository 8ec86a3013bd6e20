"""``trainer_type: verl`` with a vision-language actor (the tiny Qwen2-VL of ``rft
tiny-model --vision``) on this CPU: veRL 0.9.1's FSDP engine through its own patched
Qwen2-VL forward, fed each row's vision tensors (``multi_modal_inputs``) and ``(B, 4, L)``
positions (:mod:`rft_plugin_verl.vision`).

- veRL's batch layout for image rows: the position ids are the text positions over
  Qwen2-VL's 3-D rope index, the image tokens laid out on the image's patch grid;
- one GRPO step on image rows (text rows among them) through veRL equals the native torch
  trainer's step: the same parameters (fp32, within 1e-5), losses and gradient norm.

veRL patches Qwen2-VL's classes process-wide when its actor is built
(``verl.models.transformers.monkey_patch``): the native trainer steps first and the
patched methods are restored afterwards, so other tests see transformers' own forward.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import rft_plugin_grpo
import rft_plugin_verl
import torch
from rft.config import build_stages
from rft.experience import EID, Experience, pad_batch
from rft.multimodal.processor import load_processor, render_prompt
from rft.plugins import PluginRegistry
from rft.testing.runs import apply_overrides
from rft.testing.tiny_vision_model import build_tiny_vision_model
from rft.trainer.torch_trainer import TorchTrainer
from rft_plugin_verl import environment
from rft_plugin_verl.vision import VisionRows

TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def vision_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_vision_model(tmp_path_factory.mktemp("tiny_qwen2_vl_verl"), seed=0)


@pytest.fixture
def restored_qwen2_vl():
    """Qwen2-VL's patched methods restored after the test (see the module docstring)."""
    from transformers.models.qwen2_5_vl import modeling_qwen2_5_vl as q25
    from transformers.models.qwen2_vl import modeling_qwen2_vl as q2

    classes = [getattr(module, name) for module in (q2, q25) for name in dir(module)
               if name.startswith(("Qwen2VL", "Qwen2_5_VL")) and isinstance(
                   getattr(module, name), type)]
    saved = {cls: dict(vars(cls)) for cls in classes}
    yield
    for cls, attributes in saved.items():
        for name in [n for n in vars(cls) if n not in attributes]:
            delattr(cls, name)
        for name, value in attributes.items():
            if name not in ("__dict__", "__weakref__") and vars(cls).get(name) is not value:
                setattr(cls, name, value)


def image_rollouts(model: Path, seed: int = 0) -> list[Experience]:
    """6 rows (3 groups of 2): one image each (16–32 px sides) but row 3 (text only);
    random responses of 2–7 tokens; rewards 0/1."""
    from PIL import Image

    processor = load_processor(str(model))
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(6):
        size = (16 + 8 * (i % 3), 16 + 8 * (i % 2))
        images = [] if i == 3 else [Image.new("RGB", size, (40 * i, 90, 200 - 20 * i))]
        ids, vision = render_prompt(processor, [{"role": "user", "content": f"colour {i}?"}],
                                    images)
        response = torch.randint(3, 900, (2 + (5 * i) % 6,), generator=g)
        out.append(Experience(tokens=torch.cat([torch.tensor(ids), response]),
                              prompt_length=len(ids), reward=float((i * 7 + seed) % 3 == 0),
                              logprobs=-torch.rand(len(response), generator=g),
                              eid=EID(batch=seed, task=i // 2, run=i % 2),
                              multi_modal_inputs=vision))
    return out


def plain(model: Path, tmp: Path) -> dict[str, Any]:
    return {
        "mode": "train", "checkpoint_root_dir": str(tmp / "ck"),
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 2,
                      "optimizer": {"lr": 1e-3}},
        "model": {"model_path": str(model), "max_prompt_tokens": 64,
                  "max_response_tokens": 8},
        "cluster": {"node_num": 1, "gpu_per_node": 0},
        "buffer": {"batch_size": 3, "total_steps": 1, "trainer_input": {"experience_buffer": {
            "name": "exp", "storage_type": "sql", "path": str(tmp / "exp.db")}}},
        "synchronizer": {"sync_method": "checkpoint"},
        "trainer": {"trainer_type": "verl", "use_dynamic_bsz": True,
                    "trainer_config": {"torch": {"device": "cpu"},
                                       "actor_rollout_ref": {"actor": {
                                           "ppo_micro_batch_size_per_gpu": 2}}}},
        "monitor": {"monitor_type": "jsonl"},
    }


def test_verl_positions_lay_image_tokens_on_their_grid(vision_model: Path) -> None:
    rows = image_rollouts(vision_model)
    batch = pad_batch(rows, pad_token_id=0)
    positions = VisionRows(str(vision_model)).position_ids(batch)  # (B, 4, L)
    assert positions.shape == (6, 4, batch.input_ids.shape[1])
    image_id = load_processor(str(vision_model)).tokenizer.convert_tokens_to_ids("<|image_pad|>")
    row = 0  # a 16×16 image: 4×4 patches of 4 px, merged 2×2 → a 2×2 grid of image tokens
    mask = batch.input_ids[row] == image_id
    assert int(mask.sum()) == 4
    t, h, w = (positions[row, k][mask].tolist() for k in (1, 2, 3))
    assert t == [t[0]] * 4 and [v - h[0] for v in h] == [0, 0, 1, 1]
    assert [v - w[0] for v in w] == [0, 1, 0, 1]
    text = batch.attention_mask[3].bool()  # the text-only row: 1-D positions on every axis
    for k in (1, 2, 3):
        assert torch.equal(positions[3, k][text], positions[3, 0][text])


def test_rows_of_one_length_keep_their_positions_ragged_over_the_sequence(
        vision_model: Path) -> None:
    """All rows of the same length (one question, one image size, as a real step has):
    the ``(4, L)`` positions stay ragged over the sequence, so veRL's micro-batching splits
    them by row (before: ``split_with_sizes expects split_sizes to sum exactly to L``)."""
    from rft_plugin_verl.batch import to_tensordict
    from verl.utils import tensordict_utils as tu

    rows = [e for e in image_rollouts(vision_model) if e.multi_modal_inputs is not None]
    same = [Experience(tokens=rows[0].tokens.clone(), prompt_length=rows[0].prompt_length,
                       multi_modal_inputs=rows[0].multi_modal_inputs,
                       eid=EID(batch=0, task=i, run=0)) for i in range(4)]
    data = to_tensordict(pad_batch(same, pad_token_id=0), None, VisionRows(str(vision_model)))
    positions = data["position_ids"]
    length = len(same[0].tokens)
    assert positions._ragged_idx == 2 and positions.values().shape == (4, 4 * length)
    chunks = tu.chunk_tensordict(data, 2)
    assert [c["position_ids"].values().shape for c in chunks] == [(4, 2 * length)] * 2
    assert len(tu.index_select_tensor_dict(data, [3, 1])) == 2


@pytest.mark.slow
def test_a_verl_step_on_image_rows_equals_the_native_trainer(vision_model, tmp_path,
                                                             restored_qwen2_vl) -> None:
    missing = environment.problems()
    if missing:
        if os.environ.get("RFT_REQUIRE_VERL_WORKERS") == "1":
            pytest.fail("; ".join(missing))
        pytest.skip("veRL's workers cannot run in this environment: " + "; ".join(missing))
    registry = PluginRegistry.create(autoload=False,
                                     extra_plugins=[rft_plugin_grpo, rft_plugin_verl])
    config = plain(vision_model, tmp_path)
    batch = image_rollouts(vision_model)
    native = TorchTrainer(build_stages(apply_overrides(config, {"trainer.trainer_type": "torch"}),
                                       registry).stages[0].plan.trainer_plan())
    before = {k: v.clone() for k, v in native.named_weights()}
    expected = native.train_step(batch)  # before veRL patches Qwen2-VL's classes
    native_weights = dict(native.named_weights())
    plan = build_stages(config, registry).stages[0].plan
    verl = plan.trainer.implementation(plan.trainer_plan())
    try:
        assert verl.vision is not None
        got = verl.train_step(batch)
        weights = dict(verl.named_weights())
    finally:
        verl.close()
    assert weights.keys() == native_weights.keys()
    worst = max((weights[k] - native_weights[k]).abs().max().item() for k in weights)
    moved = max((native_weights[k] - before[k]).abs().max().item()
                for k in weights if "visual" in k)
    print(f"verl vs torch on image rows: max |Δ weight| {worst:.3g}; vision moved {moved:.3g}")
    assert worst < TOLERANCE
    assert moved > 100 * TOLERANCE  # the step trained the vision tower
    for name in ("actor/pg_loss", "actor/kl_loss", "actor/grad_norm", "critic/advantages/mean"):
        assert got[name] == pytest.approx(expected[name], rel=1e-5, abs=1e-7), name
