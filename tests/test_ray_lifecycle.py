"""How ``rft run`` in mode ``both`` starts, keeps and stops its Ray cluster — real runs in
processes of their own (``hf`` engine, the tiny model, a few steps):

- two runs side by side each start a private cluster; the second never joins the first
  (it would die when the first ends);
- ``explorer.env_vars`` reach the explorer actor but no file of Ray's session directory;
- SIGTERM to the driver: exit 143, one ``rft:`` line, a checkpoint the run resumes from;
- ``kill -9`` of the driver: the Ray processes it started are gone within seconds.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest
import yaml

from rft.checkpoint import list_checkpoints
from rft.testing.runs import apply_overrides, tiny_run_config, write_taskset

RFT = Path(sys.executable).parent / "rft"
RAY_TMP = Path("/tmp/ray")
STARTED = "rft: started a local Ray cluster at "


def both_run(root: Path, model: Path, steps: int, **overrides) -> Path:
    """Write a ``both`` config of ``steps`` steps under ``root``; its path."""
    root.mkdir(parents=True, exist_ok=True)
    config = apply_overrides(tiny_run_config(model, write_taskset(root / "tasks.jsonl"), root,
                                             steps), {"mode": "both", **overrides})
    path = root / "config.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def start(config: Path, log: Path) -> subprocess.Popen:
    """``rft run config`` in a process of its own, stderr to ``log``."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("RAY_ADDRESS", None)
    with open(log, "w", encoding="utf-8") as handle:
        return subprocess.Popen([str(RFT), "run", str(config)], stdout=subprocess.DEVNULL,
                                stderr=handle, env=env, text=True)


def wait_for(check, timeout: float, what: str):
    """Poll ``check()`` until it returns something truthy; that value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def cluster_line(log: Path) -> str | None:
    """The run's ``rft: … Ray cluster at …`` line, once written."""
    return next((line for line in log.read_text().splitlines()
                 if " Ray cluster at " in line), None)


def alive(process: psutil.Process) -> bool:
    """Running, and not a zombie (killed, waiting for a parent that is gone to reap it)."""
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def trained_steps(root: Path) -> list[int]:
    paths = list(root.glob("checkpoints/**/monitor/trainer.jsonl"))
    if not paths:
        return []
    return [json.loads(line)["step"] for line in paths[0].read_text().splitlines() if line]


# ---- two runs side by side; explorer.env_vars -----------------------------------------------


@pytest.fixture(scope="module")
def side_by_side(tmp_path_factory, tiny_model_dir):
    """Run ``first`` (2 steps, with a secret in ``explorer.env_vars`` that its explorer's
    OpenAI endpoint needs as API key) and, once its cluster is up, ``second`` (6 steps):
    their stderr, exit codes and the secret."""
    root = tmp_path_factory.mktemp("side_by_side")
    secret = f"rft-secret-{uuid.uuid4().hex}"
    first = both_run(root / "first", tiny_model_dir, 2, **{
        "explorer.env_vars": {"RFT_LIFECYCLE_KEY": secret},
        "explorer.rollout_model": {"engine_type": "hf", "dtype": "float32",
                                   "enable_openai_api": True, "openai_api_port": 0,
                                   "openai_api_key_env": "RFT_LIFECYCLE_KEY"}})
    second = both_run(root / "second", tiny_model_dir, 6, name="second")
    logs = root / "first.log", root / "second.log"
    before = set(RAY_TMP.glob("session_*"))
    one = start(first, logs[0])
    try:
        wait_for(lambda: cluster_line(logs[0]), 120, "the first run's cluster")
        two = start(second, logs[1])
        try:
            codes = one.wait(timeout=400), two.wait(timeout=400)
        finally:
            two.kill()
    finally:
        one.kill()
    return {"codes": codes, "stderr": [log.read_text() for log in logs], "secret": secret,
            "sessions": sorted(set(RAY_TMP.glob("session_*")) - before)}


@pytest.mark.slow
def test_a_run_beside_another_starts_its_own_cluster_and_outlives_it(side_by_side):
    """The second run starts a private cluster (the first run's is never joined without its
    address) and keeps running after the first one ends."""
    first, second = side_by_side["stderr"]
    assert side_by_side["codes"] == (0, 0), second[-3000:]
    lines = [[line for line in text.splitlines() if " Ray cluster at " in line]
             for text in (first, second)]
    assert len(lines[0]) == 1 and lines[0][0].startswith(STARTED), first[-2000:]
    assert len(lines[1]) == 1 and lines[1][0].startswith(STARTED), second[-2000:]
    assert lines[0][0].split(" at ")[1] != lines[1][0].split(" at ")[1]  # two clusters


@pytest.mark.slow
def test_explorer_env_vars_reach_the_actor_but_no_ray_log(side_by_side):
    """The first run's explorer actor served its OpenAI endpoint with the key from
    ``explorer.env_vars`` (unset, the actor fails at start-up); no file under Ray's session
    directories holds the value (Ray's runtime_env agent wrote it to a world-readable log)."""
    assert side_by_side["codes"][0] == 0, side_by_side["stderr"][0][-3000:]
    secret = side_by_side["secret"].encode()
    holders = []
    assert side_by_side["sessions"]  # the two runs' Ray session directories
    for session in side_by_side["sessions"]:
        for path in session.rglob("*"):
            try:
                if path.is_file() and not path.is_symlink() and secret in path.read_bytes():
                    holders.append(str(path))
            except OSError:  # a socket, a file another run removes meanwhile
                continue
    assert holders == []


