"""Experience storages (queue, SQLite, jsonl) and the built-in sample strategies."""

from __future__ import annotations

import threading
import time

import pytest
import torch
from rft.buffer.sampling import TrainerBuffers
from rft.buffer.storage import BufferEmpty, BufferTimeout, open_storage
from rft.errors import RftError
from rft.experience import EID, Experience
from rft.plugins import PluginRegistry


def make(i: int, version: int = 0) -> Experience:
    return Experience(tokens=torch.tensor([1, 2, 3 + i, 4]), prompt_length=2, reward=float(i),
                      logprobs=torch.tensor([-0.5, -0.25]),
                      eid=EID(batch=0, task=i, run=0, step=1),
                      model_version=version, info={"i": i}, metrics={"m": 1.0},
                      response_text=f"text {i}", teacher_logprobs=torch.tensor([-1.5, -0.75]))


@pytest.fixture(params=["queue", "queue+db", "sql", "file"])
def storage(request, tmp_path):
    kind = request.param
    if kind == "queue":
        store = open_storage("queue", "buf", None)
    elif kind == "queue+db":
        store = open_storage("queue", "buf", f"sqlite:///{tmp_path}/mirror.db")
    else:
        store = open_storage(kind, "buf", str(tmp_path / f"buf.{kind}"))
    yield store
    store.close()


def test_fifo_roundtrip_and_counts(storage):
    storage.write([make(0), make(1), make(2)])
    first = storage.read(2, timeout=1)
    storage.write([make(3)])
    second = storage.read(2, timeout=1)
    assert [e.info["i"] for e in first + second] == [0, 1, 2, 3]
    exp = second[0]
    assert exp.tokens.tolist() == [1, 2, 5, 4] and exp.prompt_length == 2
    assert exp.logprobs.tolist() == [-0.5, -0.25] and exp.action_mask.dtype == torch.bool
    assert exp.eid == EID(batch=0, task=2, run=0, step=1)
    assert exp.teacher_logprobs.tolist() == [-1.5, -0.75]
    assert exp.response_text == "text 2"
    assert (storage.written, storage.read_count, storage.available()) == (4, 4, 0)


def test_timeout_names_the_buffer_and_takes_nothing(storage):
    storage.write([make(0)])
    with pytest.raises(BufferTimeout, match=r"experience buffer 'buf': waited 0.05 s for 2 "
                                            r"experiences, 1 available \(written 1, read 0\)"):
        storage.read(2, timeout=0.05)
    assert storage.available() == 1


def test_reader_waits_for_a_writer(storage):
    threading.Timer(0.1, lambda: storage.write([make(5), make(6)])).start()
    started = time.monotonic()
    got = storage.read(2, timeout=5)
    assert [e.info["i"] for e in got] == [5, 6]
    assert time.monotonic() - started >= 0.05


def test_sql_storage_is_durable_across_reopen(tmp_path):
    path = str(tmp_path / "exp.db")
    first = open_storage("sql", "buf", path)
    first.write([make(0), make(1), make(2)])
    assert len(first.read(1, timeout=1)) == 1
    first.close()
    reopened = open_storage("sql", "buf", path)
    assert [e.info["i"] for e in reopened.read(2, timeout=1)] == [1, 2]
    reopened.close()


def test_queue_mirror_keeps_everything_written(tmp_path):
    path = str(tmp_path / "mirror.db")
    queue = open_storage("queue", "buf", path)
    queue.write([make(0), make(1)])
    queue.read(2, timeout=1)
    queue.close()
    assert open_storage("sql", "copy", path).available() == 2


