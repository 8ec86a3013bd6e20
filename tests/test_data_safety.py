"""What a run writes is kept, and what it reads back is what it wrote (issue #28, items 1,
3 and 8):

- a queue backup (or ``sql`` buffer) shared by two runs keeps both runs' experiences: the
  idempotency key of an explore step belongs to the run (its job dir), and a failed
  attempt's empty write does not block the redone step;
- a checkpoint file whose content changed without changing its size is found at resume
  (a SHA-256 per file, listed in ``state.json``, computed while the file is written) and
  the resume falls back to the previous checkpoint with the usual one-line warning;
- a full disk during a save is one line naming the file and the bytes needed; a ``log/``
  or ``monitor/`` folder that is a file is one line naming it.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sqlite3
from pathlib import Path

import pytest
import torch
from rft.buffer.storage import explore_step_key, open_storage
from rft.experience import EID, Experience


def make(i: int, step: int = 1) -> Experience:
    return Experience(tokens=torch.tensor([1, 2, 3 + i]), prompt_length=2, reward=float(i),
                      logprobs=torch.tensor([-0.5]), eid=EID(batch=0, task=i, run=0, step=step),
                      info={"i": i})


def backup_rows(path: Path) -> list[int]:
    stored = open_storage("sql", "copy", str(path))
    rows = [e.info["i"] for e in stored.read(stored.available(), timeout=1)]
    stored.close()
    return rows


# ---- item 1: a queue backup shared by two runs ------------------------------------------


def test_two_runs_on_one_backup_keep_their_own_steps(tmp_path):
    """Two runs (job dirs ``a`` and ``b``) write step 1 to one SQLite backup: both runs'
    rows are there; the same run redoing step 1 (a resume) still writes it once."""
    backup = tmp_path / "bk.db"
    for job, rows in (("a", [0, 1]), ("b", [2, 3]), ("a", [4, 5])):
        queue = open_storage("queue", "exp", f"sqlite:///{backup}")
        with queue.idempotent_writes(explore_step_key(str(tmp_path / job), 1)):
            queue.write([make(i) for i in rows])
        queue.close()
    assert backup_rows(backup) == [0, 1, 2, 3]
    with sqlite3.connect(backup) as db:
        keys = sorted(row[0] for row in db.execute("SELECT key FROM writes"))
    assert keys == [f"explore step 1 of {tmp_path / 'a'}", f"explore step 1 of {tmp_path / 'b'}"]


@pytest.mark.parametrize("kind", ["bk.db", "bk.jsonl", "leased"])
def test_an_empty_write_does_not_block_the_redone_step(tmp_path, kind):
    """A failed attempt whose step 1 produced nothing records no key: the step redone by
    the next attempt (same job dir) is stored."""
    from rft.buffer.leased_queue import LeasedQueueStorage

    key = explore_step_key(str(tmp_path / "job"), 1)
    path = str(tmp_path / kind)
    if kind == "leased":  # the shared queue's actor: one storage, the explorer restarted
        queue = LeasedQueueStorage("exp")
        for rows in ([], [0, 1]):
            with queue.idempotent_writes(key):
                queue.write([make(i) for i in rows])
        assert queue.available() == 2
        return
    for rows in ([], [0, 1], [7, 8]):  # failed (empty), redone, redone again after a crash
        queue = open_storage("queue", "exp", path)
        with queue.idempotent_writes(key):
            queue.write([make(i) for i in rows])
        queue.close()
    if kind.endswith(".db"):
        assert backup_rows(tmp_path / kind) == [0, 1]
    else:
        lines = [json.loads(line) for line in Path(path).read_text().splitlines()]
        assert [row["info"]["i"] for row in lines] == [0, 1]


def test_an_empty_key_an_older_rft_recorded_blocks_nothing(tmp_path):
    """A backup in which an older rft recorded ``('explore step 1', 0)`` for a failed run:
    the next write of that key is stored."""
    backup = tmp_path / "bk.db"
    open_storage("sql", "exp", str(backup)).close()
    with sqlite3.connect(backup) as db:
        db.execute("INSERT INTO writes (key, rows) VALUES ('explore step 1', 0)")
    queue = open_storage("queue", "exp", str(backup))
    with queue.idempotent_writes("explore step 1"):
        queue.write([make(0), make(1)])
    queue.close()
    assert backup_rows(backup) == [0, 1]


def test_a_skipped_write_is_logged(tmp_path, caplog):
    """Nothing is dropped silently: a redone step's write that the backup skips is an info
    line, a warning when the redone step produced another number of experiences."""
    backup, key = tmp_path / "bk.db", "explore step 1 of /job"
    with caplog.at_level(logging.INFO, logger="rft.buffer.storage"):
        for rows in ([0, 1], [0, 1], [0, 1, 2]):
            queue = open_storage("queue", "exp", str(backup))
            with queue.idempotent_writes(key):
                queue.write([make(i) for i in rows])
            queue.close()
    records = [(r.levelname, r.getMessage()) for r in caplog.records
               if r.name == "rft.buffer.storage"]
    assert records == [
        ("INFO", f"experience buffer 'exp': {key!r} was written before; the redone step's 2 "
                 "experiences are not stored again"),
        ("WARNING", f"experience buffer 'exp': {key!r} was written before (2 experiences); "
                    "this write of the redone step (3 experiences) is not stored")]


def test_two_runs_sharing_a_queue_backup_both_keep_their_rows(tmp_path, tiny_model_dir):
    """Two colocate runs (names ``first`` and ``second``) back their queue up to one
    SQLite file, as Trinity's ``sqlite:///gsm8k.db`` does for runs started in one folder:
    the file holds both runs' experiences (2 steps × 2 tasks × 2 rollouts each)."""
    from rft.testing.runs import run_tiny, write_taskset

    tasks = write_taskset(tmp_path / "tasks.jsonl")
    backup = tmp_path / "x" / "bk.db"
    jobs = []
    for name in ("first", "second"):
        (tmp_path / name).mkdir()
        outcome = run_tiny(tiny_model_dir, tasks, tmp_path / name, {
            "name": name, "checkpoint_root_dir": str(tmp_path / "checkpoints"),
            "buffer.trainer_input.experience_buffer.path": f"sqlite:///{backup}"})
        assert len(outcome.metrics) == 2
        jobs.append(outcome.job_dir)
    with sqlite3.connect(backup) as db:
        assert db.execute("SELECT COUNT(*) FROM experiences").fetchone()[0] == 2 * 8
        keys = sorted(row[0] for row in db.execute("SELECT key FROM writes"))
    assert keys == sorted(f"explore step {s} of {job}" for job in jobs for s in (1, 2))


