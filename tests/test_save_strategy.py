"""``trainer.save_strategy``: the ranks of a sharded trainer write a checkpoint all at once
(``unrestricted``), one after another (``single_process`` / ``single_thread``) or node
after node (``single_node``); what they write is the same under every strategy.

The save of the tiny model takes milliseconds, too short for two ranks' writes to be seen
overlapping, so :func:`_slow_writes` adds a fixed delay to every write of DCP's file-system
writer inside the rank processes (a test-only delay; the turns, barriers and files are
rft's and torch's own).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import pytest
import torch
from ray import cloudpickle
from rft.errors import RftError
from rft.trainer.save_turns import SAVE_STRATEGIES, SaveWindow, save_turns
from rft.trainer.sharded_checkpoint import sharded_marker
from rft.trainer.torch_trainer import TorchTrainer
from test_multi_rank import RAGGED, max_difference, plan_of, registry, rollouts  # noqa: F401

cloudpickle.register_pickle_by_value(sys.modules[__name__])

DELAY_S = 1.0
"""Seconds added to each rank's write (see the module docstring)."""


def test_turns_of_each_strategy():
    nodes = ["n1", "n1", "n2", "n2", "n3"]
    assert save_turns("unrestricted", nodes) == [0, 0, 0, 0, 0]
    assert save_turns("single_node", nodes) == [0, 0, 1, 1, 2]
    assert save_turns("single_process", nodes) == [0, 1, 2, 3, 4]
    assert save_turns("single_thread", nodes) == [0, 1, 2, 3, 4]
    assert save_turns("single_node", ["b", "a"]) == [0, 1]  # nodes in rank order


def test_save_strategy_is_consumed_without_a_warning():
    from rft.config.schema import RftConfig, TrainerConfig
    from rft.config.support import support_messages

    for strategy in SAVE_STRATEGIES:
        config = RftConfig(trainer=TrainerConfig(save_strategy=strategy))
        assert support_messages(config) == ([], [])


def _slow_writes(rank: Any, seconds: float, fail: bool = False) -> None:
    """Run on every rank: DCP's file-system writes take ``seconds`` more (``fail``: rank 1's
    write raises instead)."""
    from torch.distributed.checkpoint import FileSystemWriter
    from torch.distributed.checkpoint.filesystem import _FileSystemWriter

    original = _FileSystemWriter.write_data

    def write_data(self: Any, plan: Any, planner: Any) -> Any:
        if fail and rank.rank == 1:
            raise OSError(28, "No space left on device")
        time.sleep(seconds)
        return original(self, plan, planner)

    FileSystemWriter.write_data = write_data  # type: ignore[method-assign]


def _overlap(windows: list[SaveWindow]) -> bool:
    first, second = sorted(windows, key=lambda w: w.start)
    return second.start < first.end


@pytest.fixture(scope="module")
def ray_two_cpus():
    import ray

    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1",
             namespace="rft-save-strategy",
             runtime_env={"env_vars": {"OMP_NUM_THREADS": "1"}})
    yield
    ray.shutdown()


@pytest.mark.slow
def test_ranks_write_in_the_turns_of_the_strategy(ray_two_cpus, registry, tmp_path,  # noqa: F811
                                                  tiny_model_dir):
    plan = plan_of(registry, tmp_path, tiny_model_dir, 2,
                   trainer={"save_strategy": "single_process"})
    two = TorchTrainer(plan)
    try:
        two.train_step(rollouts(RAGGED, seed=3))  # Adam moments to save, not zeros
        two.call_all(_slow_writes, DELAY_S)
        windows: dict[str, list[SaveWindow]] = {}
        for strategy in (None, *SAVE_STRATEGIES):  # None: the plan's (single_process)
            folder = tmp_path / f"{strategy}" / "trainer_sharded"
            started = time.time()
            windows[str(strategy)] = two.save_sharded(str(folder), strategy)
            took = time.time() - started
            assert sorted(os.listdir(folder)) == [".metadata", "__0_0.distcp", "__1_0.distcp",
                                                  "rank0.sha256.json", "rank1.sha256.json",
                                                  "rng_rank0.pt", "rng_rank1.pt"]
            assert [w.rank for w in windows[str(strategy)]] == [0, 1]
            assert all(w.end - w.start >= DELAY_S for w in windows[str(strategy)])
            serial = strategy in (None, "single_process", "single_thread")
            assert took >= (2 * DELAY_S if serial else DELAY_S), (strategy, took)
        for strategy in ("None", "single_process", "single_thread"):  # rank 0, then rank 1
            first, second = windows[strategy]
            assert (first.turn, second.turn) == (0, 1)
            assert second.start >= first.end, (strategy, windows[strategy])
        for strategy in ("unrestricted", "single_node"):  # one node: together
            assert [w.turn for w in windows[strategy]] == [0, 0]
            assert _overlap(windows[strategy]), (strategy, windows[strategy])
        # the same checkpoint under every strategy
        from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

        states = {}
        for strategy in SAVE_STRATEGIES:
            out = tmp_path / f"{strategy}.pt"
            dcp_to_torch_save(str(tmp_path / strategy / "trainer_sharded"), str(out))
            states[strategy] = _flat(torch.load(out, weights_only=False))
        reference = states["unrestricted"]
        assert any("optimizer" in key for key in reference)
        for strategy, state in states.items():
            assert state.keys() == reference.keys(), strategy
            for key, value in state.items():
                if isinstance(value, torch.Tensor):
                    assert torch.equal(value, reference[key]), (strategy, key)
                else:
                    assert value == reference[key], (strategy, key)
        # a one-process trainer resumes from a serialised save with the same parameters
        one = TorchTrainer(plan_of(registry, tmp_path, tiny_model_dir, 1))
        one.load_state_dict(sharded_marker(str(tmp_path / "single_process"), 2,
                                           two.global_steps))
        assert max_difference(one.named_weights(), two.named_weights()) == 0.0
        # a rank whose write fails in its turn: one line, no rank left waiting in a turn
        two.call_all(_slow_writes, 0.0, True)
        started = time.time()
        with pytest.raises(RftError, match="No space left on device"):
            two.save_sharded(str(tmp_path / "failed" / "trainer_sharded"), "single_process")
        assert time.time() - started < 60
    finally:
        two.close()


def _flat(tree: Any, prefix: str = "") -> dict[str, Any]:
    """``{"a.b.c": leaf}`` of a nested state dict."""
    if not isinstance(tree, dict):
        return {prefix: tree}
    out: dict[str, Any] = {}
    for key, value in tree.items():
        out.update(_flat(value, f"{prefix}{key}."))
    return out
