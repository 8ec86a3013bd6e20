"""The figures README's "What `make quickstart` does" and "Mode `both` on a CPU" state,
measured by running the examples as ``make quickstart`` / ``make both-example`` do.

    .venv/bin/python bench/readme_figures.py                     # the whole quickstart
    .venv/bin/python bench/readme_figures.py --example both_cpu  # the `both` example
    .venv/bin/python bench/readme_figures.py --stage grpo --steps 40 --no-eval
    .venv/bin/python bench/readme_figures.py --stage grpo --steps 30 --no-eval \\
        --compare-budget --repeat 2                               # token budget A/B

Each run is one ``rft run`` process (``OMP_NUM_THREADS=1``, as the Makefile) on a copy of
the quickstart's YAML (fresh job dir under ``--workdir``); the tiny model and the data are
made first when missing, as ``make quickstart`` makes them. Printed, in the README's units:

- wall time of the process (s and min), each stage's seconds (``summary.json``: the
  stage's duration, evaluations included) and the GRPO stage's s/step (its seconds / its
  steps, as the README divides them);
- steady per-step time: (time of the last − the first logged train step) / (steps − 1)
  from ``trainer.jsonl`` (start-up, evaluations before/after and the first step left out);
  and the mean ``timing_s/update_actor``;
- peak memory: the process's maximum resident set (``wait4``'s ``ru_maxrss``), GB (in
  mode ``both`` that of the driver alone: the Ray actors are not its children);
- held-out accuracy before → after each stage (``summary.json``).

``--stage grpo`` runs the GRPO stage alone from the random tiny model (no SFT warm-up:
its accuracies are not the README's, its timings are). ``--compare-budget`` alternates runs
with the derived ``trainer.max_token_len_per_gpu`` (rft's rule) and with Trinity-RFT's
``2 · max_model_len`` under the same load (A, B, A, B, …) and prints the ratio of their
per-step times. Note the machine's load next to the figures: they move with it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from rft.config.token_budget import derived_budget

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = {"quickstart": ("runs/tiny-qwen2", []),
            "both_cpu": ("runs/tiny-qwen2-hd32", ["--num-heads", "2", "--num-kv-heads", "1"])}
"""Example → its tiny model and the ``rft tiny-model`` options that make it (Makefile)."""
RFT = [sys.executable, "-m", "rft.cli"]
TRAIN_ROWS = 16 * 8
"""Rows of a GRPO step of both examples (batch_size x repeat_times)."""


def prepare(example: str) -> None:
    """The tiny model and the data, as the Makefile makes them."""
    model, options = EXAMPLES[example]
    if not (ROOT / model).is_dir():
        subprocess.run([*RFT, "tiny-model", model, *options], cwd=ROOT, check=True)
    if not (ROOT / "examples/data/max_digit/heldout.jsonl").is_file():
        subprocess.run([sys.executable, "examples/make_quickstart_data.py"], cwd=ROOT,
                       check=True)


def example_config(example: Path, workdir: Path, name: str, stage: str | None,
                   steps: int | None, eval_: bool, budget: int | None) -> Path:
    """A copy of the example's YAML: its own job dir; only ``stage`` when given; the
    GRPO stage cut to ``steps``; no eval tasksets without ``eval_``; ``budget`` as
    ``trainer.max_token_len_per_gpu`` (``None``: derived)."""
    config: dict[str, Any] = yaml.safe_load(example.read_text())
    config["name"] = name
    config["continue_from_checkpoint"] = True  # a new name each run: the job dir is <name>
    config["checkpoint_root_dir"] = str(workdir / "checkpoints")
    if stage is not None:
        config["stages"] = [s for s in config["stages"] if s["stage_name"] == stage]
        if not config["stages"]:
            raise SystemExit(f"--stage: no stage {stage!r} in {example}")
    for s in config["stages"]:
        if steps is not None and s["stage_name"] == "grpo":
            s["buffer"]["total_steps"] = steps
    if not eval_:
        config["buffer"]["explorer_input"].pop("eval_tasksets", None)
    if budget is not None:
        config["trainer"]["max_token_len_per_gpu"] = budget
    if config.get("mode") == "both" or any(s.get("mode") == "both" for s in config["stages"]):
        # a private Ray cluster: the default `auto` joins any cluster running on this
        # machine, whose workers run that cluster's code and environment
        config["cluster"]["ray_address"] = "local"
    path = workdir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def run_once(workdir: Path, name: str, config: Path, budget: int) -> dict[str, Any]:
    """Run ``rft run config`` from the repository root; its figures."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    log = open(workdir / f"{name}.log", "w", encoding="utf-8")
    started = time.monotonic()
    process = subprocess.Popen([*RFT, "run", str(config)], cwd=ROOT, env=env, stdout=log,
                               stderr=subprocess.STDOUT)
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - started
    log.close()
    if process.returncode != 0:
        raise SystemExit(f"{name}: rft run exited {process.returncode}; see {log.name}")
    project = yaml.safe_load(config.read_text())["project"]
    job = workdir / "checkpoints" / project / name
    summary = json.loads((job / "summary.json").read_text())
    figures: dict[str, Any] = {"wall_s": wall, "peak_gb": usage.ru_maxrss * 1024 / 1e9,
                               "stages": {}}
    for stage in summary["stages"]:
        entry = {"seconds": stage["seconds"], "steps": stage["steps"],
                 "before": stage["eval_before"].get("eval/heldout/accuracy"),
                 "after": stage["eval_after"].get("eval/heldout/accuracy")}
        entry.update(step_times(job / stage["name"] / "monitor" / "trainer.jsonl",
                                budget if stage["name"] == "grpo" else None))
        figures["stages"][stage["name"]] = entry
    return figures