# ---- item 3: a checkpoint changed in place, its size kept ------------------------------


MARK = torch.full((64,), 1.5)  # float32 1.5 = 00 00 c0 3f: easy to find in any file
NAN_BYTES = bytes.fromhex("0000c07f")


def write_mark(folder: str, name: str) -> None:
    """A file a trainer or an export writes itself (not through rft's ``torch.save``)."""
    path = os.path.join(folder, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if name.endswith(".safetensors"):
        from safetensors.torch import save_file

        save_file({"w": MARK}, path)
    elif name.endswith(".distcp"):  # DCP's own writer, as the sharded trainer uses it
        import torch.distributed.checkpoint as dcp

        with pytest.warns(UserWarning):  # "torch.distributed is disabled …: single process"
            dcp.save({"w": MARK.clone()}, checkpoint_id=os.path.dirname(path), no_dist=True)
    else:
        torch.save({"w": MARK}, path)


def save_two(job: Path, name: str) -> None:
    """``global_step_2`` and ``global_step_4`` with ``MARK`` in the file ``name``."""
    from rft.checkpoint import save_checkpoint

    for step in (2, 4):
        if name in ("trainer.pt", "buffer.pt"):
            save_checkpoint(str(job), step, {"actor": {"w": MARK}}, {}, extra={"buffer": MARK})
        elif name.startswith("hf/"):
            save_checkpoint(str(job), step, {}, {}, save_hf=lambda hf: write_mark(
                os.path.dirname(hf), name))
        else:  # the trainer's own files (veRL's actor/, DCP's trainer_sharded/)
            def own(folder: str) -> dict[str, str]:
                write_mark(folder, name)
                return {"format": "own"}

            save_checkpoint(str(job), step, own, {})


def flip_in_place(path: Path) -> None:
    """Turn one 1.5 of ``MARK`` into NaN: same size, the file still loads."""
    data = bytearray(path.read_bytes())
    at = data.find(bytes.fromhex("0000c03f") * 4)
    assert at >= 0, path
    data[at:at + 4] = NAN_BYTES
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("name", ["trainer.pt", "buffer.pt", "hf/model.safetensors",
                                  "actor/model_world_size_1_rank_0.pt",
                                  "trainer_sharded/__0_0.distcp"])
def test_a_same_size_corrupt_checkpoint_falls_back_with_one_warning(tmp_path, name, caplog):
    """A byte of ``global_step_4/<name>`` changed in place (a NaN where a 1.5 was, the size
    kept): the file still loads — before, the run went on with the NaN and failed later
    (``logprobs contains NaN or inf``) — but its SHA-256 is not the one ``state.json``
    recorded at save, so the resume takes ``global_step_2`` with the one-line warning of a
    truncated file and moves ``global_step_4`` aside."""
    from rft.checkpoint import newest_readable_checkpoint

    job = tmp_path / "job"
    save_two(job, name)
    corrupt = job / "global_step_4" / name
    size = corrupt.stat().st_size
    flip_in_place(corrupt)
    assert corrupt.stat().st_size == size
    with caplog.at_level(logging.WARNING, logger="rft.checkpoint"):
        loaded = newest_readable_checkpoint(str(job), extra=("buffer",))
    assert loaded is not None and loaded.step == 2
    lines = [r.getMessage() for r in caplog.records if r.name == "rft.checkpoint"]
    assert len(lines) == 2 and "\n" not in "".join(lines)
    assert lines[0].startswith(f"resume: checkpoint {corrupt} is corrupt: its content changed "
                               "since it was written (sha256 ")
    assert lines[0].endswith(f" written); skipped (moved to {job}/global_step_4.corrupt)")
    assert lines[1] == f"resume: taking {job}/global_step_2, the newest readable checkpoint"
    state = json.loads((job / "global_step_2" / "state.json").read_text())
    assert set(state["sha256"]) == set(state["files"]) and name in state["files"]


def test_checksums_are_streamed_with_the_bytes_written(tmp_path):
    """``trainer.pt`` / ``<name>.pt``: the SHA-256 hashed while ``torch.save`` streamed the
    file is the file's, and the file reads back whole."""
    import hashlib

    from rft.checkpoint import save_hashed

    state = {"actor": {"w": torch.randn(256, 64, generator=torch.Generator().manual_seed(0))},
             "step": 3}
    digest = save_hashed(state, str(tmp_path), "trainer.pt")
    data = (tmp_path / "trainer.pt").read_bytes()
    assert digest == hashlib.sha256(data).hexdigest()
    loaded = torch.load(tmp_path / "trainer.pt", weights_only=False)
    assert loaded["step"] == 3 and torch.equal(loaded["actor"]["w"], state["actor"]["w"])


# ---- item 8: a full disk, a folder that is a file ---------------------------------------


class SmallDisk:
    """A folder on a file system of ``size`` bytes: a real ``tmpfs`` (``mount -t tmpfs -o
    size=…``, which needs root — these tests run as root in the project's environment).
    Where mounting is impossible, the fallback injects ``OSError(ENOSPC)`` at the file
    write layer instead (:class:`rft.checkpoint.HashingFile`'s ``write``, once ``size``
    bytes have been written under the folder): ``real`` says which."""

    def __init__(self, path: Path, size: int, monkeypatch: pytest.MonkeyPatch) -> None:
        import subprocess

        self.path, self.size = path, size
        path.mkdir(parents=True)
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs",
                                  str(path)], capture_output=True, check=False)
        self.real = mounted.returncode == 0
        if not self.real:
            self._inject(monkeypatch)

    def _inject(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import errno

        import rft.checkpoint

        real_write, used = rft.checkpoint.HashingFile.write, [0]
        folder = str(self.path)

        def write(handle: rft.checkpoint.HashingFile, data: bytes) -> int:
            if handle.path.startswith(folder):
                used[0] += len(memoryview(data).cast("B"))
                if used[0] > self.size:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return real_write(handle, data)

        monkeypatch.setattr(rft.checkpoint.HashingFile, "write", write)

    def unmount(self) -> None:
        import subprocess

        if self.real:
            subprocess.run(["umount", "-l", str(self.path)], check=False)


@pytest.fixture
def small_disk(tmp_path, monkeypatch):
    disks: list[SmallDisk] = []

    def make(size: int) -> SmallDisk:
        disks.append(SmallDisk(tmp_path / f"disk{len(disks)}", size, monkeypatch))
        return disks[-1]

    yield make
    for disk in disks:
        disk.unmount()


def test_a_full_disk_is_one_line_with_the_file_and_the_bytes_needed(small_disk):
    """``global_step_1`` fits on a 512 KiB disk, ``global_step_2`` does not: one line
    naming the checkpoint, the file being written and the bytes it needs (the previous
    checkpoint's size) — before, torch's ``unexpected pos 576 vs 534`` —, no partial
    folder left, ``global_step_1`` intact."""
    import shutil

    from rft.checkpoint import (CheckpointError, list_checkpoints,
                                newest_readable_checkpoint, save_checkpoint)
    from rft.checkpoint.disk_full import human

    disk = small_disk(512 * 1024)
    job = disk.path / "job"
    state = {"actor": {"w": torch.arange(70_000, dtype=torch.float32)}}  # 280 KB
    save_checkpoint(str(job), 1, state, {})
    with pytest.raises(CheckpointError) as caught:
        save_checkpoint(str(job), 2, state, {})
    first = job / "global_step_1"
    needed = sum(p.stat().st_size for p in first.rglob("*") if p.is_file())
    free = f", {human(shutil.disk_usage(job).free)} free" if disk.real else ""
    assert str(caught.value) == (
        f"checkpoint {job}/global_step_2: cannot write trainer.pt: No space left on device "
        f"(the checkpoint needs about {human(needed)}{free})" if disk.real else str(caught.value))
    assert str(caught.value).startswith(
        f"checkpoint {job}/global_step_2: cannot write trainer.pt: No space left on device "
        f"(the checkpoint needs about {human(needed)}")
    assert sorted(p.name for p in job.iterdir()) == ["global_step_1"]
    assert [c.step for c in list_checkpoints(str(job))] == [1]
    loaded = newest_readable_checkpoint(str(job))
    assert loaded is not None and torch.equal(loaded.trainer_state["actor"]["w"],
                                              state["actor"]["w"])


def test_a_first_checkpoint_on_a_full_disk_needs_at_least_its_tensors(small_disk):
    """No previous checkpoint to measure: the line says at least the tensors to save."""
    from rft.checkpoint import CheckpointError, save_checkpoint
    from rft.checkpoint.disk_full import human

    disk = small_disk(256 * 1024)
    job = disk.path / "job"
    with pytest.raises(CheckpointError, match=(
            rf"^checkpoint {job}/global_step_1: cannot write trainer\.pt: No space left on "
            rf"device \(the checkpoint needs at least {human(400_000)}")):
        save_checkpoint(str(job), 1, {"w": torch.zeros(100_000)}, {})
    assert list(job.iterdir()) == []


def test_torchs_short_write_on_a_full_disk_is_named_so(small_disk, monkeypatch, tmp_path):
    """A trainer's own writer (veRL's files, DCP's ``rng_rank<r>.pt``) calls ``torch.save``
    with a *path* on a full disk: torch's C++ writer hides the ``errno`` (``unexpected pos
    … vs …``, its context ``basic_ios::clear``); with the job's file system full, the line
    says so. On a real 256 KiB ``tmpfs``; without root, the exception torch raised there
    and a full file system (``shutil.disk_usage``) are injected instead. With room left,
    the same exception is torch's own words."""
    import shutil
    from collections import namedtuple

    import rft.checkpoint.disk_full
    from rft.checkpoint import CheckpointError, save_checkpoint
    from rft.checkpoint.disk_full import human

    disk = small_disk(256 * 1024)
    job = disk.path / "job"

    def own_files(folder: str) -> dict[str, str]:
        if disk.real:
            torch.save({"w": torch.zeros(100_000)}, os.path.join(folder, "own.pt"))
        try:
            raise RuntimeError("basic_ios::clear: iostream error")
        except RuntimeError:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos "
                               "576 vs 534") from None

    with monkeypatch.context() as patch:
        if not disk.real:
            usage = namedtuple("usage", "total used free")
            patch.setattr(rft.checkpoint.disk_full.shutil, "disk_usage", lambda path: usage(10, 10, 0))
        with pytest.raises(CheckpointError) as caught:
            save_checkpoint(str(job), 1, own_files, {})
        free = human(shutil.disk_usage(job).free)
    assert isinstance(caught.value.__cause__, RuntimeError)
    assert "unexpected pos" in str(caught.value.__cause__)
    assert re.fullmatch(
        rf"checkpoint {job}/global_step_1: cannot write: No space left on device \(the "
        rf"checkpoint needs at least \d+(\.\d)? (bytes|KB), {re.escape(free)} free\)",
        str(caught.value)), str(caught.value)
    assert list(job.iterdir()) == []

    def short_write(folder: str) -> dict[str, str]:
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 1 vs 0")

    with pytest.raises(CheckpointError, match=r"cannot write: RuntimeError: \[enforce fail"):
        save_checkpoint(str(tmp_path / "roomy"), 1, short_write, {})  # torch's own words


