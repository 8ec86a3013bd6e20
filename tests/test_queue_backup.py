"""``buffer.trainer_input.experience_buffer.path`` with ``storage_type: queue``: every
experience written to the queue is also appended to the backup the path names (JSON lines
for ``.jsonl`` / ``.json``, a SQLite table for a SQLite file or ``sqlite:///`` URL), and a
later stage reads the backup as a ``file`` / ``sql`` buffer."""

from __future__ import annotations

import json

import pytest
import torch
from rft.buffer.factory import open_experience_buffer
from rft.buffer.storage import FileStorage, SQLStorage, open_storage
from rft.config import build_stages
from rft.config.plan import Selected
from rft.config.schema import ExperienceBufferConfig, ReplayBufferConfig
from rft.errors import ConfigError, RftError
from rft.experience import EID, Experience
from rft.plugins import PluginRegistry
from rft.testing.runs import run_tiny, tiny_run_config, write_taskset


def make(i: int) -> Experience:
    return Experience(tokens=torch.tensor([1, 2, 3 + i]), prompt_length=2, reward=float(i),
                      logprobs=torch.tensor([-0.5]), eid=EID(batch=0, task=i, run=0, step=1),
                      info={"i": i})


@pytest.mark.parametrize("suffix", ["backup.jsonl", "backup.json", "backup.db",
                                    "backup.sqlite", "sqlite:///{tmp}/backup.db"])
def test_every_write_goes_to_the_backup_and_reads_back(tmp_path, suffix):
    path = suffix.format(tmp=tmp_path) if "{tmp}" in suffix else str(tmp_path / suffix)
    queue = open_storage("queue", "exp", path)
    queue.write([make(0), make(1)])
    assert [e.info["i"] for e in queue.read(2, timeout=1)] == [0, 1]
    queue.write([make(2)])
    queue.close()
    kind = "sql" if "sqlite" in path or path.endswith(".db") else "file"
    backup = open_storage(kind, "copy", path)
    assert isinstance(backup, SQLStorage if kind == "sql" else FileStorage)
    got = backup.read(3, timeout=1)  # what was read from the queue is in the backup too
    assert [e.info["i"] for e in got] == [0, 1, 2]
    assert got[2].tokens.tolist() == [1, 2, 5] and got[2].reward == 2.0
    backup.close()


@pytest.mark.parametrize("directory", ["exp_buffer", "exp_buffer/", "existing.d"])
def test_a_directory_path_backs_up_to_a_file_inside_it(tmp_path, directory):
    """A directory (one that exists, ends with ``/`` or has no suffix; Trinity-RFT's
    ``./exp_buffer``) holds the backup as ``<dir>/<queue name>.jsonl``."""
    (tmp_path / "existing.d").mkdir()
    queue = open_storage("queue", "exp", str(tmp_path / directory))
    queue.write([make(0), make(1)])
    queue.close()
    backup = tmp_path / directory / "exp.jsonl"
    assert [json.loads(line)["info"]["i"] for line in backup.read_text().splitlines()] == [0, 1]


def test_keyed_writes_reach_a_json_backup_once(tmp_path):
    """An explore step redone after a crash (same idempotency key, a new process) is in the
    backup once, as with a SQLite backup."""
    path = tmp_path / "backup.jsonl"
    for _ in range(2):
        queue = open_storage("queue", "exp", str(path))
        with queue.idempotent_writes("explore step 1"):
            queue.write([make(0), make(1)])
            queue.write([make(2)])
        assert queue.available() == 3  # the in-memory queue always takes the write
        queue.close()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [row["info"]["i"] for row in lines] == [0, 1, 2]
    assert [row.get("write_key") for row in lines] == ["explore step 1", None,
                                                      "explore step 1#1"]
    path.write_text(path.read_text() + '{"tokens": [1], "write_key": "explore st')  # cut
    reopened = open_storage("queue", "exp", str(path))  # a line cut by a kill: opens
    with reopened.idempotent_writes("explore step 2"):
        reopened.write([make(3)])
    reopened.close()


def test_a_replay_buffer_backs_up_each_write_once(tmp_path):
    from rft.builtin.priority import LinearDecayArgs, linear_decay

    path = tmp_path / "backup.jsonl"
    cfg = ExperienceBufferConfig(name="exp", storage_type="queue", path=str(path),
                                 replay_buffer=ReplayBufferConfig(enable=True,
                                                                  reuse_cooldown_time=0.0))
    replay = open_experience_buffer(cfg, Selected("priority_fn", "linear_decay", linear_decay,
                                                  LinearDecayArgs()))
    replay.write([make(0), make(1)])
    for _ in range(3):  # read again and again: reuse does not write
        assert len(replay.read(2, timeout=1)) == 2
    replay.close()
    assert len(path.read_text().splitlines()) == 2


def test_a_path_of_another_kind_is_one_line(tmp_path):
    with pytest.raises(RftError, match=r"^experience buffer 'exp': path: a queue's backup is a "
                                       r"SQLite file .* got '.*exp\.csv'$"):
        open_storage("queue", "exp", str(tmp_path / "exp.csv"))
    for path in ("exp.csv", "postgresql://db/rft"):
        config = tiny_run_config("model", "tasks.jsonl", tmp_path)
        config["buffer"]["trainer_input"]["experience_buffer"]["path"] = path
        with pytest.raises(ConfigError) as caught:
            build_stages(config, PluginRegistry.create())
        expected = ("buffer.trainer_input.experience_buffer.path: a queue's backup is a "
                    "SQLite file (sqlite:///…, .db, .sqlite, .sqlite3) or a JSON lines file "
                    f"(.jsonl, .json), got {path!r}")
        assert [p for p in caught.value.problems if "experience_buffer.path" in p] == [expected]


@pytest.mark.slow
def test_a_run_backs_up_what_it_explored(tmp_path, tiny_model_dir):
    """A colocate run over a queue backed up to JSON lines: the backup holds every
    experience the run explored, one write per explore step, and reads back as a ``file``
    buffer (the same experiences the trainer got: their response lengths)."""
    tasks = write_taskset(tmp_path / "tasks.jsonl")
    backup = tmp_path / "backup" / "explored.jsonl"
    (tmp_path / "run").mkdir()
    outcome = run_tiny(tiny_model_dir, tasks, tmp_path / "run", {
        "buffer.trainer_input.experience_buffer.path": str(backup)})
    assert len(outcome.metrics) == 2
    rows = [json.loads(line) for line in backup.read_text().splitlines()]
    assert len(rows) == 2 * 2 * 2  # steps × tasks × repeat_times
    assert [row.get("write_key") for row in rows if "write_key" in row] == [
        f"explore step {step} of {outcome.job_dir}" for step in (1, 2)]
    stored = open_storage("file", "explored", str(backup))
    for step, metrics in enumerate(outcome.metrics):
        batch = stored.read(4, timeout=1)
        assert {e.model_version for e in batch} == {step}
        assert metrics["response_length/mean"] == pytest.approx(
            sum(e.response_length for e in batch) / 4)
    stored.close()