def test_unwritable_location_is_a_clear_error(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("x")
    with pytest.raises(RftError, match="experience buffer 'buf': cannot open SQLite file"):
        open_storage("sql", "buf", str(blocked / "sub" / "x.db"))


def test_idle_writers_make_a_short_read_at_once_and_an_empty_one_an_error(storage):
    """Colocate mode: once the explorer's step is over (``writers_idle``) the trainer takes
    what is there rather than waiting out its timeout; the next write lifts that."""
    storage.write([make(0), make(1)])
    storage.writers_idle()
    started = time.monotonic()
    assert [e.info["i"] for e in storage.read(5, timeout=60)] == [0, 1]
    with pytest.raises(BufferEmpty, match=r"experience buffer 'buf': empty and no writer "
                                          r"will add experiences \(written 2, read 2\)"):
        storage.read(1, timeout=60)
    assert time.monotonic() - started < 5
    storage.write([make(2)])
    with pytest.raises(BufferTimeout):  # writers active again: waits, then times out
        storage.read(2, timeout=0.05)


def test_staleness_strategy_with_idle_writers_returns_a_short_batch():
    registry = PluginRegistry.create()
    store = open_storage("queue", "buf", None)
    strategy_cls = registry.get("sample_strategy", "staleness_control")
    strategy = strategy_cls(TrainerBuffers(store), batch_size=4, timeout=60,
                            args=strategy_cls.Args(1))
    store.write([make(0, version=0), make(1, version=3), make(2, version=3)])
    store.writers_idle()
    batch, metrics = strategy.sample(step=1, model_version=3)
    assert [e.info["i"] for e in batch] == [1, 2] and metrics["sample/dropped_stale"] == 1.0
    store.write([make(3, version=0)])
    store.writers_idle()
    with pytest.raises(BufferEmpty, match="all 1 experiences read were more than 1 weight"):
        strategy.sample(step=2, model_version=3)


def test_default_and_staleness_strategies_through_the_registry():
    registry = PluginRegistry.create()
    store = open_storage("queue", "buf", None)
    buffers = TrainerBuffers(store)
    default = registry.get("sample_strategy", "default")(buffers, batch_size=2, timeout=1)
    store.write([make(0, version=1), make(1, version=3)])
    batch, metrics = default.sample(step=1, model_version=3)
    assert [e.info["i"] for e in batch] == [0, 1]
    assert metrics == {"sample/staleness_mean": 1.0, "sample/staleness_max": 2}

    strategy_cls = registry.get("sample_strategy", "staleness_control")
    strategy = strategy_cls(buffers, batch_size=2, timeout=1, args=strategy_cls.Args(1))
    store.write([make(2, version=0), make(3, version=2), make(4, version=3)])
    batch, metrics = strategy.sample(step=2, model_version=3)
    assert [e.info["i"] for e in batch] == [3, 4]
    assert metrics["sample/dropped_stale"] == 1.0


def _every_field_experience() -> Experience:
    g = torch.Generator().manual_seed(0)
    return Experience(tokens=torch.randint(0, 900, (12,), generator=g), prompt_length=5,
                      reward=0.5, token_level_reward=torch.randn(7, generator=g),
                      logprobs=torch.randn(7, generator=g),
                      action_mask=torch.tensor([1, 1, 0, 1, 1, 1, 0], dtype=torch.bool),
                      advantages=torch.randn(7, generator=g).to(torch.bfloat16),
                      returns=torch.randn(7, generator=g, dtype=torch.float64)[::1],
                      eid=EID(3, 1, 2, 5, "t0"), model_version=4, info={"q": "1+1"},
                      metrics={"len": 7.0}, chosen_tokens=torch.arange(3)[::2],
                      response_text="ok", teacher_logprobs=torch.randn(7, generator=g))


def _assert_same_experience(got: Experience, want: Experience) -> None:
    for name, value in want.__dict__.items():
        other = getattr(got, name)
        if isinstance(value, torch.Tensor):
            assert isinstance(other, torch.Tensor) and other.dtype == value.dtype, name
            assert torch.equal(other, value), name
        else:
            assert other == value, name


def test_experiences_pickle_their_tensors_as_raw_buffers() -> None:
    """Pickling (Ray's object store) keeps every field — dtypes, a bool mask, a bfloat16
    tensor numpy cannot hold, non-contiguous views — and carries the CPU tensors as numpy
    buffers; unpickled from read-only buffers (Ray's zero-copy views) the tensors are
    writable copies. Copies keep their meaning: shallow shares, deep does not."""
    import copy
    import pickle

    import numpy as np
    from rft.tensor_wire import Bits

    exp = _every_field_experience()
    state = exp.__getstate__()
    assert isinstance(state["tokens"], np.ndarray) and isinstance(state["logprobs"], np.ndarray)
    assert isinstance(state["advantages"], Bits)  # bfloat16: its raw bits
    _assert_same_experience(pickle.loads(pickle.dumps(exp)), exp)
    shallow, deep = copy.copy(exp), copy.deepcopy(exp)
    _assert_same_experience(deep, exp)
    assert shallow.logprobs.data_ptr() == exp.logprobs.data_ptr()
    assert deep.logprobs.data_ptr() != exp.logprobs.data_ptr()

    buffers: list[pickle.PickleBuffer] = []
    data = pickle.dumps(exp, protocol=5, buffer_callback=buffers.append)
    assert buffers  # the arrays went out of band, as Ray sends them
    read_only = [memoryview(bytes(b.raw())) for b in buffers]
    got = pickle.loads(data, buffers=read_only)
    _assert_same_experience(got, exp)
    got.logprobs += 1  # writable: not a view of the (read-only) buffer
    assert torch.equal(got.logprobs, exp.logprobs + 1)


# ---- crashes: leases, idempotent writes, state in checkpoints --------------------------


def _rows(path) -> list[tuple[int, int | None, int]]:
    import sqlite3

    with sqlite3.connect(path) as db:
        return db.execute("SELECT consumed, read_step, leased FROM experiences ORDER BY id"
                          ).fetchall()


def test_sql_leases_become_final_with_the_checkpoint_and_return_after_a_crash(tmp_path):
    """Reads of steps after the last checkpoint go back to the buffer when the trainer
    restarts from it, and are read again in the same order; covered ones stay read."""
    path = str(tmp_path / "exp.db")
    first = open_storage("sql", "buf", path)
    first.write([make(i) for i in range(8)])
    for step in (1, 2, 3):
        first.lease_reads(step)
        first.read(2, timeout=1)
        if step == 2:
            assert first.commit_leases(2) == 4  # checkpoint 2 saved: steps 1-2 final
    assert first.leased() == 2 and first.totals() == (8, 6)
    first.close()  # killed: step 3 was read, never checkpointed

    again = open_storage("sql", "buf", path)
    assert again.recover_leases(2) == (0, 2)
    assert again.available() == 4 and again.totals() == (8, 4)
    again.lease_reads(3)
    assert [e.info["i"] for e in again.read(2, timeout=1)] == [4, 5]  # the same rows
    again.close()

    restarted = open_storage("sql", "buf", path)  # killed after saving 3, before commit
    assert restarted.recover_leases(3) == (2, 0)
    assert _rows(path) == [(1, 1, 0)] * 2 + [(1, 2, 0)] * 2 + [(1, 3, 0)] * 2 + [(0, None, 0)] * 2
    restarted.close()


def test_reads_without_a_lease_are_final_at_once(tmp_path):
    store = open_storage("sql", "buf", str(tmp_path / "exp.db"))
    store.write([make(0), make(1)])
    store.read(1, timeout=1)
    assert store.recover_leases(0) == (0, 0) and store.available() == 1
    store.close()


def test_keyed_writes_are_idempotent_across_processes(tmp_path):
    """A step redone after a crash writes its experiences once (still counted as written)."""
    path = str(tmp_path / "exp.db")
    for attempt in range(2):
        store = open_storage("sql", "buf", path)
        with store.idempotent_writes("explore step 1"):
            store.write([make(0), make(1)])
            store.write([make(2)])  # a second write in one step: key "explore step 1#1"
        assert store.written == 3
        assert store.totals() == (3, 0)
        store.close()
    mirror = str(tmp_path / "mirror.db")
    for attempt in range(2):
        queue = open_storage("queue", "buf", mirror)
        with queue.idempotent_writes("explore step 1"):
            queue.write([make(0)])
        assert queue.available() == 1  # the in-memory queue always takes the write
        queue.close()
    assert open_storage("sql", "copy", mirror).totals() == (1, 0)


def test_a_buffer_file_of_an_older_rft_gains_the_lease_columns(tmp_path):
    import json
    import sqlite3

    from rft.buffer.storage import experience_to_dict

    path = tmp_path / "old.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE experiences (id INTEGER PRIMARY KEY AUTOINCREMENT, consumed "
                   "INTEGER NOT NULL DEFAULT 0, payload TEXT)")
        db.executemany("INSERT INTO experiences (consumed, payload) VALUES (?, ?)",
                       [(c, json.dumps(experience_to_dict(make(i)))) for i, c in ((0, 1), (1, 0))])
    store = open_storage("sql", "buf", str(path))
    store.lease_reads(1)
    assert [e.info["i"] for e in store.read(1, timeout=1)] == [1]
    assert store.recover_leases(0) == (0, 1) and store.available() == 1
    store.close()