def run_cli(tmp_path: Path, model: Path, overrides: dict) -> int:
    import yaml
    from rft.cli import main
    from rft.testing.runs import apply_overrides, tiny_run_config, write_taskset

    tasks = write_taskset(tmp_path / "tasks.jsonl")
    config = apply_overrides(tiny_run_config(model, tasks, tmp_path), overrides)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return main(["run", str(path)])


def error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("rft: ")
            and "WARNING" not in line]


def test_a_run_on_a_full_disk_ends_with_one_line(tmp_path, tiny_model_dir, small_disk,
                                                 capsys):
    """A colocate run whose checkpoint root is a 1 MiB ``tmpfs``: the run's logs and
    monitor fit, its final checkpoint (about 3 MB) does not — one line, exit status 2."""
    disk = small_disk(1024 * 1024)
    assert run_cli(tmp_path, tiny_model_dir, {"checkpoint_root_dir": str(disk.path)}) == 2
    job = disk.path / "rft_run" / "run"
    lines = error_lines(capsys.readouterr().err)
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"rft: checkpoint {job}/global_step_2: cannot write trainer.pt: "
                               "No space left on device (the checkpoint needs at least ")
    assert not list(job.glob("global_step_*"))


@pytest.mark.parametrize("folder", ["monitor", "log"])
def test_a_file_where_a_run_folder_goes_is_one_line(tmp_path, tiny_model_dir, capsys, folder):
    """``<job dir>/monitor`` or ``<job dir>/log`` is a file: one line naming it, exit
    status 2 (before: a ``FileExistsError`` traceback); the file is left as it was."""
    job = tmp_path / "checkpoints" / "rft_run" / "run"
    job.mkdir(parents=True)
    (job / folder).write_text("mine")
    assert run_cli(tmp_path, tiny_model_dir, {}) == 2
    what = {"monitor": "monitor jsonl", "log": "log"}[folder]
    assert error_lines(capsys.readouterr().err) == [
        f"rft: {what}: {job / folder} is a file, not a folder (move it aside)"]
    assert (job / folder).read_text() == "mine"


