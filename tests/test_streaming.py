"""``synchronizer.streaming_batches``: a batch is formed of complete groups as soon as there
are enough, in completion order; a group whose last rollout is late is trained in a later
batch (nothing lost, nothing twice); what is held back survives a resume exactly and a
resumed step takes the batch the lost one took."""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path

import pytest
import torch

from rft.buffer.sampling import SampleStrategy, TrainerBuffers
from rft.buffer.sql_storage import SQLStorage
from rft.buffer.staleness import gate_strategy
from rft.buffer.storage import ExperienceStorage, QueueStorage
from rft.buffer.streaming import GROUP_SIZE_INFO, GroupAssembler, assembler_of, stream_strategy
from rft.builtin.sample_strategies import DefaultSampleStrategy
from rft.experience import EID, Experience
from rft.modes.builders import held_state, restore_held
from rft.modes.run_state import RunState


def exp(task: str, run: int, version: int = 0) -> Experience:
    g = torch.Generator().manual_seed(hash((task, run)) % 2**31)
    return Experience(tokens=torch.randint(0, 50, (6,), generator=g), prompt_length=3,
                      reward=float(run), logprobs=-torch.rand(3, generator=g),
                      model_version=version, eid=EID(batch=0, task=task, run=run))


def names(batch: list[Experience]) -> list[str]:
    return [f"{e.eid.task}{e.eid.run}" for e in batch]


def streaming(storage: ExperienceStorage, batch_size: int = 4) -> SampleStrategy:
    return stream_strategy(DefaultSampleStrategy(TrainerBuffers(storage), batch_size=batch_size,
                                                 timeout=5.0), group_size=2)


# B's second rollout is the long one: written last
WRITES = [("A", 0), ("A", 1), ("B", 0), ("C", 0), ("C", 1), ("D", 0), ("D", 1)]


def test_a_late_rollout_does_not_stall_the_batch() -> None:
    storage = QueueStorage("exp")
    storage.write([exp(t, r) for t, r in WRITES])
    strategy = streaming(storage)
    first, metrics = strategy.sample(1, 0)
    assert names(first) == ["A0", "A1", "C0", "C1"]  # B is not complete: not waited for
    assert metrics["streaming/held_experiences"] == 2.0  # B0, D0 (D1 not read yet)
    late = threading.Timer(0.3, lambda: storage.write([exp("B", 1)]))
    late.start()
    second, metrics = strategy.sample(2, 0)  # D completes at once, B when B1 arrives
    late.join()
    assert names(second) == ["D0", "D1", "B0", "B1"]
    assert metrics["streaming/held_experiences"] == 0.0
    trained = names(first) + names(second)
    assert sorted(trained) == sorted(set(trained)) and len(trained) == 8  # all, once each
    assert storage.read_count == 8 and storage.available() == 0


def test_a_group_size_its_writer_records_decides_completeness() -> None:
    """Serve episodes carry their size: a 3-experience episode is one group although
    ``repeat_times`` is 2, and a 1-experience episode is complete alone."""
    assembler = GroupAssembler(2)
    sized = [exp("a", 0), exp("a", 1), exp("a", 2), exp("b", 0)]
    for e, size in zip(sized, [3, 3, 3, 1], strict=True):
        e.info[GROUP_SIZE_INFO] = size
    assembler.add(sized[:2])
    assert assembler.ready_count == 0 and assembler.held_count == 2
    assembler.add(sized[2:])
    assert names(assembler.take(4)) == ["a0", "a1", "a2", "b0"]


def test_without_streaming_the_oldest_are_taken_in_write_order() -> None:
    storage = QueueStorage("exp")
    storage.write([exp(t, r) for t, r in WRITES])
    strategy = stream_strategy(DefaultSampleStrategy(TrainerBuffers(storage), batch_size=4,
                                                     timeout=5.0), group_size=None)
    assert names(strategy.sample(1, 0)[0]) == ["A0", "A1", "B0", "C0"]
    assert assembler_of(strategy) is None and storage.assembler is None


