"""Vision-language models in mode ``both``: the engine pool's replicas (Ray actors) serve
prompts with images (``render_mm`` / ``generate_mm`` / ``compute_logprobs_mm``), take
weights with the vision tower, and the experiences keep their vision inputs through the
buffer to the trainer actor (docs/multimodal.md)."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
import torch

from fixtures_vlm import solid_image, tiny_vision_dir  # noqa: F401  (session fixture)
from rft.config import load_config
from rft.engines.engine import SamplingArgs
from rft.launcher import run
from test_embedded_run import write_config
from test_vlm_example import make_data

MESSAGES = [{"role": "user", "content": "Which colour?"}]


@pytest.fixture(scope="module")
def ray_local():
    """A private local Ray cluster on 127.0.0.1 for the module (``rft run`` reuses it)."""
    import ray

    from rft.distributed.cluster import loopback_only

    restore = loopback_only()
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1",
             namespace="rft-tests-vlm", runtime_env={"env_vars": {"OMP_NUM_THREADS": "1"}})
    yield
    ray.shutdown()
    restore()


def _vision_config(tmp_path: Path, model: Path, data: Path, **changes: object) -> Path:
    taskset = {"name": "shapes", "path": str(data / "rl.jsonl"),
               "format": {"prompt_key": "question", "response_key": "answer",
                          "image_key": "image"},
               "default_workflow_type": "simple_mm_workflow",
               "default_reward_fn_type": "accuracy_reward"}
    return write_config(tmp_path, model, data / "rl.jsonl", **{
        "buffer__explorer_input__taskset": taskset, **changes})


@pytest.mark.slow  # 10-16 s here: two replica actors load torch and the model
def test_the_pool_forwards_prompts_with_images_to_its_replicas(ray_local, tiny_vision_dir,
                                                               tmp_path):
    """Two hf replicas as one engine: ``render_mm`` gives the local engine's prompt,
    ``generate_mm`` splits the prompts into one chunk per replica (chunk ``j`` with seed
    ``seed + j``, as ``generate``), ``compute_logprobs_mm`` equals the local engine's,
    and a weight update of the vision tower reaches both replicas."""
    from rft.distributed.engine_pool import EnginePool
    from rft.engines.engine_factory import build_engine
    from rft.errors import RftError
    from rft.multimodal.inputs import VisionPrompt
    from rft.plugins import PluginRegistry

    data = make_data(tmp_path / "shapes", {"heldout": 4, "sft": 4, "rl": 4})
    stage = load_config(_vision_config(tmp_path, tiny_vision_dir, data)).stages[0]
    hf_cls = PluginRegistry.create().get("engine", "hf")
    pool = EnginePool(stage.config, hf_cls, replicas=2)
    alone = build_engine(stage.config, hf_cls)
    try:
        assert pool.accepts_images() and alone.accepts_images()
        colours = [(230, 30, 30), (30, 200, 30), (40, 60, 240), (240, 220, 20)]
        prompts = [pool.render_mm(MESSAGES, [solid_image(c)]) for c in colours]
        local = [alone.render_mm(MESSAGES, [solid_image(c)]) for c in colours]
        for remote, here in zip(prompts, local, strict=True):
            assert remote.token_ids == here.token_ids
            assert remote.multi_modal_inputs is not None and here.multi_modal_inputs is not None
            assert torch.equal(remote.multi_modal_inputs.pixel_values,
                               here.multi_modal_inputs.pixel_values)
        # what crosses the object store per prompt: its tensors and image, little else
        vision = prompts[0].multi_modal_inputs
        raw = (vision.pixel_values.nbytes + vision.image_grid_thw.nbytes
               + len(prompts[0].images[0].tobytes()) + 8 * len(prompts[0].token_ids))
        assert len(pickle.dumps(prompts[0])) < raw + 2048

        sampling = SamplingArgs(max_tokens=5, seed=7)
        split = pool.generate_mm(prompts, sampling, n=2)
        halves = (alone.generate_mm(local[:2], sampling, n=2),
                  alone.generate_mm(local[2:], SamplingArgs(max_tokens=5, seed=8), n=2))
        assert [c.token_ids for g in split for c in g] == \
            [c.token_ids for half in halves for g in half for c in g]
        assert sorted(pool.served()) == [1, 1]  # one chunk each
        # a replica's refusal comes back as its own one line
        too_long = VisionPrompt(prompts[0].token_ids * 4, prompts[0].multi_modal_inputs)
        with pytest.raises(RftError, match=r"^hf engine: prompt 0 with images has \d+ tokens, "
                                           r"over the prompt limit") as refused:
            pool.generate_mm([too_long], sampling)
        assert "\n" not in str(refused.value)

        sequences = [list(p.token_ids) + g[0].token_ids for p, g in zip(prompts, split,
                                                                        strict=True)]
        lengths = [len(p.token_ids) for p in prompts]
        inputs = [p.multi_modal_inputs for p in prompts]
        pooled = pool.compute_logprobs_mm(sequences, lengths, inputs)
        direct = alone.compute_logprobs_mm(sequences, lengths, inputs)
        assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(pooled, direct, strict=True))

        # new vision-tower weights into both replicas: their log-probs follow the local
        # engine's with the same weights, and differ from before
        model = getattr(alone, "model")
        moved = [(name, tensor + 0.05) for name, tensor in model.state_dict().items()
                 if "visual" in name and name.endswith("weight")]
        assert moved
        pool.update_weights(iter(moved), version=1)
        alone.update_weights(iter(moved), version=1)
        assert pool.model_version == 1
        after = pool.compute_logprobs_mm(sequences, lengths, inputs)  # replica turn: 2nd
        again = pool.compute_logprobs_mm(sequences, lengths, inputs)  # the other one first
        assert all(torch.equal(a, b) for a, b in zip(after, again, strict=True))
        expected = alone.compute_logprobs_mm(sequences, lengths, inputs)
        assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(after, expected, strict=True))
        assert max((a - b).abs().max().item() for a, b in zip(after, pooled, strict=True)) > 1e-4
    finally:
        pool.close()


def _logged(job: Path, side: str) -> dict[int, dict[str, float]]:
    lines = (job / "monitor" / f"{side}.jsonl").read_text().splitlines()
    return {r["step"]: r["metrics"] for r in map(json.loads, lines)}


@pytest.mark.slow
def test_mode_both_trains_a_vision_model_through_two_engine_replicas(ray_local,
                                                                     tiny_vision_dir,
                                                                     tmp_path):
    """Mode ``both``, ``engine_num: 2`` (hf replicas as Ray actors), ``simple_mm_workflow``,
    2 steps with a memory sync after step 1, the queue buffer between the actors. Two
    epochs make the trainer recompute the old log-probs with its vision forward: they
    equal the replicas' sampling log-probs at step 1 (same weights) and at step 2 (after
    the sync — which must carry the vision tower, moved by step 1, or image rows differ);
    the vision tower's weights moved (the random model's rewards are all 0: an entropy
    bonus gives the gradient, no weight decay)."""
    from safetensors.torch import load_file

    data = make_data(tmp_path / "shapes", {"heldout": 4, "sft": 4, "rl": 8})
    config = _vision_config(
        tmp_path, tiny_vision_dir, data, mode="both", buffer__total_steps=2,
        model__max_prompt_tokens=128, model__max_response_tokens=4,
        explorer__rollout_model={"engine_type": "hf", "dtype": "float32", "engine_num": 2},
        trainer__save_interval=0, algorithm__optimizer={"lr": 1e-2, "weight_decay": 0.0},
        algorithm__entropy_loss_fn_args={"entropy_coef": 0.1},
        trainer__trainer_config={"actor_rollout_ref": {"actor": {"ppo_epochs": 2}}})
    assert run(load_config(config)) == 0

    job = tmp_path / "ck" / "e2e" / "run"
    trainer, explorer = _logged(job, "trainer"), _logged(job, "explorer")
    assert {s: m["explorer/model_version"] for s, m in explorer.items()} == {1: 0, 2: 1}
    for step in (1, 2):
        metrics = trainer[step]
        assert metrics["training/rollout_logprobs_diff_max"] <= 1e-5, (step, metrics)
        assert torch.isfinite(torch.tensor(metrics["actor/pg_loss"]))
        assert metrics["actor/grad_norm"] > 1e-3, (step, metrics)
    before = load_file(str(tiny_vision_dir / "model.safetensors"))
    (export,) = job.glob("**/hf/model.safetensors")
    after = load_file(str(export))
    vision = [name for name in before if "visual" in name]
    assert vision and set(vision) <= set(after)
    moved = max((after[n].float() - before[n].float()).abs().max().item() for n in vision)
    assert moved > 1e-4, moved


@pytest.mark.parametrize("storage_type", ["queue", "sql", "file"])
def test_experiences_keep_their_vision_inputs_through_the_buffer(tmp_path, storage_type):
    """What mode ``both``'s buffer actor holds between the explorer and the trainer: an
    experience written to each storage (pickled, as Ray carries it to the buffer actor)
    is read back with its vision inputs, tensor for tensor."""
    from rft.buffer.storage import open_storage
    from rft.experience import Experience
    from rft.multimodal.inputs import MultiModalInputs

    generator = torch.Generator().manual_seed(0)
    vision = MultiModalInputs(pixel_values=torch.randn(20, 96, generator=generator),
                              image_grid_thw=torch.tensor([[1, 4, 4], [1, 2, 2]]))
    written = Experience(tokens=torch.arange(12), prompt_length=8, reward=1.0,
                         logprobs=torch.full((4,), -0.5), multi_modal_inputs=vision)
    path = None if storage_type == "queue" else str(tmp_path / f"exp.{storage_type}")
    store = open_storage(storage_type, "exp", path)
    store.write([pickle.loads(pickle.dumps(written))])
    (read,) = store.read(1, timeout=5)
    assert read.multi_modal_inputs is not None
    assert torch.equal(read.multi_modal_inputs.pixel_values, vision.pixel_values)
    assert torch.equal(read.multi_modal_inputs.image_grid_thw, vision.image_grid_thw)
    assert read.multi_modal_inputs.image_grid_thw.dtype == torch.long
    assert torch.equal(read.tokens, written.tokens)


def test_partial_rollouts_with_images_are_refused_in_one_line(tiny_vision_dir, tmp_path):
    """``synchronizer.partial_rollout`` resumes an interrupted completion from its token ids
    alone (no pixels): a taskset with images is refused at validation, naming both keys."""
    from rft.errors import RftError

    data = make_data(tmp_path / "shapes", {"heldout": 4, "sft": 4, "rl": 4})
    config = _vision_config(tmp_path, tiny_vision_dir, data, mode="both",
                            synchronizer__partial_rollout=True)
    with pytest.raises(RftError) as refused:
        load_config(config)
    line = next(m for m in str(refused.value).splitlines() if "partial_rollout" in m)
    assert "synchronizer.partial_rollout: prompts with images " \
        "(buffer.explorer_input.taskset.format.image_key) cannot be interrupted" in line
    text_only = _vision_config(tmp_path, tiny_vision_dir, data, mode="both",
                               synchronizer__partial_rollout=True,
                               buffer__explorer_input__taskset__format__image_key=None,
                               buffer__explorer_input__taskset__default_workflow_type=
                               "simple_workflow")
    load_config(text_only)  # the same run without images validates