# ---- signals --------------------------------------------------------------------------------


@pytest.mark.slow
def test_sigterm_ends_a_both_run_in_one_line_and_it_resumes(tmp_path, tiny_model_dir):
    """SIGTERM to the driver of a ``both`` run after its first train step: exit 143, one
    ``rft: terminated (SIGTERM)`` line and no abort (Ray's crash handler printed
    ``*** SIGTERM received ***`` and exited 134); the trainer's last step is checkpointed
    and the run, continued, goes on after it."""
    steps = 40
    config = both_run(tmp_path, tiny_model_dir, steps)
    log = tmp_path / "run.log"
    run = start(config, log)
    try:
        wait_for(lambda: trained_steps(tmp_path), 480, "the first train step")
        run.send_signal(signal.SIGTERM)
        code = run.wait(timeout=180)
    finally:
        run.kill()
    stderr = log.read_text()
    assert code == 143, stderr[-3000:]
    assert "SIGTERM received" not in stderr and "Traceback" not in stderr, stderr[-3000:]
    assert stderr.strip().splitlines()[-1] == "rft: terminated (SIGTERM)", stderr[-3000:]
    assert stderr.count("rft: terminated") == 1
    job_dir = next(tmp_path.glob("checkpoints/*/*/monitor")).parent
    saved = list_checkpoints(str(job_dir))
    assert saved, stderr[-3000:]
    step = saved[-1].step
    assert 1 <= step < steps
    # continued: one more step after the checkpoint
    resumed = apply_overrides(yaml.safe_load(config.read_text()), {
        "continue_from_checkpoint": True, "buffer.total_steps": step + 1,
        "name": job_dir.name})
    config.write_text(yaml.safe_dump(resumed), encoding="utf-8")
    again = start(config, tmp_path / "resumed.log")
    try:
        assert again.wait(timeout=400) == 0, (tmp_path / "resumed.log").read_text()[-3000:]
    finally:
        again.kill()
    assert trained_steps(tmp_path)[-1] == step + 1


@pytest.mark.slow
def test_ray_processes_do_not_outlive_a_killed_driver(tmp_path, tiny_model_dir):
    """``kill -9`` of a ``both`` driver: the GCS, raylet and every other process of the
    cluster it started are gone within 5 s."""
    config = both_run(tmp_path, tiny_model_dir, 40)
    log = tmp_path / "run.log"
    run = start(config, log)
    try:
        wait_for(lambda: trained_steps(tmp_path), 480, "the first train step")
        driver = psutil.Process(run.pid)
        started = driver.children(recursive=True)
        names = " ".join(p.name() for p in started)
        assert "gcs_server" in names and "raylet" in names, names
        run.kill()  # SIGKILL
        run.wait(timeout=30)
        _, remaining = psutil.wait_procs(started, timeout=5)
    finally:
        run.kill()
    left = [f"{p.pid} {p.name()}" for p in remaining if alive(p)]
    for process in remaining:  # not left behind by the test either
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass
    assert left == [], left


@pytest.mark.parametrize("run_says_done", [False, True])
def test_the_watcher_kills_the_ray_processes_of_a_dead_run_only(run_says_done):
    """``rft.ray_reaper`` on a stand-in run (a shell that started a process named like a Ray
    worker, ``ray::Fake``, and a plain one): when the run dies without saying ``done`` the
    Ray-like process is killed within a second and the plain one is left alone; after
    ``done`` nothing is killed."""
    from rft import ray_reaper

    run = subprocess.Popen(["bash", "-c", "(exec -a ray::Fake sleep 60) & sleep 60 & "
                            "echo started; wait"], stdout=subprocess.PIPE, text=True)
    assert run.stdout is not None and run.stdout.readline().strip() == "started"
    def started() -> dict[str, psutil.Process] | None:
        named: dict[str, psutil.Process] = {}
        for child in psutil.Process(run.pid).children():
            command = child.cmdline()  # empty while the child is between fork and exec
            if command:
                named[command[0]] = child
        return named if {"ray::Fake", "sleep"} <= set(named) else None

    named = wait_for(started, 10, "the stand-in run's processes")
    ray_like, plain = named["ray::Fake"], named["sleep"]
    watcher = subprocess.Popen([sys.executable, "-I", "-S", ray_reaper.__file__, str(run.pid)],
                               stdin=subprocess.PIPE)
    try:
        time.sleep(2 * ray_reaper.POLL_S + 0.5)  # it has noted the run's processes
        assert watcher.stdin is not None
        if run_says_done:
            watcher.stdin.write(ray_reaper.DONE)
        run.kill()
        run.wait()
        watcher.stdin.close()  # the run's end of the pipe: gone with the run
        assert watcher.wait(timeout=10) == 0
        time.sleep(1)
        assert alive(ray_like) is run_says_done
        assert alive(plain)
    finally:
        for process in (ray_like, plain):
            try:
                process.kill()
            except psutil.NoSuchProcess:
                pass
        watcher.kill()