def test_idle_writers_release_an_incomplete_group() -> None:
    """A run that failed or was cut off: once the writers are idle with nothing left, the
    incomplete group is trained as it is rather than held forever."""
    storage = QueueStorage("exp")
    storage.write([exp("A", 0), exp("B", 0), exp("A", 1)])
    storage.writers_idle()
    strategy = streaming(storage)
    batch, metrics = strategy.sample(1, 0)
    assert names(batch) == ["A0", "A1", "B0"] and metrics["streaming/held_experiences"] == 0.0


def test_a_group_that_lost_a_run_is_released_by_the_next_explore_step() -> None:
    """Mode both: writers are never idle. Task B's second run failed at explore step 0; the
    first experience of step 1 releases B as it is, so it is not held forever."""
    storage = QueueStorage("exp")
    storage.write([exp("A", 0), exp("A", 1), exp("B", 0)])
    late = Experience(tokens=torch.arange(6), prompt_length=3, reward=0.0,
                      logprobs=torch.zeros(3), eid=EID(batch=1, task="C", run=0))
    storage.write([late])
    strategy = streaming(storage, batch_size=3)
    batch, metrics = strategy.sample(1, 0)
    assert names(batch) == ["A0", "A1", "B0"] and metrics["streaming/held_experiences"] == 1.0


def test_a_read_that_waited_its_timeout_trains_the_incomplete_group(caplog) -> None:
    """The last explore step of a mode-both run: no later step, writers never idle."""
    storage = QueueStorage("exp")
    storage.write([exp("A", 0), exp("A", 1), exp("B", 0)])
    strategy = stream_strategy(DefaultSampleStrategy(TrainerBuffers(storage), batch_size=4,
                                                     timeout=0.2), group_size=2)
    batch, metrics = strategy.sample(1, 0)
    assert names(batch) == ["A0", "A1", "B0"] and metrics["streaming/held_experiences"] == 0.0
    assert "1 experience(s) of incomplete groups are trained as they are" in caplog.text


def test_stale_members_are_dropped_when_their_group_is_released() -> None:
    """With max_staleness too, ages are judged when a group is released for training."""
    storage = QueueStorage("exp")
    storage.write([exp("A", 0, 0), exp("A", 1, 3), exp("B", 0, 3), exp("B", 1, 3),
                   exp("C", 0, 3), exp("C", 1, 3)])
    strategy = gate_strategy(streaming(storage), max_staleness=1)
    batch, metrics = strategy.sample(1, 3)
    assert names(batch) == ["A1", "B0", "B1"]  # C does not fit: whole groups only
    assert metrics["staleness/dropped"] == 1.0 and assembler_of(strategy) is not None


def assert_same(a: list[Experience], b: list[Experience]) -> None:
    assert names(a) == names(b)
    for x, y in zip(a, b, strict=True):
        assert torch.equal(x.tokens, y.tokens) and x.logprobs is not None
        assert y.logprobs is not None and torch.equal(x.logprobs, y.logprobs)
        assert x.model_version == y.model_version and x.reward == y.reward


def test_held_back_groups_survive_the_run_state_exactly(tmp_path: Path) -> None:
    assembler = GroupAssembler(2)
    held = [exp("A", 0), exp("B", 1), exp("B", 0), exp("C", 0)]
    assembler.add(held)
    path = str(tmp_path / "state.json")
    RunState(held_experiences=assembler.state()).write(path)
    saved = RunState.read(path, "state")
    assert saved is not None
    json.dumps(saved.held_experiences)  # JSON all the way
    restored = GroupAssembler(2)
    restored.load(saved.held_experiences)
    assert list(restored.pending) == list(assembler.pending)
    assert_same([e for g in restored.ready for e in g], [e for g in assembler.ready for e in g])
    assert_same([e for g in restored.pending.values() for e in g],
                [e for g in assembler.pending.values() for e in g])


