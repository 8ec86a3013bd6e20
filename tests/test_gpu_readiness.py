"""GPU paths, tested on this CPU machine (issue #29): the decisions a first run on GPUs
depends on, without a GPU and without pretending to have one.

- FSDP2 with ``CPUOffloadPolicy`` on CUDA needs the mixed backend ``cpu:gloo,cuda:nccl``.
- Colocate: vLLM's ``gpu_memory_utilization`` defaults to 0.5; the device cache is released
  before every wake-up; an engine built before the trainer sleeps while it loads; weights
  wake, load, then the KV cache wakes.
- The weight broadcast streams bucket by bucket (peak bytes held by a receiver measured
  over gloo) and sends in the engine's dtype.
- Rescoring that would need full-vocabulary prompt log-probs is refused in one line.
- The first sync's engine / trainer log-prob gap is one line with its threshold.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import torch

from rft.config import build_stages
from rft.engines.engine_sleep import EngineSleep
from rft.engines.hf_engine import HFEngine
from rft.hookspecs import hookimpl
from rft.testing.runs import run_tiny, tiny_run_config, write_taskset
from rft.trainer.options import param_offload
from rft.trainer.parallel import process_group_backend

# ---- item 5: the trainer's process-group backend ---------------------------------------------


def test_cpu_offload_on_cuda_takes_the_mixed_backend():
    assert process_group_backend("cuda", cpu_offload=True) == "cpu:gloo,cuda:nccl"
    assert process_group_backend("cuda", cpu_offload=False) == "nccl"
    assert process_group_backend("cpu", cpu_offload=True) == "gloo"
    assert process_group_backend("cpu", cpu_offload=False) == "gloo"
    offload = {"actor_rollout_ref": {"actor": {"fsdp_config": {"param_offload": True}}}}
    assert param_offload(offload)
    assert param_offload({"critic": {"model": {"fsdp_config": {"param_offload": True}}}})
    assert not param_offload({"actor_rollout_ref": {"actor": {"fsdp_config": {
        "optimizer_offload": True}}}})  # the optimizer state moves by hand, not through FSDP2
    assert not param_offload(None)


# ---- item 3: colocate memory -----------------------------------------------------------------


def plain(tmp_path: Path, model: Path, **changes: Any) -> dict[str, Any]:
    config = tiny_run_config(model, write_taskset(tmp_path / "tasks.jsonl"), tmp_path)
    for dotted, value in changes.items():
        *parents, last = dotted.split(".")
        node = config
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return config


def test_colocate_resolves_gpu_memory_utilization_to_half(tmp_path, tiny_model_dir):
    from rft.errors import ConfigError
    from rft.plugins import PluginRegistry

    registry = PluginRegistry.create()
    vllm = {"explorer.rollout_model.engine_type": "vllm"}
    colocate = build_stages(plain(tmp_path, tiny_model_dir, **vllm), registry).stages[0].config
    assert colocate.explorer.rollout_model.gpu_memory_utilization == 0.5
    both = build_stages(plain(tmp_path, tiny_model_dir, mode="both", **vllm),
                        registry).stages[0].config
    assert both.explorer.rollout_model.gpu_memory_utilization == 0.9  # a GPU of its own
    chosen = build_stages(plain(tmp_path, tiny_model_dir, **vllm, **{
        "explorer.rollout_model.gpu_memory_utilization": 0.7}), registry).stages[0].config
    assert chosen.explorer.rollout_model.gpu_memory_utilization == 0.7  # the user's wins
    with pytest.raises(ConfigError, match=r"explorer.rollout_model.gpu_memory_utilization: "
                                          r"must be within \(0, 1\], got 1.5"):
        build_stages(plain(tmp_path, tiny_model_dir, **vllm, **{
            "explorer.rollout_model.gpu_memory_utilization": 1.5}), registry)
    # an engine that does not read it keeps it unset, so nothing warns about it
    hf = build_stages(plain(tmp_path, tiny_model_dir), registry)
    assert hf.stages[0].config.explorer.rollout_model.gpu_memory_utilization is None
    assert not [w for w in hf.warnings if "gpu_memory_utilization" in w]


class SleepRecordingHF(HFEngine):
    """The ``hf`` engine with a sleep mode that records its calls (vLLM's real one needs
    CUDA); it refuses to generate or load while what that needs is asleep."""

    sleep_mode = True
    built: list[SleepRecordingHF] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.events: list[str] = []
        self.asleep: set[str] = set()
        SleepRecordingHF.built.append(self)

    def sleep(self) -> None:
        self.events.append("sleep")
        self.asleep = {"weights", "kv_cache"}

    def wake_up(self, tags: tuple[str, ...] | None = None) -> None:
        self.events.append(f"wake {','.join(tags or ('all',))}")
        self.asleep -= set(tags) if tags else self.asleep

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        if self.asleep:
            raise RuntimeError(f"generate while {sorted(self.asleep)} asleep")
        self.events.append("generate")
        return super().generate(*args, **kwargs)

    def update_weights(self, *args: Any, **kwargs: Any) -> None:
        if "weights" in self.asleep:
            raise RuntimeError("update_weights while the weights are asleep")
        self.events.append("load")
        super().update_weights(*args, **kwargs)


class SleepRecordingPlugin:
    @hookimpl
    def register_engines(self) -> dict[str, Any]:
        return {"sleep_recording_hf": SleepRecordingHF}


def test_the_device_cache_is_released_before_every_wake_up(tiny_model_dir):
    engine = SleepRecordingHF(str(tiny_model_dir), dtype="float32")
    sleeper = EngineSleep(engine, release=lambda: engine.events.append("release"))
    weights = [(name, tensor.clone()) for name, tensor in engine.model.state_dict().items()]
    sleeper.sleep()
    sleeper.load(iter(weights), version=1)
    assert engine.events == ["sleep", "release", "wake weights", "load", "release",
                             "wake kv_cache"]
    engine.events.clear()
    sleeper.sleep()
    sleeper.wake()  # after the trainer is built: all of it, weights first
    assert engine.events == ["sleep", "release", "wake weights", "release", "wake kv_cache"]


@pytest.mark.slow
def test_an_engine_built_before_the_trainer_sleeps_while_it_loads(tmp_path, tiny_model_dir,
                                                                  monkeypatch, capfd):
    """One colocate step with an engine recording its sleep mode; the first step's check of
    the engine's log-probs against the trainer's is one line (item 11)."""
    import rft.modes.colocate as colocate

    build_trainer = colocate.build_trainer
    asleep_at_build: list[set[str]] = []

    def recording_build_trainer(*args: Any, **kwargs: Any) -> Any:
        asleep_at_build.append(set(SleepRecordingHF.built[-1].asleep))
        return build_trainer(*args, **kwargs)

    monkeypatch.setattr(colocate, "build_trainer", recording_build_trainer)
    SleepRecordingHF.built.clear()
    run_tiny(tiny_model_dir, write_taskset(tmp_path / "tasks.jsonl"), tmp_path,
             {"explorer.rollout_model.engine_type": "sleep_recording_hf"},
             plugins=[SleepRecordingPlugin()], steps=2)
    assert asleep_at_build == [{"weights", "kv_cache"}]
    events = SleepRecordingHF.built[-1].events
    first = events.index("generate")
    assert events[:first] == ["sleep", "wake weights", "wake kv_cache"], events
    assert events[-4:] == ["sleep", "wake weights", "load", "wake kv_cache"], events
    # one update per step needs no old log-probs: the first step computes them for the
    # check, once
    captured = capfd.readouterr()
    assert "first step" not in captured.err  # agreeing: no rft: line, which would read as an error
    checks = [line for line in captured.out.splitlines()
              if line.startswith("[trainer] first step:")]
    assert len(checks) == 1 and re.fullmatch(
        r"\[trainer\] first step: engine vs trainer probabilities of the sampled tokens: mean gap "
        r"\S+ \(max \S+\), threshold 0.01: agree", checks[0]), checks


# ---- item 11: the first step's log-prob check ------------------------------------------------


def test_the_first_step_check_says_the_gap_and_its_threshold_in_one_line():
    from rft.trainer.metrics import first_step_check, rollout_probs_diff

    mask = torch.ones(1, 3)
    same = rollout_probs_diff(torch.log(torch.tensor([[0.5, 0.2, 0.9]])),
                              torch.log(torch.tensor([[0.5, 0.2, 0.9]])), mask)
    assert first_step_check(same) == (
        "first step: engine vs trainer probabilities of the sampled tokens: mean gap 0 "
        "(max 0), threshold 0.01: agree", True)
    apart = rollout_probs_diff(torch.log(torch.tensor([[0.5, 0.2, 0.9]])),
                               torch.log(torch.tensor([[0.3, 0.2, 0.9]])), mask)
    line, ok = first_step_check(apart)
    assert not ok and "\n" not in line
    assert line.startswith("first step: engine vs trainer probabilities of the sampled tokens: "
                           "mean gap 0.0667 (max 0.2), threshold 0.01: DISAGREE")
    assert first_step_check({}) is None  # no engine log-probs: nothing to check


# ---- item 4: the weight broadcast streams, in the engine's dtype -----------------------------


def test_a_receiver_holds_one_bucket_and_the_weights_travel_in_the_engine_dtype():
    """Two ranks over gloo: the sender casts the fp32 weights to the engine's bf16; the
    receiver loads each tensor as its bucket arrives. The bytes of the live buckets are
    counted at allocation and release (every bucket is allocated by the receiver): at most
    two of 9 buckets are alive at once (131 kB of a 524 kB model)."""
    import threading
    import weakref

    from rft.distributed.weight_broadcast import (BroadcastGroup, engine_dtype,
                                                  host_rendezvous, in_dtype, spec_of)

    g = torch.Generator().manual_seed(0)
    model = {f"layers.{i}.weight": torch.randn(128, 128, generator=g) for i in range(16)}
    model["steps"] = torch.arange(4)  # an integer buffer keeps its dtype
    fp32_bytes = sum(t.numel() * t.element_size() for t in model.values())
    dtype = engine_dtype("bfloat16")
    sent = [(name, in_dtype(t, dtype)) for name, t in model.items()]
    spec = spec_of(sent)
    limit = 2 * 128 * 128 * 2  # two bf16 layers per bucket: 8 buckets (+ the int64 one)
    store, address = host_rendezvous(2, torch.device("cpu"), timeout_s=30)
    live, peak, allocated = [0], [0], [0]
    loaded = {name: torch.zeros_like(t) for name, t in model.items()}
    errors: list[BaseException] = []

    def counted_empty(size: int, **kwargs: Any) -> torch.Tensor:
        buffer = torch.empty(size, **kwargs)
        live[0] += size
        allocated[0] += size
        peak[0] = max(peak[0], live[0])
        weakref.finalize(buffer, lambda: live.__setitem__(0, live[0] - size))
        return buffer

    def receiver() -> None:
        try:
            group = BroadcastGroup(address, 1)
            for _, name, tensor in group.stream(spec, limit, empty=counted_empty):
                loaded[name].copy_(tensor)  # what vLLM's loader does with each
            group.close()
        except BaseException as exc:  # noqa: BLE001 (re-raised below)
            errors.append(exc)

    thread = threading.Thread(target=receiver)
    thread.start()
    sender = BroadcastGroup(address, 0, store=store)
    sender.send([t for _, t in sent], limit=limit)
    thread.join(60)
    sender.close()
    assert not errors, errors
    assert spec[0].dtype == torch.bfloat16 and spec[-1].dtype == torch.int64
    # half the bytes of the fp32 master copy went over the wire (+ the int64 buffer)
    assert allocated[0] == (fp32_bytes - 32) // 2 + 32
    # never the model: the bucket arriving and, at most, the one whose last tensor the
    # loader's loop variable still holds (vLLM's loader iterates the same way)
    assert peak[0] <= 2 * limit + 32 and 4 * peak[0] <= allocated[0], (peak[0], allocated[0])
    assert live[0] == 0
    for name, tensor in model.items():
        assert torch.equal(loaded[name], in_dtype(tensor, dtype).to(tensor.dtype))


def test_the_engine_dtype_comes_from_the_rollout_model(tmp_path):
    import json

    from rft.distributed.weight_broadcast import engine_dtype

    assert engine_dtype("bfloat16") is torch.bfloat16 and engine_dtype("fp16") is torch.float16
    assert engine_dtype("float32") is torch.float32
    (tmp_path / "config.json").write_text(json.dumps({"torch_dtype": "bfloat16"}))
    assert engine_dtype("auto", str(tmp_path)) is torch.bfloat16  # vLLM's auto: the checkpoint's
    (tmp_path / "config.json").write_text(json.dumps({"dtype": "float32"}))
    assert engine_dtype("auto", str(tmp_path)) is None  # the trainer's own
    assert engine_dtype("auto", "Qwen/Qwen2.5-1.5B") is None  # not here: the trainer's


# ---- item 10: training on the engine's log-probs where they are not re-scored -----------------


def test_rollout_logprobs_that_vllm_does_not_rescore_are_refused_in_one_line(tmp_path,
                                                                           tiny_model_dir):
    from rft.errors import ConfigError
    from rft.plugins import PluginRegistry

    registry = PluginRegistry.create()
    uses = {"trainer.trainer_config": {"torch": {"use_rollout_logprobs": True}},
            "explorer.rollout_model.engine_type": "vllm",
            "model.temperature": 0.7, "model.top_p": 0.9}
    with pytest.raises(ConfigError) as caught:
        build_stages(plain(tmp_path, tiny_model_dir, **uses), registry)
    assert caught.value.problems == [
        "trainer.trainer_config.torch.use_rollout_logprobs: engine 'vllm' keeps its processed "
        "log-probs at temperature 0.7 with top_p / top_k / repetition_penalty (re-scoring "
        "needs full-vocabulary prompt log-probs): leave it false (the trainer scores) or set "
        "explorer.rollout_model.extra_engine_args.rescore_full_vocabulary: true"]
    for fine in ({"model.top_p": 1.0}, {"model.temperature": 1.0},
                 {"explorer.rollout_model.engine_type": "hf"},
                 {"explorer.rollout_model.extra_engine_args": {"rescore_full_vocabulary": True}}):
        build_stages(plain(tmp_path, tiny_model_dir, **{**uses, **fine}), registry)
