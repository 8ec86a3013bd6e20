"""``synchronizer.max_staleness``: the trainer's buffer reads drop experiences older than the
bound and read fresh ones in their place, count them (``staleness/dropped``) and log the
age histogram of every batch (``staleness/age_<k>``); an experience's age is that of its
oldest token; a lease that a crashed trainer never committed is dropped again the same
way on resume (nothing trained twice)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rft.buffer.sampling import TrainerBuffers
from rft.buffer.sql_storage import SQLStorage
from rft.buffer.staleness import StalenessGate, age_of, gate_strategy
from rft.buffer.storage import BufferEmpty, BufferTimeout, QueueStorage
from rft.builtin.sample_strategies import DefaultSampleStrategy
from rft.config import build_stages
from rft.errors import ConfigError
from rft.experience import EID, Experience
from rft.plugins import PluginRegistry
from rft.testing.runs import apply_overrides


def exp(i: int, version: int) -> Experience:
    return Experience(tokens=torch.tensor([1, 2, 3, 4]), prompt_length=2, reward=float(i),
                      logprobs=torch.zeros(2), model_version=version,
                      eid=EID(batch=0, task=i, run=0))


def test_stale_experiences_are_replaced_by_fresh_ones() -> None:
    storage = QueueStorage("exp")
    versions = [5, 1, 4, 2, 5, 3, 4]  # at version 5, max 1: ages 0 4 1 3 0 2 1
    storage.write([exp(i, v) for i, v in enumerate(versions)])
    strategy = gate_strategy(DefaultSampleStrategy(TrainerBuffers(storage), batch_size=3,
                                                   timeout=1.0), max_staleness=1)
    batch, metrics = strategy.sample(step=1, model_version=5)
    assert [e.reward for e in batch] == [0.0, 2.0, 4.0]  # 1 and 3 dropped, read on to 4
    assert metrics["staleness/dropped"] == 2.0
    assert metrics["staleness/age_0"] == 2.0 and metrics["staleness/age_1"] == 1.0
    assert storage.read_count == 5 and storage.available() == 2
    storage.writers_idle()
    batch, metrics = strategy.sample(step=2, model_version=5)  # 5 (age 2) dropped, then 6
    assert [e.reward for e in batch] == [6.0]
    assert metrics == {"sample/staleness_mean": 1.0, "sample/staleness_max": 1.0,
                       "staleness/dropped": 1.0, "staleness/age_1": 1.0}


def test_an_experience_is_as_old_as_its_oldest_token() -> None:
    """Partial rollouts resumed across a sync: per-token versions, the oldest counts."""
    resumed = exp(0, 7)
    resumed.token_versions = torch.tensor([4, 4, 7, 7])  # type: ignore[attr-defined]
    assert age_of(resumed, 7) == 3
    assert age_of(exp(1, 7), 7) == 0
    gate = StalenessGate(max_staleness=2, version=7)
    assert [e.reward for e in gate([resumed, exp(1, 5)])] == [1.0]
    assert gate.dropped == 1 and gate.dropped_ages == {3: 1}


def test_staleness_mean_is_the_age_of_the_oldest_token() -> None:
    """``sample/staleness_{mean,max}`` measure a resumed partial rollout by its oldest
    token, as ``max_staleness`` does, not by the version that finished it."""
    resumed = exp(0, 7)
    resumed.token_versions = torch.tensor([4, 7])
    storage = QueueStorage("exp")
    storage.write([resumed, exp(1, 6)])
    strategy = DefaultSampleStrategy(TrainerBuffers(storage), batch_size=2, timeout=1.0)
    _, metrics = strategy.sample(step=1, model_version=7)
    assert metrics == {"sample/staleness_mean": 2.0, "sample/staleness_max": 3}


def test_without_a_bound_nothing_changes() -> None:
    storage = QueueStorage("exp")
    strategy = DefaultSampleStrategy(TrainerBuffers(storage), batch_size=2, timeout=1.0)
    assert gate_strategy(strategy, None) is strategy and storage.read_filter is None


def test_idle_writers_give_what_is_fresh_and_all_stale_is_one_line() -> None:
    storage = QueueStorage("exp")
    storage.write([exp(0, 0), exp(1, 3), exp(2, 0)])
    storage.read_filter = StalenessGate(max_staleness=0, version=3)
    storage.writers_idle()
    assert [e.reward for e in storage.read(3, 1.0)] == [1.0]
    storage.write([exp(3, 0)])
    storage.writers_idle()
    with pytest.raises(BufferEmpty, match=r"^experience buffer 'exp': empty and no writer will "
                                          r"add experiences \(written 4, read 4, dropped 3 as "
                                          r"stale\)$"):
        storage.read(1, 1.0)


def test_a_read_waiting_for_fresh_experiences_times_out_in_one_line() -> None:
    storage = QueueStorage("exp")
    storage.write([exp(0, 0), exp(1, 2)])
    storage.read_filter = StalenessGate(max_staleness=0, version=2)
    with pytest.raises(BufferTimeout, match=r"waited [0-9.]+ s for 1 experiences, 0 available "
                                            r"\(written 2, read 2, dropped 1 as stale\)"):
        storage.read(2, 0.2)


def test_dropped_reads_of_a_lost_step_are_dropped_again_on_resume(tmp_path: Path) -> None:
    """A trainer dies after reading step 2 (dropping two stale rows) before its checkpoint:
    the resumed trainer (checkpoint of step 1, same version) gets the rows back and takes
    exactly the same batch; the rows of step 1 are never read again."""
    path = str(tmp_path / "exp.db")
    storage = SQLStorage("exp", path)
    storage.write([exp(i, v) for i, v in enumerate([1, 1, 0, 0, 1, 1, 1])])

    def run(storage: SQLStorage, step: int) -> list[float]:
        strategy = gate_strategy(DefaultSampleStrategy(TrainerBuffers(storage), batch_size=2,
                                                       timeout=1.0), max_staleness=0)
        storage.lease_reads(step)
        return [e.reward for e in strategy.sample(step, model_version=1)[0]]

    assert run(storage, 1) == [0.0, 1.0]
    storage.commit_leases(1)  # global_step_1 saved
    lost = run(storage, 2)
    assert lost == [4.0, 5.0]  # 2, 3 dropped
    storage.close()
    resumed = SQLStorage("exp", path)
    made_final, returned = resumed.recover_leases(1)
    assert returned == 4
    assert run(resumed, 2) == lost
    resumed.commit_leases(2)
    resumed.writers_idle()
    assert run(resumed, 3) == [6.0]
    resumed.close()


def plain(tmp_path: Path, **overrides: object) -> dict[str, object]:
    base = {"mode": "train", "checkpoint_root_dir": str(tmp_path / "ck"),
            "algorithm": {"algorithm_type": "grpo", "repeat_times": 2},
            "model": {"model_path": str(tmp_path)},
            "buffer": {"batch_size": 2, "total_steps": 1, "trainer_input": {
                "experience_buffer": {"name": "exp", "storage_type": "sql",
                                      "path": str(tmp_path / "exp.db")}}},
            "synchronizer": {"sync_method": "checkpoint"}}
    return apply_overrides(base, overrides)


@pytest.mark.parametrize("key,value,line", [
    ("synchronizer.max_staleness", -1, "synchronizer.max_staleness: must be >= 0, got -1"),
    ("synchronizer.staleness_policy", "regenerate",
     "synchronizer.staleness_policy: regenerate: no task source hands a task back for "
     "regeneration yet; use drop"),
])
def test_bad_values_are_one_line(tmp_path: Path, key: str, value: object, line: str) -> None:
    with pytest.raises(ConfigError) as caught:
        build_stages(plain(tmp_path, **{key: value}), PluginRegistry.create(
            allow=["rft-plugin-grpo"]))
    assert [p for p in caught.value.problems if p.startswith(key)] == [line]


def test_the_trainer_of_a_run_reads_through_the_gate(tmp_path: Path, tiny_model_dir: Path) -> None:
    """``build_trainer`` (modes train, colocate and both's trainer actor) applies the
    section: the strategy's buffer reads are gated, and stream when asked."""
    from rft.buffer.staleness import StalenessGatedStrategy
    from rft.buffer.streaming import assembler_of
    from rft.modes.builders import build_trainer

    registry = PluginRegistry.create(allow=["rft-plugin-grpo"])
    config = plain(tmp_path, **{"model.model_path": str(tiny_model_dir),
                                "model.max_prompt_tokens": 16, "model.max_response_tokens": 8,
                                "trainer.trainer_config": {"torch": {"device": "cpu"}},
                                "synchronizer.max_staleness": 2,
                                "synchronizer.streaming_batches": True})
    plan = build_stages(config, registry).stages[0].plan
    storage = QueueStorage("exp")
    trainer, strategy = build_trainer(plan, storage, steps=1)
    try:
        assert isinstance(strategy, StalenessGatedStrategy)
        assert isinstance(storage.read_filter, StalenessGate)
        assert storage.read_filter.max_staleness == 2
        assembler = assembler_of(strategy)
        assert assembler is not None and storage.assembler is assembler
        assert assembler.group_size == 2  # algorithm.repeat_times
    finally:
        trainer.close()
