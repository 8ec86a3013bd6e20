"""``storage_type: queue`` shared by an ``explore`` and a ``train`` process: the leased
in-memory queue (:mod:`rft.buffer.leased_queue`) and, end to end, two ``rft run``
processes on a Ray cluster started by the test with ``ray start --head`` on 127.0.0.1
(:mod:`rft.distributed.shared_queue`), the trainer killed with ``kill -9`` once."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from fixtures_models import arithmetic_tasks
from rft.buffer.leased_queue import LeasedQueueStorage, ReaderSuperseded
from rft.buffer.storage import BufferTimeout
from rft.config import load_config
from rft.distributed.shared_queue import join_shared_cluster
from rft.errors import RftError
from rft.experience import EID, Experience
from test_split_modes import RFT, write_config


def experience(batch: int, run: int) -> Experience:
    return Experience(tokens=torch.tensor([1, 2, batch, run]), prompt_length=2,
                      reward=float(run), eid=EID(batch=batch, task=0, run=run))


def ids(experiences: list[Experience]) -> list[tuple[int, int]]:
    return [(e.eid.batch, e.eid.run) for e in experiences]


# ---- the leased queue ---------------------------------------------------------------------


def test_leases_of_steps_after_the_checkpoint_come_back_first_in_read_order():
    queue = LeasedQueueStorage("exp")
    for batch in range(1, 5):
        with queue.idempotent_writes(f"explore step {batch}"):
            queue.write([experience(batch, run) for run in range(2)])
    first = queue.read_leased(2, 1.0, 1, "trainer-a")
    queue.commit_leases(1)  # global_step_1 saved
    second = queue.read_leased(2, 1.0, 2, "trainer-a")
    third = queue.read_leased(2, 1.0, 3, "trainer-a")
    assert ids(first + second + third) == [(b, r) for b in (1, 2, 3) for r in range(2)]
    # trainer-a is killed; trainer-b resumes from global_step_1: steps 2 and 3 come back
    assert queue.recover_leases(1, "trainer-b") == (0, 4)
    again = queue.read_leased(4, 1.0, 2, "trainer-b")
    assert ids(again) == ids(second + third)
    assert ids(queue.read_leased(2, 1.0, 3, "trainer-b")) == [(4, 0), (4, 1)]
    totals = queue.totals()
    assert (totals.appended, totals.final, totals.leased, totals.available) == (8, 2, 6, 0)
    assert queue.commit_leases(3) == 6 and queue.totals().final == 8


def test_a_redone_keyed_write_is_kept_once():
    queue = LeasedQueueStorage("exp")
    for _ in range(2):  # the explorer redoes step 1 after a crash
        with queue.idempotent_writes("explore step 1"):
            queue.write([experience(1, 0), experience(1, 1)])
    assert queue.totals().appended == 2 and queue.available() == 2


def test_a_read_of_a_superseded_reader_takes_nothing():
    """A read still waiting in the actor for a trainer that was killed must not take the
    rows that arrive later: the resumed trainer's session cuts it off."""
    queue = LeasedQueueStorage("exp")
    errors: list[Exception] = []

    def orphan() -> None:
        try:
            queue.read_leased(2, 30.0, 3, "killed")
        except ReaderSuperseded as exc:
            errors.append(exc)

    thread = threading.Thread(target=orphan)
    thread.start()
    time.sleep(0.2)
    started = time.monotonic()
    queue.recover_leases(2, "resumed")
    thread.join(10)
    assert time.monotonic() - started < 5 and not thread.is_alive()
    assert [str(e) for e in errors] == [("experience buffer 'exp': another trainer took over "
                                         "the queue (a trainer resumed while this one still "
                                         "read)")]
    queue.write([experience(3, 0), experience(3, 1)])
    assert ids(queue.read_leased(2, 1.0, 3, "resumed")) == [(3, 0), (3, 1)]


def test_a_read_that_times_out_takes_nothing_and_names_the_buffer():
    queue = LeasedQueueStorage("exp")
    queue.write([experience(1, 0)])
    with pytest.raises(BufferTimeout, match=r"^experience buffer 'exp': waited 0.2 s for 2 "
                                            r"experiences, 1 available \(written 1, read 0\)$"):
        queue.read_leased(2, 0.2, 1, "trainer")
    assert queue.available() == 1


