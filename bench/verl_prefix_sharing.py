"""``trainer_type: verl`` with ``trainer.prefix_sharing`` on vs off, on CPU (veRL 0.9.1's
FSDP2 engines on rft's CPU platform, one rank, float32; ``--attention``: the models'
``attn_implementation``, eager as the plugin sets it on CPU by default, or sdpa).

    .venv/bin/python bench/verl_prefix_sharing.py [--hidden 256] [--layers 4] [--prompt 64]
        [--response 64] [--prompts 2] [--samples 8] [--steps 5] [--algorithms grpo,ppo]
        [--attention eager|sdpa]

A tiny Qwen2 (``rft.testing.tiny_model``, ``--hidden`` wide, ``--layers`` deep) and one GRPO
batch: ``--prompts`` prompts of ``--prompt`` random tokens, each with ``--samples``
responses of ``--response`` random tokens, all rows in one micro-batch. A *step* is the
verl trainer's ``train_step``: for ``grpo`` the reference model's and the actor's
log-prob passes and the actor's update; for ``ppo`` the critic's value pass and update
too — every one of them a veRL engine ``forward_step`` that packs the rows
(:mod:`rft_plugin_verl.packed_engine`) when on. On and off alternate in one process and
one trainer (load on the machine slows both alike), one thread.

Columns: median seconds per step off and on and their ratio (speed-up); *tokens*: the
tokens one forward computes (off: every row's valid tokens; on: the prefix tree's
nodes); *actor pass*: median seconds of the actor engine's ``forward_step`` and backward
alone over the same rows (the part of a step packing changes; the rest — veRL's batch
handling, FSDP, the optimizer — is the same either way). Nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch


def rollouts(prompts: int, samples: int, prompt: int, response: int, vocab: int,
             seed: int) -> list[Any]:
    """``prompts`` × ``samples`` experiences: each prompt shared by its ``samples`` rows."""
    from rft.experience import EID, Experience

    g = torch.Generator().manual_seed(seed)
    out = []
    for task in range(prompts):
        shared = torch.randint(3, vocab, (prompt,), generator=g)
        for run in range(samples):
            answer = torch.randint(3, vocab, (response,), generator=g)
            out.append(Experience(tokens=torch.cat([shared, answer]), prompt_length=prompt,
                                  reward=float((task + run) % 2),
                                  logprobs=-torch.rand(response, generator=g),
                                  eid=EID(batch=seed, task=task, run=run)))
    return out


def trainer_of(model: Path, folder: Path, algorithm: str, args: argparse.Namespace) -> Any:
    """A one-rank verl trainer of ``algorithm`` over the batch's shape."""
    from rft.config import build_stages
    from rft.plugins import PluginRegistry
    from rft.testing.runs import apply_overrides

    rows = args.prompts * args.samples
    config = {
        "mode": "train", "checkpoint_root_dir": str(folder / "ck"),
        "algorithm": {"algorithm_type": algorithm, "repeat_times": args.samples,
                      "optimizer": {"lr": 1e-5}},
        "model": {"model_path": str(model), "max_prompt_tokens": args.prompt,
                  "max_response_tokens": args.response},
        "cluster": {"node_num": 1, "gpu_per_node": 0},
        "buffer": {"batch_size": args.prompts, "total_steps": 1000, "trainer_input": {
            "experience_buffer": {"name": "exp", "storage_type": "sql",
                                  "path": str(folder / "exp.db")}}},
        "synchronizer": {"sync_method": "checkpoint"},
        "trainer": {"trainer_type": "verl", "use_dynamic_bsz": False,
                    "trainer_config": {
                        "actor_rollout_ref": {
                            "actor": {"ppo_micro_batch_size_per_gpu": rows},
                            "model": {"override_config": {
                                "attn_implementation": args.attention}}},
                        "critic": {"model": {"override_config": {
                            "attn_implementation": args.attention}}}}},
        "monitor": {"monitor_type": "jsonl"},
    }
    plan = build_stages(apply_overrides(config, {}), PluginRegistry.create()).stages[0].plan
    return plan.trainer.implementation(plan.trainer_plan())


def tokens(batch_rows: list[Any], pad: int) -> tuple[int, int]:
    """``(plain, packed)``: valid tokens of the rows, nodes of their prefix tree."""
    from rft.experience import pad_batch
    from rft.trainer.prefix_tree import pack_rows

    batch = pad_batch(batch_rows, pad)
    layout = pack_rows(batch.input_ids, batch.attention_mask, batch.position_ids,
                       batch.prompt_width)
    return int(batch.attention_mask.sum()), layout.tokens