def step_times(path: Path, budget: int | None = None) -> dict[str, float]:
    """Steady per-step time and mean ``timing_s/update_actor`` of a ``trainer.jsonl``; with
    the token ``budget``, the micro-batches per step its rows of mean length make
    (``⌈rows / ⌊budget / mean length⌋⌉``, rows = the step's ``train_batch_size``)."""
    if not path.is_file():
        return {}
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    steps = [r for r in records if "timing_s/step" in r.get("metrics", {})]
    out: dict[str, float] = {}
    if len(steps) > 1:
        out["steady_s_per_step"] = (steps[-1]["time"] - steps[0]["time"]) / (len(steps) - 1)
    updates = [r["metrics"]["timing_s/update_actor"] for r in steps
               if "timing_s/update_actor" in r["metrics"]]
    if updates:
        out["update_actor_s"] = statistics.fmean(updates)
    lengths = [r["metrics"]["prompt_length/mean"] + r["metrics"]["response_length/mean"]
               for r in steps if "prompt_length/mean" in r["metrics"]]
    if budget and lengths:
        per_micro = max(1, int(budget // statistics.fmean(lengths)))
        out["micro_batches"] = math.ceil(TRAIN_ROWS / per_micro)
    return out


def print_figures(label: str, figures: dict[str, Any]) -> None:
    print(f"{label}: wall {figures['wall_s']:.0f} s ({figures['wall_s'] / 60:.1f} min), "
          f"peak memory {figures['peak_gb']:.2f} GB")
    for name, s in figures["stages"].items():
        parts = [f"  {name}: {s['seconds']:.1f} s for {s['steps']} steps "
                 f"({s['seconds'] / s['steps']:.3f} s/step)"]
        if "steady_s_per_step" in s:
            parts.append(f"steady {s['steady_s_per_step']:.3f} s/step")
        if "update_actor_s" in s:
            parts.append(f"update_actor {s['update_actor_s']:.3f} s")
        if "micro_batches" in s:
            parts.append(f"~{s['micro_batches']:.0f} micro-batches/step")
        if s["before"] is not None or s["after"] is not None:
            fmt = lambda x: "-" if x is None else f"{x:.3f}"  # noqa: E731
            parts.append(f"held-out accuracy {fmt(s['before'])} -> {fmt(s['after'])}")
        print(", ".join(parts))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--example", choices=sorted(EXAMPLES), default="quickstart")
    parser.add_argument("--stage", choices=["sft", "grpo"], help="run this stage alone")
    parser.add_argument("--steps", type=int, help="GRPO steps (default: the YAML's 400)")
    parser.add_argument("--no-eval", action="store_true", help="leave out the evaluations")
    parser.add_argument("--compare-budget", action="store_true",
                        help="alternate derived and Trinity (2 x max_model_len) budgets")
    parser.add_argument("--repeat", type=int, default=1, help="runs (per budget)")
    parser.add_argument("--workdir", help="where the runs go (default: a temporary folder)")
    args = parser.parse_args(argv)
    prepare(args.example)
    example = ROOT / "examples" / f"{args.example}.yaml"
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="rft_readme_figures_"))
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())} "
          f"({os.cpu_count()} CPUs); runs in {workdir}", flush=True)
    model = yaml.safe_load(example.read_text())["model"]
    max_model_len = model["max_prompt_tokens"] + model["max_response_tokens"]
    derived = derived_budget(max_model_len, TRAIN_ROWS).tokens
    variants: list[tuple[str, int | None]] = [("derived", None)]
    if args.compare_budget:
        variants.append(("trinity", 2 * max_model_len))
    results: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in variants}
    for n in range(args.repeat):
        for label, budget in variants:
            name = f"{label}_{n}"
            config = example_config(example, workdir, name, args.stage, args.steps,
                                    not args.no_eval, budget)
            figures = run_once(workdir, name, config, budget or derived)
            results[label].append(figures)
            print_figures(f"{name} (budget {budget or 'derived'})", figures)
            print(f"  load average now: {os.getloadavg()[0]:.2f}", flush=True)
    if args.compare_budget:
        stage = "grpo" if "grpo" in results["derived"][0]["stages"] else None
        if stage is None:
            return 0

        def mean(label: str, key: str) -> float:
            return statistics.fmean(r["stages"][stage][key] for r in results[label])

        for key in ("steady_s_per_step", "update_actor_s", "micro_batches"):
            d, t = mean("derived", key), mean("trinity", key)
            print(f"{key}: derived {d:.3f}, trinity {t:.3f}, trinity / derived = {t / d:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