def test_split_modes_over_a_queue_need_a_cluster_both_processes_join(tmp_path, tiny_model_dir,
                                                                     monkeypatch):
    tasks = arithmetic_tasks(tmp_path, 4)
    config = load_config(write_config(
        tmp_path, tiny_model_dir, tasks, "explore",
        buffer__trainer_input__experience_buffer={"name": "exp", "storage_type": "queue"})
    ).config
    monkeypatch.setenv("RAY_ADDRESS", "local")  # wins over cluster.ray_address
    with pytest.raises(RftError) as caught:
        join_shared_cluster(config)
    assert str(caught.value) == (
        "RAY_ADDRESS: local: storage_type 'queue' in mode 'explore' lives in a Ray actor that "
        "the explore and train processes share, on a Ray cluster that outlives both: start "
        "one (ray start --head) and give its address, or leave auto to join the one on this "
        "machine")


# ---- two `rft run` processes on one Ray cluster -------------------------------------------

EID_LOG_PLUGIN = textwrap.dedent('''
    """The default sample strategy, recording what each train step reads (test plugin)."""
    import json, os
    from rft import hookimpl
    from rft.builtin.sample_strategies import DefaultSampleStrategy

    class EidLogStrategy(DefaultSampleStrategy):
        def sample(self, step, model_version):
            batch, metrics = super().sample(step, model_version)
            record = {"step": step, "pid": os.getpid(),
                      "eids": [[e.eid.batch, e.eid.task, e.eid.run] for e in batch]}
            with open(os.environ["RFT_TEST_EID_LOG"], "a", encoding="utf-8") as handle:
                handle.write(json.dumps(record) + "\\n")
            return batch, metrics

    @hookimpl
    def register_sample_strategies():
        return {"eid_log": EidLogStrategy}
''')


def eid_log_site(root: Path) -> Path:
    """A folder for ``PYTHONPATH`` holding the plugin above as an installed distribution
    (its module and a ``*.dist-info`` with the ``rft`` entry point)."""
    site = root / "site"
    info = site / "rft_test_eid_log-0.0.1.dist-info"
    info.mkdir(parents=True)
    (site / "rft_test_eid_log.py").write_text(EID_LOG_PLUGIN)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: rft-test-eid-log\n"
                                   "Version: 0.0.1\n")
    (info / "entry_points.txt").write_text("[rft]\neid_log = rft_test_eid_log\n")
    return site


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class RayHead:
    """``ray start --head`` on 127.0.0.1 (cluster mode off: every port on loopback), with a
    temp dir and an auth token of its own, so that no other process on this machine finds
    it (``auto``) or joins it; stopped by killing its process group."""

    def __init__(self, root: Path) -> None:
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.temp_dir = tempfile.mkdtemp(prefix="rftq", dir="/tmp")  # short: socket paths
        self.env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
                    "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": uuid.uuid4().hex * 2,
                    "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
        self.env.pop("RAY_ADDRESS", None)
        self.log = root / "ray_head.log"
        ray = Path(sys.executable).parent / "ray"
        with open(self.log, "w") as out:
            self.proc = subprocess.Popen(
                [str(ray), "start", "--head", "--block", "--node-ip-address=127.0.0.1",
                 f"--port={self.port}", f"--temp-dir={self.temp_dir}", "--num-cpus=2",
                 "--include-dashboard=false", "--disable-usage-stats"],
                env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 120
        while "Ray runtime started" not in self.log.read_text(errors="replace"):
            assert self.proc.poll() is None, f"ray start failed:\n{self.log.read_text()}"
            assert time.monotonic() < deadline, "ray start did not start in 120 s"
            time.sleep(0.2)

    def actor_exists(self, namespace: str, name: str) -> bool:
        """Asked from a process of its own (this one stays out of Ray)."""
        script = ("import ray, sys\nray.init(address=sys.argv[1], namespace=sys.argv[2])\n"
                  "try:\n    ray.get_actor(sys.argv[3])\nexcept ValueError:\n    sys.exit(3)\n")
        result = subprocess.run([sys.executable, "-c", script, self.address, namespace, name],
                                env=self.env, capture_output=True, text=True, timeout=120,
                                check=False)
        assert result.returncode in (0, 3), result.stderr[-2000:]
        return result.returncode == 0

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)
        # the processes Ray started in sessions of their own (none expected): by their dir
        for line in subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True,
                                   text=True, check=True).stdout.splitlines():
            pid, _, args = line.strip().partition(" ")
            if self.temp_dir in args:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
        shutil.rmtree(self.temp_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory) -> Iterator[RayHead]:
    head = RayHead(tmp_path_factory.mktemp("ray"))
    yield head
    head.stop()