def test_make_folder_names_the_file_in_the_way(tmp_path):
    from rft.errors import RftError
    from rft.folders import make_folder

    (tmp_path / "a").write_text("")
    with pytest.raises(RftError, match=rf"^monitor tensorboard: {tmp_path}/a is a file, not a "
                                       r"folder \(move it aside\)$"):
        make_folder(str(tmp_path / "a" / "b" / "c"), "monitor tensorboard")
    assert make_folder(str(tmp_path / "x" / "y"), "log") == str(tmp_path / "x" / "y")


def test_dcp_files_are_hashed_as_they_are_written(tmp_path, tiny_model_dir):
    """A sharded trainer's DCP writer (:class:`TurnTakingWriter`) hashes each file as DCP
    streams it — shards, ``.metadata`` (written as ``.metadata.tmp``, renamed), the rank's
    RNG file — and the digests are the files' own; a checkpoint's ``state.json`` takes
    them from the rank's ``*.sha256.json`` (the shards are not read back)."""
    import torch.distributed.checkpoint as dcp
    from rft.checkpoint import file_digest, save_checkpoint, save_hashed, write_digests
    from rft.trainer.save_turns import SaveTurn
    from rft.trainer.sharded_checkpoint import SHARDED_DIR, TurnTakingWriter
    from torch.distributed.checkpoint.state_dict import get_state_dict
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    model_state, optimizer_state = get_state_dict(model, torch.optim.AdamW(model.parameters()))

    def own(folder: str) -> dict[str, str]:  # what save_sharded does on each rank
        directory = os.path.join(folder, SHARDED_DIR)
        rng: dict[str, str] = {}
        writer = TurnTakingWriter(directory, SaveTurn(), also=lambda: rng.update(
            {"rng_rank0.pt": save_hashed({"seed": 1}, directory, "rng_rank0.pt")}))
        with pytest.warns(UserWarning):  # "torch.distributed is disabled …: single process"
            dcp.save({"actor": model_state, "actor_optimizer": optimizer_state},
                     storage_writer=writer, no_dist=True)
        written = sorted(os.listdir(directory))
        assert sorted({**writer.digests, **rng}) == written  # every file, none read back
        assert all(file_digest(os.path.join(directory, name)) == digest
                   for name, digest in {**writer.digests, **rng}.items())
        write_digests(directory, "rank0", {**writer.digests, **rng})
        return {"format": "rft-sharded"}

    folder = Path(save_checkpoint(str(tmp_path), 1, own, {}))
    state = json.loads((folder / "state.json").read_text())
    listed = json.loads((folder / SHARDED_DIR / "rank0.sha256.json").read_text())
    assert {f"{SHARDED_DIR}/{name}" for name in listed} | {
        f"{SHARDED_DIR}/rank0.sha256.json", "trainer.pt"} == set(state["sha256"])
    assert all(state["sha256"][f"{SHARDED_DIR}/{name}"] == digest
               for name, digest in listed.items())
