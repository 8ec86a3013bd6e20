"""The agent example (`make agent-example`): TextWorld games → SFT on walkthroughs → GRPO.

Steps (each skipped when its output is there, except the run):

1. games: ``rft_plugin_textworld.make_games`` (TextWorld's generator, offline, seed 1)
   writes ``<out>/games/{train,heldout}.jsonl`` and the ``.z8`` games;
2. SFT rows: each training game's walkthrough played through TextWorld's engine, as chats
   in environment_workflow's prompt format (``<out>/sft.jsonl``);
3. the model: a random tiny Qwen2 whose tokenizer is trained on the training games' text
   (``<out>/model``);
4. ``rft run examples/agent_textworld.yaml`` (stages ``sft`` then ``grpo``, each
   evaluating the held-out games before and after);
5. the table: held-out success rate before SFT / after SFT / after RL, printed and written
   to ``<out>/results.md``.

Usage::

    python examples/agent_textworld.py [--out runs/agent_textworld] [KEY=VALUE ...]

``KEY=VALUE`` are passed on to ``rft run`` (e.g. ``stages.1.buffer.total_steps=2``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CONFIG = HERE / "agent_textworld.yaml"
QUESTS = ("take", "open", "take_from")
"""Quest kinds of the example's games (rft_plugin_textworld.make_games.QUESTS)."""


def make_inputs(out: Path, *, count: int, heldout: int, seed: int,
                hidden_size: int) -> dict[str, float]:
    """Steps 1–3 of the module docstring; the seconds each took."""
    from rft.testing.tiny_model import build_tiny_model
    from rft_plugin_textworld import SYSTEM_PROMPT, TextWorldArgs, write_sft_rows
    from rft_plugin_textworld.make_games import CONTAINERS, OBJECTS, ROOMS, make_games

    seconds: dict[str, float] = {}
    games = out / "games"
    start = time.perf_counter()
    if not (games / "heldout.jsonl").is_file():
        make_games(games, count=count, heldout=heldout, seed=seed, quests=QUESTS)
    seconds["games"] = time.perf_counter() - start
    start = time.perf_counter()
    sft = out / "sft.jsonl"
    rows = write_sft_rows(games / "train.jsonl", sft, args=TextWorldArgs(game_dir=str(games)))
    seconds["sft_rows"] = time.perf_counter() - start
    start = time.perf_counter()
    if not (out / "model" / "config.json").is_file():
        corpus = [json.dumps(json.loads(line)["messages"]) for line in open(sft)]
        corpus += [SYSTEM_PROMPT, " ".join(OBJECTS + CONTAINERS + ROOMS)]
        build_tiny_model(out / "model", corpus=corpus, vocab_size=512, hidden_size=hidden_size)
    seconds["model"] = time.perf_counter() - start
    print(f"agent_textworld: {count - heldout} training and {heldout} held-out games in "
          f"{games}, {rows} walkthrough chats in {sft}, model in {out / 'model'}", flush=True)
    return seconds


def path_overrides(out: Path) -> list[str]:
    """``rft run`` overrides pointing the config's inputs at ``out`` (the config names
    ``runs/agent_textworld``)."""
    games = out / "games"
    return [f"model.model_path={out / 'model'}",
            f"buffer.explorer_input.eval_tasksets.0.path={games / 'heldout.jsonl'}",
            f"buffer.explorer_input.eval_tasksets.0.environment_args.game_dir={games}",
            f"stages.0.buffer.trainer_input.experience_buffer.path={out / 'sft.jsonl'}",
            f"stages.1.buffer.explorer_input.taskset.path={games / 'train.jsonl'}",
            f"stages.1.buffer.explorer_input.taskset.environment_args.game_dir={games}"]


def success_key(metrics: dict[str, Any]) -> str | None:
    """The held-out success-rate metric of a stage's evaluation."""
    for suffix in ("/env/success", "/success", "/reward/mean", "/accuracy"):
        keys = sorted(k for k in metrics if k.startswith("eval/heldout") and k.endswith(suffix))
        if keys:
            return keys[0]
    return None


def table(summary: dict[str, Any]) -> tuple[list[tuple[str, float | None]], str]:
    """``[(point, success rate)]`` before SFT / after SFT / after RL, and as markdown."""
    stages = {s["name"]: s for s in summary["stages"]}

    def value(stage: str, when: str) -> float | None:
        metrics = stages.get(stage, {}).get(when) or {}
        key = success_key(metrics)
        return None if key is None else float(metrics[key])

    points = [("before SFT", value("sft", "eval_before")),
              ("after SFT", value("sft", "eval_after")),
              ("after RL (GRPO)", value("grpo", "eval_after"))]
    lines = ["| held-out games | success rate |", "|---|---|"]
    lines += [f"| {name} | {'-' if v is None else f'{v:.3f}'} |" for name, v in points]
    return points, "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="runs/agent_textworld",
                        help="folder of the games, SFT rows, model and results.md")
    parser.add_argument("--config", default=str(CONFIG))
    parser.add_argument("--games", type=int, default=80, help="games in all")
    parser.add_argument("--heldout", type=int, default=32, help="held-out games of --games")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--hidden-size", type=int, default=128)
    parser.add_argument("overrides", nargs="*", help="KEY=VALUE overrides for rft run")
    args = parser.parse_args(argv)
    out = Path(args.out)
    start = time.perf_counter()
    seconds = make_inputs(out, count=args.games, heldout=args.heldout, seed=args.seed,
                          hidden_size=args.hidden_size)
    # each call makes its model afresh: a new run, not the last one resumed (the config
    # alone resumes by default, as every example does)
    overrides = [*path_overrides(out), "continue_from_checkpoint=false", *args.overrides]
    rft = [sys.executable, "-m", "rft.cli", "run", args.config, *overrides]
    run_start = time.perf_counter()
    code = subprocess.call(rft, env={**os.environ, "OMP_NUM_THREADS": "1"})
    seconds["rft_run"] = time.perf_counter() - run_start
    if code != 0:
        return code
    from rft.config.load import load_plain

    plain = load_plain(args.config, overrides)
    project = Path(plain.get("checkpoint_root_dir", "./checkpoints"), plain["project"],
                   plain.get("group") or "")
    # the job folder is <name> or <name>_<timestamp> (continue_from_checkpoint: false)
    summaries = sorted(project.glob(f"{plain['name']}*/summary.json"),
                       key=lambda p: p.stat().st_mtime)
    summary = json.loads(summaries[-1].read_text())
    _, markdown = table(summary)
    seconds["total"] = time.perf_counter() - start
    timing = ", ".join(f"{k} {v:.0f} s" for k, v in seconds.items())
    load = os.getloadavg()[0]
    report = f"{markdown}\n\nwall time: {timing}; load average at the end {load:.2f}\n"
    (out / "results.md").write_text(report)
    print("\n" + report, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
