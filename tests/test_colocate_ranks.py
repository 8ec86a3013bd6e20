"""Mode ``colocate`` on N devices (veRL's hybrid engine) on this CPU machine: N FSDP2 trainer
ranks (Ray actors over gloo), each with its own ``hf`` rollout engine
(:mod:`rft.distributed.colocate_ranks`).

- How an engine call is split over the ranks' engines, and the validation of the split.
- A GRPO run on 2 ranks trains 3 steps: the placement is printed, reward metrics are
  logged, both ranks' engines explore at every step, and after every sync each rank's
  engine gives the trainer's log-probs. Its engine records a sleep mode (the real one is
  vLLM's on CUDA, which does not run here): every rank's engine sleeps before each train
  step and wakes its weights, then its KV cache, around the weight load.
- Greedy rollouts make exploring independent of how calls are split, so a 2-rank run must
  equal a 1-rank run: the same rollouts and parameters within 1e-6 after one step.
  (Sampled rollouts differ: each rank's share samples with its own seed, ``seed + j``.)
  The algorithm is REINFORCE++, whose advantages are whitened over the batch: GRPO's
  group advantages are all zero when every rollout of a group is the same greedy reply.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from ray import cloudpickle
from rft.config import build_stages
from rft.distributed.colocate_ranks import ENGINE, shares
from rft.errors import ConfigError, RftError
from rft.engines.engine import SamplingArgs
from rft.engines.hf_engine import HFEngine
from rft.hookspecs import hookimpl
from rft.modes.colocate import ColocateStage
from rft.plugins import PluginRegistry
from rft.testing.runs import TextRewardPlugin, run_tiny, tiny_run_config, write_taskset

# the test engine and probe run in the trainer ranks: pickle them by value (Ray's workers
# cannot import this test module)
cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def ray_two_cpus():
    import ray

    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1",
             namespace="rft-colocate-ranks",
             runtime_env={"env_vars": {"OMP_NUM_THREADS": "1"}})
    yield
    ray.shutdown()


# ---- the split of an engine call -----------------------------------------------------------


def test_a_call_is_split_in_contiguous_shares_one_per_rank():
    assert shares(5, 2, 2) == [(range(3), 2), (range(3, 5), 2)]
    assert shares(3, 1, 4) == [(range(1), 1), (range(1, 2), 1), (range(2, 3), 1)]
    assert shares(4, 8, 1) == [(range(4), 8)]
    # one prompt: its samples are split instead (one engine would do all the work)
    assert shares(1, 5, 2) == [(range(1), 3), (range(1), 2)]
    assert shares(1, 1, 2) == [(range(1), 1)]


# ---- validation ------------------------------------------------------------------------------


def plain(tmp_path: Path, model: Path, **changes: Any) -> dict[str, Any]:
    config = tiny_run_config(model, write_taskset(tmp_path / "tasks.jsonl"), tmp_path)
    for dotted, value in changes.items():
        *parents, last = dotted.split(".")
        node = config
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return config


def test_colocate_derives_one_rank_per_device_and_rejects_impossible_splits(tmp_path,
                                                                           tiny_model_dir):
    registry = PluginRegistry.create()
    loaded = build_stages(plain(tmp_path, tiny_model_dir, **{"trainer.cpu_ranks": 2}), registry)
    assert loaded.stages[0].config.trainer.ranks == 2 and loaded.warnings == []
    gpus = build_stages(plain(tmp_path, tiny_model_dir, **{
        # GPU nodes of a cluster (not this machine's)
        "cluster": {"node_num": 2, "gpu_per_node": 4, "ray_address": "10.0.0.1:6379"},
        "buffer.batch_size": 4}), registry)
    assert gpus.stages[0].config.trainer.ranks == 8  # a rank and its engine on every GPU
    with pytest.raises(ConfigError, match=r"^trainer.ranks: 8 trainer ranks need at least 8 "
                                          r"rows per mini-batch \(optimizer step\), got 4 rows"):
        build_stages(plain(tmp_path, tiny_model_dir,
                           cluster={"node_num": 2, "gpu_per_node": 4,
                                    "ray_address": "10.0.0.1:6379"}), registry)
    with pytest.raises(ConfigError, match=r"explorer.rollout_model.engine_num: mode 'colocate' "
                                          r"runs one engine per device \(per trainer rank\)"):
        build_stages(plain(tmp_path, tiny_model_dir, **{
            "trainer.cpu_ranks": 2, "explorer.rollout_model.engine_num": 2}), registry)
    with pytest.raises(ConfigError, match=r"trainer.cpu_ranks: 999 trainer ranks need one CPU "
                                          r"each but the cluster has \d+"):
        build_stages(plain(tmp_path, tiny_model_dir, **{"trainer.cpu_ranks": 999}), registry)


# ---- a GRPO run on 2 ranks -------------------------------------------------------------------


class SleepRecordingHF(HFEngine):
    """The ``hf`` engine with a sleep mode that only records (vLLM's real one needs CUDA):
    it refuses to generate or load weights while what that needs is asleep."""

    sleep_mode = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.events: list[str] = []
        self.asleep: set[str] = set()

    def sleep(self) -> None:
        self.events.append("sleep")
        self.asleep = {"weights", "kv_cache"}

    def wake_up(self, tags: tuple[str, ...] | None = None) -> None:
        self.events.append(f"wake {','.join(tags or ('all',))}")
        self.asleep -= set(tags) if tags else self.asleep

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        if self.asleep:
            raise RuntimeError(f"generate while {sorted(self.asleep)} asleep")
        completions = super().generate(*args, **kwargs)
        self.events.append("generate")
        return completions

    def update_weights(self, *args: Any, **kwargs: Any) -> None:
        if "weights" in self.asleep:
            raise RuntimeError("update_weights while the weights are asleep")
        self.events.append("load")
        super().update_weights(*args, **kwargs)


class SleepRecordingPlugin:
    @hookimpl
    def register_engines(self) -> dict[str, Any]:
        return {"sleep_recording_hf": SleepRecordingHF}


def probe(rank: Any, tokens: list[int], prompt_length: int) -> dict[str, Any]:
    """On every rank (a collective: the actor's forward gathers its FSDP2 shards): the
    trainer's log-probs of ``tokens``' response, this rank's engine's, and what the engine
    did since the last probe."""
    engine = rank.scratch[ENGINE].engine
    ids = torch.tensor([tokens])
    with torch.no_grad():
        logits = rank.trainer.actor(input_ids=ids, use_cache=False).logits.float()  # (1, L, V)
    logps = torch.log_softmax(logits[0, prompt_length - 1:-1], dim=-1)  # (R, V)
    trainer = logps.gather(-1, ids[0, prompt_length:, None])[:, 0]  # (R,)
    events, engine.events = engine.events, []
    return {"trainer": trainer, "engine": engine.compute_logprobs([tokens], [prompt_length])[0],
            "version": engine.model_version, "events": events}


@pytest.mark.slow
def test_grpo_on_two_colocated_ranks(ray_two_cpus, tmp_path, tiny_model_dir, monkeypatch, capfd):
    probes: list[list[dict[str, Any]]] = []
    step = ColocateStage.step

    def step_and_probe(self: ColocateStage, number: int) -> None:
        step(self, number)
        if number == 1:  # an engine's own error comes back as it is; the ranks live on
            with pytest.raises(RftError, match=r"^sampling temperature must be >= 0, got -1"):
                self.engine.generate([[1, 2]], SamplingArgs(temperature=-1.0))
        prompt = self.engine.tokenizer("3+1=")["input_ids"]
        probes.append(self.trainer.call_all(probe, prompt + [7, 11, 13, 17, 19], len(prompt)))

    monkeypatch.setattr(ColocateStage, "step", step_and_probe)
    outcome = run_tiny(tiny_model_dir, write_taskset(tmp_path / "tasks.jsonl"), tmp_path, {
        "trainer.cpu_ranks": 2,
        "trainer.trainer_config": {"actor_rollout_ref": {"actor": {"ppo_epochs": 2}}},
        "explorer.concurrent_mode": "multi-threading",
        "explorer.rollout_model.engine_type": "sleep_recording_hf",
        "buffer.explorer_input.taskset.default_reward_fn_type": "text_reward"},
        plugins=[TextRewardPlugin(), SleepRecordingPlugin()], steps=3)

    err = capfd.readouterr().err
    assert re.search(r"rft: trainer 'trainer': 2 FSDP2 ranks over 1 node\(s\), gloo", err), err
    assert ("rft: colocate on 2 devices: 2 trainer ranks, one 'sleep_recording_hf' rollout "
            "engine in each (rank 0: CPU, rank 1: CPU); explore calls split over the 2 engines"
            in err), err[-3000:]
    assert len(outcome.metrics) == 3
    for metrics in outcome.metrics:
        assert {"rollout/reward/mean", "critic/score/mean", "actor/pg_loss"} <= set(metrics)
        # the rollouts of both engines were sampled by the weights the trainer holds
        assert metrics["training/rollout_logprobs_diff_max"] <= 1e-4, metrics
    assert len({m["rollout/reward/mean"] for m in outcome.metrics}) > 1  # a signal to learn
    model_bytes = sum(t.numel() * t.element_size() for t in hf_weights(outcome.job_dir, 3).values())
    assert outcome.metrics[0]["sync/bytes"] == 2 * model_bytes  # the whole model into each engine
    assert len(probes) == 3
    for number, ranks in enumerate(probes, start=1):
        assert len(ranks) == 2
        for result in ranks:
            assert result["version"] == number
            assert (result["engine"] - result["trainer"]).abs().max().item() <= 1e-5
            # each engine explored its share, slept through the train step, then took the
            # new weights: weights awake first, the KV cache once they are in
            events = result["events"]
            assert events[-4:] == ["sleep", "wake weights", "load", "wake kv_cache"], events
            assert events[:-4] and set(events[:-4]) == {"generate"}, events
    # the ranks' engines moved with the trainer
    assert (probes[0][0]["engine"] - probes[-1][0]["engine"]).abs().max().item() > 1e-3


# ---- 2 ranks equal 1 rank --------------------------------------------------------------------


def answer_text_reward(response: str, truth: Any = None) -> dict[str, float]:
    """``(Σ ord(c) + answer) mod 7 / 7``: the tiny model's greedy reply is the same for
    every prompt, so the reward also varies with the task's answer (REINFORCE++ then has
    advantages that are not all zero)."""
    return {"text": float((sum(map(ord, response)) + int(truth)) % 7) / 7.0}


class AnswerTextRewardPlugin:
    @hookimpl
    def register_reward_fns(self) -> dict[str, Any]:
        return {"answer_text_reward": answer_text_reward}


GREEDY = {
    "algorithm": {"algorithm_type": "reinforceplusplus", "repeat_times": 1,
                  "optimizer": {"lr": 1e-4}},
    "model.temperature": 0.0,
    "buffer.batch_size": 4,
    "explorer.concurrent_mode": "multi-threading",
    "buffer.explorer_input.taskset.default_reward_fn_type": "answer_text_reward",
    "trainer.save_interval": 1,
    "trainer.save_hf_checkpoint": "always",
}


def hf_weights(job_dir: Path, step: int) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(job_dir / f"global_step_{step}" / "hf" / "model.safetensors"))


@pytest.mark.slow
def test_greedy_colocate_on_two_ranks_equals_one_rank(ray_two_cpus, tmp_path, tiny_model_dir,
                                                      monkeypatch):
    # the ranks run the model's own forward (sharded); so does the one-process trainer here
    # (its shared-prompt forward agrees to rounding only: tests/test_prefix_packing.py)
    from rft.trainer import models

    monkeypatch.setattr(models, "uses_shared_prompts", lambda *args: False)
    tasks = write_taskset(tmp_path / "tasks.jsonl")
    plugins = [AnswerTextRewardPlugin()]
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    one = run_tiny(tiny_model_dir, tasks, tmp_path / "one", GREEDY, plugins=plugins, steps=2)
    two = run_tiny(tiny_model_dir, tasks, tmp_path / "two", {**GREEDY, "trainer.cpu_ranks": 2},
                   plugins=plugins, steps=2)
    assert "timing_s/step_all_ranks" in two.metrics[0]  # its trainer ran as ranks
    assert "timing_s/step_all_ranks" not in one.metrics[0]
    for m1, m2 in zip(one.metrics, two.metrics, strict=True):
        # the same rollouts: greedy replies do not depend on how the calls were split
        for key in ("rollout/reward/mean", "critic/score/mean", "response_length/mean"):
            assert m2[key] == m1[key], key
        assert m2["actor/pg_loss"] == pytest.approx(m1["actor/pg_loss"], abs=1e-6)
        assert m2["critic/advantages/max"] > 0.1  # a real gradient, not zero advantages
    for step in (1, 2):
        w1, w2 = hf_weights(one.job_dir, step), hf_weights(two.job_dir, step)
        assert sorted(w1) == sorted(w2)
        difference = max((w1[k] - w2[k]).abs().max().item() for k in w1)
        assert difference <= 1e-6, (step, difference)
    # the 2-rank stage checkpoints sharded (every rank its shards) and resumes from them:
    # a third step after the resume equals the uninterrupted 1-rank run's third step
    assert (two.job_dir / "global_step_2" / "trainer_sharded").is_dir()
    resumed = run_tiny(tiny_model_dir, tasks, tmp_path / "two",
                       {**GREEDY, "trainer.cpu_ranks": 2, "continue_from_checkpoint": True},
                       plugins=plugins, steps=3)
    (tmp_path / "one3").mkdir()
    one3 = run_tiny(tiny_model_dir, tasks, tmp_path / "one3", GREEDY, plugins=plugins, steps=3)
    w1, w2 = hf_weights(one3.job_dir, 3), hf_weights(resumed.job_dir, 3)
    assert max((w1[k] - w2[k]).abs().max().item() for k in w1) <= 1e-6