@pytest.mark.parametrize("kind", ["queue", "file"])
def test_in_memory_positions_and_counters_survive_through_state_dict(kind, tmp_path):
    path = None if kind == "queue" else str(tmp_path / "exp.jsonl")
    store = open_storage(kind, "buf", path)
    store.write([make(0), make(1), make(2)])
    store.read(1, timeout=1)
    state = store.state_dict()
    store.close()
    restored = open_storage(kind, "buf", path)
    if kind == "queue":
        assert restored.available() == 0
    restored.load_state_dict(state)
    assert (restored.written, restored.read_count, restored.available()) == (3, 1, 2)
    assert [e.info["i"] for e in restored.read(2, timeout=1)] == [1, 2]
    restored.close()


def test_replay_buffer_state_restores_items_uses_and_its_random_generator():
    registry = PluginRegistry.create()
    priority = registry.get("priority_fn", "linear_decay_use_count_control_randomization")
    from rft.buffer.replay import ReplayStorage

    def fresh() -> ReplayStorage:
        return ReplayStorage("r", priority, priority.Args(), reuse_cooldown_time=0.0, seed=3)

    one, two = fresh(), fresh()
    one.write([make(i) for i in range(6)])
    one.read(2, timeout=1)
    two.load_state_dict(one.state_dict())
    assert [e.info["i"] for e in one.read(3, timeout=1)] == \
        [e.info["i"] for e in two.read(3, timeout=1)]