def queue_configs(tmp_path: Path, model: Path, head: RayHead, name: str, steps: int,
                  **changes) -> dict[str, Path]:
    """The explore and train configs of one run over a shared queue (mirrored to
    ``exp.db``: the rows written, each once) on ``head``'s cluster."""
    tasks = arithmetic_tasks(tmp_path, 4)
    return {mode: write_config(
        tmp_path, model, tasks, mode, name=name, buffer__total_steps=steps,
        cluster__ray_address=head.address, algorithm__sample_strategy="eid_log",
        buffer__trainer_input__experience_buffer={
            "name": "exp", "storage_type": "queue", "path": str(tmp_path / "exp.db"),
            "max_read_timeout": 120.0}, **changes) for mode in ("explore", "train")}


def start(mode: str, config: Path, tmp_path: Path, head: RayHead) -> subprocess.Popen:
    env = {**head.env, "PYTHONPATH": str(eid_log_site(tmp_path) if not (tmp_path / "site")
                                         .exists() else tmp_path / "site"),
           "RFT_TEST_EID_LOG": str(tmp_path / "eids.jsonl")}
    log = open(tmp_path / f"{mode}.log", "a")  # noqa: SIM115
    return subprocess.Popen([str(RFT), "run", str(config)], env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)


def finish(procs: dict[str, subprocess.Popen], tmp_path: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    for mode, proc in procs.items():
        try:
            code = proc.wait(max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            code = None
        assert code == 0, f"{mode} run: {code}\n{(tmp_path / f'{mode}.log').read_text()[-3000:]}"


def written_eids(db: Path) -> list[tuple[int, int, int]]:
    import sqlite3

    with sqlite3.connect(db) as con:
        payloads = [json.loads(p) for (p,) in con.execute(
            "SELECT payload FROM experiences ORDER BY id")]
    return [(p["eid"]["batch"], p["eid"]["task"], p["eid"]["run"]) for p in payloads]


def eid_records(tmp_path: Path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "eids.jsonl").read_text().splitlines()]


def trained(records: list[dict]) -> dict[int, list[tuple[int, int, int]]]:
    """Step → what it trained: the last read of each step (a step read by a trainer that
    was killed before its checkpoint is read again, and trained, by its restart)."""
    return {r["step"]: [tuple(e) for e in r["eids"]] for r in records}


def kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)