def test_a_resumed_step_takes_the_lost_steps_batch_and_nothing_twice(tmp_path: Path) -> None:
    """Step 1 trains A, C (holding B0, D0), its checkpoint saves the held-back state; step 2
    reads D1 and the late B1, trains D, B, and the trainer dies before the checkpoint of
    step 2. The resumed trainer (checkpoint of step 1: leases of step 2 come back, held
    state restored) trains exactly D, B at step 2; A and C are never read again."""
    db = str(tmp_path / "exp.db")
    storage = SQLStorage("exp", db)
    storage.write([exp(t, r) for t, r in WRITES])
    strategy = streaming(storage)
    storage.lease_reads(1)
    first = strategy.sample(1, 0)[0]
    state_file = str(tmp_path / "state.json")
    RunState(step=1, held_experiences=held_state(strategy)).write(state_file)  # checkpoint
    storage.commit_leases(1)
    storage.write([exp("B", 1)])
    storage.lease_reads(2)
    lost = strategy.sample(2, 0)[0]
    assert names(first) == ["A0", "A1", "C0", "C1"] and names(lost) == ["D0", "D1", "B0", "B1"]
    storage.close()  # the trainer dies: no checkpoint of step 2

    resumed_storage = SQLStorage("exp", db)
    _, returned = resumed_storage.recover_leases(1)
    assert returned == 2  # D1, B1 (B0, D0 were read at step 1: they come from the state)
    resumed = streaming(resumed_storage)
    state = RunState.read(state_file, "state")
    assert state is not None
    restore_held(resumed, state)
    resumed_storage.lease_reads(2)
    again = resumed.sample(2, 0)[0]
    assert_same(again, lost)
    resumed_storage.writers_idle()
    assert resumed_storage.available() == 0
    resumed_storage.close()


@pytest.mark.slow
def test_a_colocate_run_with_every_async_setting_resumes_exactly(tmp_path: Path,
                                                                 tiny_model_dir: Path) -> None:
    """GRPO in mode colocate with streaming batches, ``max_staleness: 0`` and a token-level
    correction: every step logs the three features' metrics, and a run stopped after step
    2 and resumed to step 4 logs the trainer metrics of the uninterrupted 4-step run."""
    from fixtures_models import arithmetic_tasks
    from test_embedded_run import write_config

    from rft.config import load_config
    from rft.launcher import run

    settings = {"synchronizer__streaming_batches": True, "synchronizer__max_staleness": 0,
                "algorithm__rollout_correction": {"rollout_is": "token",
                                                  "rollout_rs": "seq_mean_k1",
                                                  "rollout_rs_threshold": "0.5_2.0"}}

    def trainer_records(root: Path, steps: list[int]) -> list[dict[str, float]]:
        for total in steps:
            assert run(load_config(write_config(root, tiny_model_dir, tasks, **settings,
                                                buffer__total_steps=total))) == 0
        lines = (root / "ck" / "e2e" / "run" / "monitor" / "trainer.jsonl").read_text()
        return [json.loads(line) for line in lines.splitlines()]

    tasks = arithmetic_tasks(tmp_path, 8)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    whole = trainer_records(tmp_path / "a", [4])
    resumed = trainer_records(tmp_path / "b", [2, 4])
    assert [r["step"] for r in whole] == [r["step"] for r in resumed] == [1, 2, 3, 4]
    for record in whole:
        metrics = record["metrics"]
        assert metrics["staleness/dropped"] == 0.0 and metrics["staleness/age_0"] == 4.0
        assert metrics["streaming/held_experiences"] == 0.0
        assert "rollout_corr/rollout_is_mean" in metrics and "rollout_corr/kl" in metrics
    timing = re.compile(r"^(timing_s|perf)/")
    for a, b in zip(whole, resumed, strict=True):
        assert {k: v for k, v in a["metrics"].items() if not timing.match(k)} == \
            {k: v for k, v in b["metrics"].items() if not timing.match(k)}
