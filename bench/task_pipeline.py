"""Task-pipeline throughput (#34): tasks/s with 1 and 2 worker processes, and the rerun
time when every operator's output comes from the cache.

    .venv/bin/python bench/task_pipeline.py [--tasks 96] [--max-tokens 8]

The pipeline: ``exact_deduplicator`` → ``text_length_filter`` → ``llm_difficulty_score_filter``
scoring every task with the tiny Qwen2 model (random weights, float32, the ``hf`` engine on
the CPU, greedy, ``--max-tokens`` per reply, ``min_score: 0`` so every task is kept), on
``--tasks`` GSM8K questions (the shared copy in /work/shared/data, else generated ones).
One thread per process (``OMP_NUM_THREADS=1``). Three runs, each a fresh cache except the
last:

- ``1 process``: ``num_process: 1`` (the scorer in this process);
- ``2 processes``: ``num_process: 2`` (the row-wise operators' rows split over two spawned
  processes, each loading its own model: the spawn and the load are in the time);
- ``cached rerun``: the 1-process pipeline again on the same inputs and args: no operator
  runs, the outputs are read from the cache.

tasks/s = input tasks / wall seconds of ``run_task_pipeline`` (reading, operators, writing).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

os.environ["OMP_NUM_THREADS"] = "1"  # before torch, inherited by the spawned workers

GSM8K = Path("/work/shared/data/gsm8k/train.jsonl")


def questions(n: int) -> list[dict]:
    """``n`` GSM8K rows (the shared copy when present)."""
    if GSM8K.exists():
        return [json.loads(x) for x in GSM8K.read_text().splitlines()[:n]]
    return [{"question": f"Tom has {i} apples and buys {i + 2} more. How many now?",
             "answer": f"#### {2 * i + 2}"} for i in range(n)]


def run(source: Path, model: Path, root: Path, num_process: int, cache: str,
        max_tokens: int) -> tuple[float, int, bool]:
    """Seconds of one pipeline run, the tasks it kept, whether it was all cache."""
    from rft.config.schema import TaskPipelineConfig
    from rft.data.task_operator import TaskOperatorContext
    from rft.data.task_pipeline import PipelineOperator, run_task_pipeline
    from rft_plugin_data_ops.dedup import ExactDeduplicator
    from rft_plugin_data_ops.difficulty import DifficultyArgs, LLMDifficultyScoreFilter
    from rft_plugin_data_ops.length import TextLengthArgs, TextLengthFilter

    key = "data_processor.task_pipeline.operators"
    operators = [
        PipelineOperator(f"{key}[0]", "exact_deduplicator", ExactDeduplicator()),
        PipelineOperator(f"{key}[1]", "text_length_filter",
                         TextLengthFilter(TextLengthArgs(min_len=10))),
        PipelineOperator(f"{key}[2]", "llm_difficulty_score_filter", LLMDifficultyScoreFilter(
            DifficultyArgs(api_or_hf_model=str(model), min_score=0.0,
                           input_keys=["question"], field_names=["Question"],
                           max_tokens=max_tokens))),
    ]
    started = time.perf_counter()
    report = run_task_pipeline(
        TaskPipelineConfig(inputs=[str(source)], num_process=num_process), operators,
        output_path=str(root / f"out_{num_process}.jsonl"), cache_dir=cache,
        context=TaskOperatorContext(str(root)))
    return time.perf_counter() - started, report.rows_out, all(c.cached for c in report.counts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=96)
    parser.add_argument("--max-tokens", type=int, default=8)
    args = parser.parse_args()

    import torch

    from rft.testing.tiny_model import build_tiny_model

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model = build_tiny_model(root / "tiny", seed=0)
        source = root / "tasks.jsonl"
        source.write_text("".join(json.dumps(r) + "\n" for r in questions(args.tasks)))
        results = [("1 process", *run(source, model, root, 1, str(root / "c1"), args.max_tokens)),
                   ("2 processes",
                    *run(source, model, root, 2, str(root / "c2"), args.max_tokens)),
                   ("cached rerun",
                    *run(source, model, root, 1, str(root / "c1"), args.max_tokens))]
    base = results[0][1]
    print(f"task pipeline, {args.tasks} GSM8K tasks, tiny model scorer ({args.max_tokens} "
          f"tokens/reply), {os.cpu_count()} CPUs")
    print(f"{'run':<14}{'seconds':>9}{'tasks/s':>10}{'vs 1 process':>14}{'kept':>6}{'cached':>8}")
    for name, seconds, kept, cached in results:
        print(f"{name:<14}{seconds:>9.2f}{args.tasks / seconds:>10.1f}{base / seconds:>13.2f}x"
              f"{kept:>6}{'yes' if cached else 'no':>8}")


if __name__ == "__main__":
    main()