@pytest.mark.slow
def test_explore_and_train_processes_share_a_queue_on_one_ray_cluster(tmp_path, tiny_model_dir,
                                                                      ray_head):
    steps = 3
    configs = queue_configs(tmp_path, tiny_model_dir, ray_head, "queue", steps)
    procs = {mode: start(mode, configs[mode], tmp_path, ray_head) for mode in ("train",
                                                                              "explore")}
    try:
        finish(procs, tmp_path, 400)
    finally:
        for proc in procs.values():
            kill_group(proc)
    job = tmp_path / "ck" / "split" / "queue"
    written = written_eids(tmp_path / "exp.db")
    assert len(written) == len(set(written)) == steps * 4
    by_step = trained(eid_records(tmp_path))
    assert sorted(by_step) == [1, 2, 3]
    assert [e for s in sorted(by_step) for e in by_step[s]] == written  # FIFO, each once
    assert json.loads((job / "global_step_3" / "state.json").read_text())[
        "experiences_read"] == steps * 4
    # lockstep: step s sampled by the trainer's weights of step s - 1
    assert {(b, b - 1) for b in range(1, steps + 1)} == {
        (r["eid"]["batch"], r["model_version"]) for r in _payloads(tmp_path / "exp.db")}
    assert not ray_head.actor_exists("split/queue", "exp")  # both finished: stopped
    # the finished trainer run again has nothing to do: it does not bring the queue back
    again = start("train", configs["train"], tmp_path, ray_head)
    finish({"train": again}, tmp_path, 180)
    assert not ray_head.actor_exists("split/queue", "exp")

    # run again with one more step: each side has progress but finds a new, empty queue
    # (as after the cluster was restarted): one line naming it, exit status 2
    more = queue_configs(tmp_path, tiny_model_dir, ray_head, "queue", steps + 1)
    for mode, what in (("train", ("this trainer resumes from global_step_3, trained on what "
                                  "it read from")),
                       ("explore", "this explorer wrote 12 experiences to")):
        (tmp_path / f"{mode}.log").unlink()
        proc = start(mode, more[mode], tmp_path, ray_head)
        assert proc.wait(180) == 2
        lines = (tmp_path / f"{mode}.log").read_text().splitlines()
        errors = [line for line in lines if line.startswith("rft: experience buffer 'exp': ")]
        assert errors == [(
            f"rft: experience buffer 'exp': {what} the queue actor 'exp' (Ray namespace "
            "'split/queue'), but that queue is gone, with what it held (its Ray cluster "
            "stopped or restarted, or the actor was killed); start the run afresh under "
            "another name, or use storage_type 'sql', which survives the cluster")
        ], "\n".join(lines[-20:])
        assert "Traceback" not in "\n".join(lines)
        assert not ray_head.actor_exists("split/queue", "exp")  # not created again


def _payloads(db: Path) -> list[dict]:
    import sqlite3

    with sqlite3.connect(db) as con:
        return [json.loads(p) for (p,) in con.execute("SELECT payload FROM experiences")]


@pytest.mark.slow
def test_a_trainer_killed_after_reading_gets_the_uncovered_rows_again(tmp_path, tiny_model_dir,
                                                                     ray_head):
    """``sync_interval: 2``: the trainer is killed with ``kill -9`` once it has read step 3
    (covered by no checkpoint: the last is global_step_2) and restarted: it resumes from
    global_step_2, reads step 3's experiences again (the same, in the same order), and
    every experience the explorer wrote is trained once."""
    steps = 4
    configs = queue_configs(tmp_path, tiny_model_dir, ray_head, "killed", steps,
                            synchronizer__sync_interval=2)
    procs = {mode: start(mode, configs[mode], tmp_path, ray_head) for mode in ("train",
                                                                              "explore")}
    try:
        deadline = time.monotonic() + 300
        log = tmp_path / "eids.jsonl"
        while not (log.exists() and any(r["step"] == 3 for r in eid_records(tmp_path))):
            assert procs["train"].poll() is None, (tmp_path / "train.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the trainer never read step 3"
            time.sleep(0.05)
        kill_group(procs["train"])
        killed = eid_records(tmp_path)
        procs["train"] = start("train", configs["train"], tmp_path, ray_head)
        finish(procs, tmp_path, 400)
    finally:
        for proc in procs.values():
            kill_group(proc)
    job = tmp_path / "ck" / "split" / "killed"
    records = eid_records(tmp_path)
    first_pid = records[0]["pid"]
    resumed = [r for r in records if r["pid"] != first_pid]
    assert [r["step"] for r in resumed][:1] == [3]  # resumed from global_step_2
    read_by_killed = {r["step"]: r["eids"] for r in killed}
    assert resumed[0]["eids"] == read_by_killed[3]  # the same rows, in the same order
    written = written_eids(tmp_path / "exp.db")
    assert len(written) == len(set(written)) == steps * 4  # nothing written twice
    by_step = trained(records)
    assert [e for s in sorted(by_step) for e in by_step[s]] == written  # nothing lost
    assert json.loads((job / f"global_step_{steps}" / "state.json").read_text())[
        "experiences_read"] == steps * 4
    assert "read after global_step_2 by a trainer that stopped are read again" in (
        tmp_path / "train.log").read_text()
    assert not ray_head.actor_exists("split/killed", "exp")
