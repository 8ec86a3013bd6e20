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

from pathlib import Path
from typing import Any

import pytest
import torch

from rft.config import build_stages
from rft.explorer.engine_sleep import EngineSleep
from rft.explorer.hf_engine import HFEngine
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
    colocate = build_stages(plain(tmp_path, tiny_model_dir), registry).stages[0].config
    assert colocate.explorer.rollout_model.gpu_memory_utilization == 0.5
    both = build_stages(plain(tmp_path, tiny_model_dir, mode="both"),
                        registry).stages[0].config
    assert both.explorer.rollout_model.gpu_memory_utilization == 0.9  # a GPU of its own
    chosen = build_stages(plain(tmp_path, tiny_model_dir, **{
        "explorer.rollout_model.gpu_memory_utilization": 0.7}), registry).stages[0].config
    assert chosen.explorer.rollout_model.gpu_memory_utilization == 0.7  # the user's wins
    with pytest.raises(ConfigError, match=r"explorer.rollout_model.gpu_memory_utilization: "
                                          r"must be within \(0, 1\], got 1.5"):
        build_stages(plain(tmp_path, tiny_model_dir, **{
            "explorer.rollout_model.gpu_memory_utilization": 1.5}), registry)


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
                                                                  monkeypatch):
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
             plugins=[SleepRecordingPlugin()], steps=1)
    assert asleep_at_build == [{"weights", "kv_cache"}]
    events = SleepRecordingHF.built[-1].events
    first = events.index("generate")
    assert events[:first] == ["sleep", "wake weights", "wake kv_cache"], events
    assert events[-4:] == ["sleep", "wake weights", "load", "wake kv_cache"], events
