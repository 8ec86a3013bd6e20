"""How much of exploring and training mode ``both`` overlaps: per-step wall time of
``both`` with ``sync_offset`` 0 and 1 against explore-only and train-only runs.

    .venv/bin/python bench/overlap.py [--steps 10] [--engine vllm] [--batch-size 4]
                                      [--repeat 4] [--max-tokens 32] [--ppo-epochs 4]
                                      [--sync-method nccl|memory]

One tiny Qwen2 model (head size 32, random weights, float32), one thread per process
(``OMP_NUM_THREADS=1``), the real plugins (GRPO, ``simple_workflow``, ``accuracy_reward``):

1. ``explore`` mode alone for ``--steps`` steps, writing to a SQLite buffer (no trainer:
   the explorer keeps its weights);
2. ``train`` mode alone for ``--steps`` steps, reading that buffer;
3. ``both`` with ``sync_offset: 0`` (explore, train, sync, in turn: no overlap possible);
4. ``both`` with ``sync_offset: 1`` (the explorer runs one step ahead: exploring step
   ``s + 1`` overlaps training step ``s``);
5. a contention reference: an ``explore`` run and a ``train`` run (reading run 1's buffer)
   as two ``rft run`` processes at the same time, nothing exchanged — what the two sides
   cost each other on this machine's cores and memory, with no coordination at all.

Per-step time of a run = time between its first and last logged step / (steps − 1), from
the ``time`` of the jsonl monitor's records (the trainer's in ``train`` and ``both``, the
explorer's in ``explore``): start-up (Ray, engines, models) and the first step's warm-up are
left out. Prints each, and each ``both`` run / max(explore-only, train-only) — target for
``sync_offset: 1``: ≤ 1.15 (the two sides overlap; ideal 1.0), against which
``sync_offset: 0`` shows the serial cost (≈ (explore + train + sync) / max) — and
``sync_offset: 1`` / max(the two sides of run 5): rft's own share of the overlap cost.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path
from typing import Any

os.environ["OMP_NUM_THREADS"] = "1"  # before torch: every process of the runs uses one thread


def tasks_file(directory: Path, count: int = 64) -> Path:
    path = directory / "tasks.jsonl"
    path.write_text("".join(json.dumps({"question": f"{i} + {i % 7} =", "answer": str(i + i % 7)})
                            + "\n" for i in range(count)))
    return path


def config(directory: Path, model: Path, tasks: Path, mode: str, name: str,
           args: argparse.Namespace, **sync: Any) -> Path:
    """One run's config (``sync`` overrides the synchronizer section)."""
    engine: dict[str, Any] = {"engine_type": args.engine, "dtype": "float32"}
    if args.engine == "vllm":
        engine["extra_engine_args"] = {"kv_cache_memory_bytes": 128 << 20}
    buffer: dict[str, Any] = {"name": "exp", "storage_type": "sql",
                              "path": str(directory / "exp.db"), "max_read_timeout": 300}
    if mode == "both":
        buffer = {"name": "exp", "storage_type": "queue"}
    data = {
        "project": "overlap", "name": name, "mode": mode,
        "checkpoint_root_dir": str(directory / "ck"),
        "algorithm": {"algorithm_type": "grpo", "repeat_times": args.repeat,
                      "optimizer": {"lr": 1e-4}},
        "model": {"model_path": str(model), "max_prompt_tokens": 64,
                  "max_response_tokens": args.max_tokens},
        "cluster": {"node_num": 1, "gpu_per_node": 0, "ray_address": "local"},
        "buffer": {"batch_size": args.batch_size, "total_steps": args.steps,
                   "explorer_input": {"taskset": {
                       "name": "train", "path": str(tasks),
                       "format": {"prompt_key": "question", "response_key": "answer"},
                       "default_workflow_type": "simple_workflow",
                       "default_reward_fn_type": "accuracy_reward"}},
                   "trainer_input": {"experience_buffer": buffer}},
        "explorer": {"eval_interval": 1000, "rollout_model": engine},
        "synchronizer": {"sync_method": args.sync_method if mode == "both" else "checkpoint",
                         "sync_interval": 1, **sync},
        "trainer": {"trainer_type": "torch", "save_interval": 0, "trainer_config": {
            "actor_rollout_ref": {"actor": {"ppo_epochs": args.ppo_epochs}}}},
        "monitor": {"monitor_type": "jsonl"},
    }
    path = directory / f"{name}.yaml"
    path.write_text(json.dumps(data))
    return path


