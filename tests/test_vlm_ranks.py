"""The sharded torch trainer with a vision-language actor (tiny Qwen2-VL).

- every forward runs the vision tower (a dummy image × 0 when the call has no pixels,
  :mod:`rft.trainer.vision_step`): outputs unchanged, every vision parameter gets a
  gradient, so FSDP's collectives of the vision blocks match over ranks whatever rows
  each rank holds;
- FSDP2 wraps the vision blocks one by one (``Qwen2VLVisionBlock``), beside the decoder
  layers;
- 2 ranks = 1 rank (Ray actors over gloo): one GRPO step on image rows (images of
  different sizes, text rows among them, so the ranks hold different images and one
  holds micro-batches without any) leaves the same parameters (≤ 1e-6, fp32), losses and
  gradient norm.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import rft_plugin_grpo
import rft_plugin_rewards
import rft_plugin_selectors
import rft_plugin_workflows
import torch
from ray import cloudpickle

from fixtures_vlm import solid_image, tiny_vision_dir  # noqa: F401  (session fixture)
from rft.config import build_stages
from rft.experience import EID, Experience
from rft.multimodal import forward_inputs
from rft.multimodal.processor import load_processor, render_prompt
from rft.plugins import PluginRegistry
from rft.trainer.fsdp import decoder_layers
from rft.trainer.torch_trainer import TorchTrainer
from rft.trainer.vision_step import keep_vision_in_step

# functions run on the ranks through RankedTrainer.call_all: pickled by value
cloudpickle.register_pickle_by_value(sys.modules[__name__])


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


# ---- 2 ranks against 1 (Ray actors over gloo) -------------------------------------------------


def _plan(tmp: Path, model: Path, ranks: int) -> Any:
    registry = PluginRegistry.create(autoload=False, extra_plugins=[
        rft_plugin_grpo, rft_plugin_workflows, rft_plugin_rewards, rft_plugin_selectors])
    plain = {
        "mode": "train", "checkpoint_root_dir": str(tmp / "ck"),
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 2,
                      "optimizer": {"lr": 1e-4}},
        "model": {"model_path": str(model), "max_prompt_tokens": 64,
                  "max_response_tokens": 8},
        "cluster": {"node_num": 1, "gpu_per_node": 0},
        "buffer": {"batch_size": 4, "total_steps": 1, "trainer_input": {"experience_buffer": {
            "name": "exp", "storage_type": "sql", "path": str(tmp / "exp.db")}}},
        "explorer": {"rollout_model": {"engine_type": "hf"}},
        "synchronizer": {"sync_method": "checkpoint", "sync_timeout": 120},
        "trainer": {"trainer_type": "torch", "cpu_ranks": ranks, "use_dynamic_bsz": False,
                    "trainer_config": {"actor_rollout_ref": {"actor": {
                        "ppo_mini_batch_size": 4, "ppo_micro_batch_size_per_gpu": 1}}}},
        "monitor": {"monitor_type": "jsonl"},
    }
    plan = build_stages(plain, registry).stages[0].plan.trainer_plan()
    assert plan.trainer.ranks == ranks
    return plan


def image_rollouts(model: Path, seed: int = 0) -> list[Experience]:
    """8 rows in groups of 2: prompts with one image of 16×16 to 32×24 pixels, except rows
    5 and 6 (text only); random responses of 2–7 tokens, rewards 0/1."""
    processor = load_processor(str(model))
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(8):
        size = (16 + 8 * (i % 3), 16 + 8 * (i % 2))
        images = [] if i in (5, 6) else [solid_image((40 * i % 256, 90, 200 - 20 * i), size)]
        ids, vision = render_prompt(processor, [{"role": "user", "content": f"colour {i}?"}],
                                    images)
        response = torch.randint(3, 900, (2 + (5 * i) % 6,), generator=g)
        out.append(Experience(tokens=torch.cat([torch.tensor(ids), response]),
                              prompt_length=len(ids), reward=float((3 * i + seed) % 4 < 2),
                              logprobs=-torch.rand(len(response), generator=g),
                              eid=EID(batch=seed, task=i // 2, run=i % 2),
                              multi_modal_inputs=vision))
    return out


def _sharded_blocks(rank: Any) -> dict[str, int]:
    """On a rank: how many vision blocks / decoder layers of the actor are FSDP units."""
    from torch.distributed.fsdp import FSDPModule

    counts: dict[str, int] = {}
    for module in rank.trainer.actor.modules():
        if isinstance(module, FSDPModule):
            name = type(module).__name__.replace("FSDP", "")
            counts[name] = counts.get(name, 0) + 1
    return counts


@pytest.mark.slow
def test_two_ranks_equal_one_rank_on_image_rows(tmp_path: Path, tiny_vision_dir: Path  # noqa: F811
                                                ) -> None:
    import ray

    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1",
             namespace="rft-vlm-ranks", runtime_env={"env_vars": {"OMP_NUM_THREADS": "1"}})
    two = None
    try:
        one = TorchTrainer(_plan(tmp_path, tiny_vision_dir, 1))
        two = TorchTrainer(_plan(tmp_path, tiny_vision_dir, 2))
        assert type(two).__name__ == "RankedTrainer" and two.world_size == 2
        counts = two.call_all(_sharded_blocks)[0]
        assert counts.get("Qwen2VLVisionBlock") == 2 and counts.get("Qwen2VLDecoderLayer") == 2
        before = {k: v.clone() for k, v in one.named_weights()}
        batch = image_rollouts(tiny_vision_dir)
        m1, m2 = one.train_step(batch), two.train_step(batch)
        w1, w2 = dict(one.named_weights()), dict(two.named_weights())
        assert w1.keys() == w2.keys()
        worst = max((w1[k] - w2[k]).abs().max().item() for k in w1)
        moved = max((w1[k] - before[k]).abs().max().item() for k in w1 if "visual" in k)
        print(f"2 ranks vs 1: max |Δ weight| {worst:.3g}; vision weights moved {moved:.3g}")
        assert worst <= 1e-6
        assert moved > 1e-5  # the vision tower was trained (images reached it)
        for key in ("actor/pg_loss", "actor/entropy_loss", "critic/advantages/mean"):
            assert m2[key] == pytest.approx(m1[key], abs=1e-6), key
        assert m2["actor/grad_norm"] == pytest.approx(m1["actor/grad_norm"], rel=1e-5)
    finally:
        if two is not None:
            two.close()
        ray.shutdown()