def run(algorithm: str, model: Path, folder: Path, args: argparse.Namespace) -> dict[str, Any]:
    trainer = trainer_of(model, folder / algorithm, algorithm, args)
    try:
        times: dict[str, list[float]] = {"off": [], "auto": []}
        vocab = int(trainer.vocab_size or 1000)
        for step in range(args.steps + 1):  # the first pair warms up (and probes)
            batch = rollouts(args.prompts, args.samples, args.prompt, args.response, vocab,
                             seed=step)
            for mode in ("off", "auto") if step % 2 else ("auto", "off"):
                trainer.prefix_sharing = mode
                start = time.perf_counter()
                trainer.train_step(batch)
                if step:
                    times[mode].append(time.perf_counter() - start)
        plain, packed = tokens(batch, trainer.pad_token_id)
        passes = actor_pass_times(trainer, batch, args.steps)
    finally:
        trainer.close()
    off, on = statistics.median(times["off"]), statistics.median(times["auto"])
    return {"algorithm": algorithm, "off": off, "on": on, "ratio": off / on,
            "tokens_off": plain, "tokens_on": packed, "pass_off": passes["off"],
            "pass_on": passes["auto"]}


def actor_pass_times(trainer: Any, rows: list[Any], repeats: int) -> dict[str, float]:
    """Median seconds of the actor engine's ``forward_step`` and backward over the batch as
    one micro-batch (a loss summing its log-probs), off and on alternating."""
    from rft.experience import pad_batch
    from verl.utils import tensordict_utils as tu

    engine = trainer.actor_engine
    batch = pad_batch(rows, trainer.pad_token_id)

    def loss_function(model_output: dict[str, Any], data: Any, dp_group: Any = None
                      ) -> tuple[torch.Tensor, dict[str, Any]]:
        return model_output["log_probs"].values().sum(), {}

    times: dict[str, list[float]] = {"off": [], "auto": []}
    for repeat in range(repeats + 1):
        for mode in ("off", "auto") if repeat % 2 else ("auto", "off"):
            trainer.prefix_sharing = mode
            data = trainer._data(batch, {}, calculate_entropy=False, compute_loss=False)
            tu.assign_non_tensor(data, use_remove_padding=False, use_fused_kernels=False)
            with engine.train_mode():
                start = time.perf_counter()
                loss, _ = engine.forward_step(data, loss_function=loss_function,
                                              forward_only=False)
                loss.backward()
                if repeat:
                    times[mode].append(time.perf_counter() - start)
            engine.module.zero_grad()
    return {mode: statistics.median(values) for mode, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--response", type=int, default=64)
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--algorithms", default="grpo,ppo")
    parser.add_argument("--attention", default="eager", choices=("eager", "sdpa"),
                        help="the models' attention (the plugin's CPU default: eager)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    from rft.testing.tiny_model import build_tiny_model

    with tempfile.TemporaryDirectory(prefix="rft-bench-verl-") as tmp:
        folder = Path(tmp)
        model = build_tiny_model(folder / "model", hidden_size=args.hidden,
                                 num_layers=args.layers, num_heads=max(2, args.hidden // 32),
                                 num_kv_heads=max(1, args.hidden // 64))
        rows = [run(a, model, folder, args) for a in args.algorithms.split(",")]
    share = args.prompt / (args.prompt + args.response)
    print(f"\nverl backend, hidden {args.hidden} × {args.layers} layers, {args.prompts} prompts "
          f"× {args.samples} samples, prompt {args.prompt} + response {args.response} "
          f"(prompt {share:.0%} of a row), {args.attention} attention, median of {args.steps} "
          "steps, 1 thread")
    print(f"{'algorithm':<10}{'off s/step':>12}{'on s/step':>12}{'speed-up':>10}"
          f"{'tokens off':>12}{'tokens on':>11}{'actor pass off':>16}{'on':>8}{'speed-up':>10}")
    for r in rows:
        print(f"{r['algorithm']:<10}{r['off']:>12.3f}{r['on']:>12.3f}{r['ratio']:>9.2f}×"
              f"{r['tokens_off']:>12}{r['tokens_on']:>11}{r['pass_off']:>16.3f}"
              f"{r['pass_on']:>8.3f}{r['pass_off'] / r['pass_on']:>9.2f}×")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