def per_step_seconds(directory: Path, name: str, side: str) -> float:
    """(time of the last logged step − time of the first) / (steps − 1)."""
    path = directory / "ck" / "overlap" / name / "monitor" / f"{side}.jsonl"
    times = [json.loads(line)["time"] for line in path.read_text().splitlines()]
    return (times[-1] - times[0]) / (len(times) - 1)


def copy_buffer(source: Path, target: Path) -> None:
    """A consistent copy of a SQLite experience buffer (WAL included)."""
    import sqlite3

    target.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(source) as src, sqlite3.connect(target) as dst:
        src.backup(dst)


def concurrent_sides(directory: Path, model: Path, tasks: Path,
                     args: argparse.Namespace) -> tuple[float, float]:
    """Per-step seconds of an explorer and a trainer running at once as two processes (the
    trainer reads a copy of the ``explore_only`` run's buffer, the explorer writes another)."""
    import subprocess
    import sys

    rft = str(Path(sys.executable).with_name("rft"))
    explore_dir, train_dir = directory / "explore_at_once", directory / "train_at_once"
    explore_dir.mkdir()
    explore = config(explore_dir, model, tasks, "explore", "explore_at_once", args)
    train = config(train_dir, model, tasks, "train", "train_at_once", args,
                   wait_for_checkpoint=False)
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    processes = [subprocess.Popen([rft, "run", str(path)], env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL) for path in (explore, train)]
    if any(p.wait(timeout=1800) != 0 for p in processes):
        raise SystemExit("the concurrent explore / train runs failed")
    return (per_step_seconds(explore_dir, "explore_at_once", "explorer"),
            per_step_seconds(train_dir, "train_at_once", "trainer"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--engine", default="vllm", choices=("vllm", "hf"))
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--ppo-epochs", type=int, default=4)
    parser.add_argument("--sync-method", default="nccl", choices=("nccl", "memory"),
                        help="weights in the both runs: broadcast (gloo on CPU) or object store")
    args = parser.parse_args()

    import torch

    from rft.config import load_config
    from rft.launcher import run
    from rft.testing.tiny_model import build_tiny_model

    torch.set_num_threads(1)
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        model = build_tiny_model(directory / "model", seed=0, hidden_size=64, num_heads=2,
                                 num_kv_heads=1)
        tasks = tasks_file(directory)
        runs = [("explore_only", "explore", "explorer", {}),
                ("train_only", "train", "trainer", {"wait_for_checkpoint": False}),
                ("both_offset0", "both", "trainer", {"sync_offset": 0}),
                ("both_offset1", "both", "trainer", {"sync_offset": 1})]
        seconds: dict[str, float] = {}
        for name, mode, side, sync in runs:
            run(load_config(config(directory, model, tasks, mode, name, args, **sync)))
            seconds[name] = per_step_seconds(directory, name, side)
            if name == "explore_only":  # the contention reference's trainer reads a copy
                copy_buffer(directory / "exp.db", directory / "train_at_once" / "exp.db")
        at_once = concurrent_sides(directory, model, tasks, args)
    alone = max(seconds["explore_only"], seconds["train_only"])
    print(f"\n{args.steps} steps, {args.batch_size} tasks x {args.repeat} rollouts x "
          f"{args.max_tokens} tokens, engine {args.engine}, {args.ppo_epochs} PPO epochs, "
          f"sync_method {args.sync_method}, 1 thread per process")
    print(f"{'run':<14} {'s/step':>8} {'/ max(explore, train)':>22}")
    for name, value in seconds.items():
        ratio = f"{value / alone:.2f}" if name.startswith("both") else "-"
        print(f"{name:<14} {value:8.3f} {ratio:>22}")
    print(f"{'explore, train at once (contention reference)':<14}: explorer "
          f"{at_once[0]:.3f}, trainer {at_once[1]:.3f} s/step; both_offset1 / their max = "
          f"{seconds['both_offset1'] / max(at_once):.2f}")
    print(f"target: both_offset1 <= 1.15 x max(explore_only, train_only): "
          f"{'met' if seconds['both_offset1'] <= 1.15 * alone else 'NOT met'}")


if __name__ == "__main__":
    main()
