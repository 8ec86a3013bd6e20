"""Training throughput and memory of the native trainer on 1 and N FSDP2 ranks.

    .venv/bin/python bench/trainer_scaling.py                      # CPU: 1 vs 2 ranks (gloo)
    .venv/bin/python bench/trainer_scaling.py --device cuda --ranks 1 2 4 8 --model qwen2-0.5b

Every configuration runs as Ray actors (``RankedTrainer``, one process per rank, 1 rank
included, so every row has the same process layout), one GRPO step per ``--steps`` on the
same batch of ``--rows`` sequences of ``--prompt`` + ``--response`` tokens (random ids,
random 0/1 rewards), ``ppo_epochs`` 1, one mini-batch, dynamic micro-batches. Per row:

- ``tokens/s``: Σ sequence lengths of the batch / median step time (the first step, a
  warm-up, left out), for the whole trainer (all ranks);
- ``state MB/rank``: what each rank holds of the training state — its shards of the
  actor's parameters, gradients and Adam moments (exact bytes; on the GPU the device
  bytes, offloaded ones excluded);
- ``peak MB/rank``: CPU: growth of the rank process's peak resident memory from before
  the model was built to the end (``VmHWM``); GPU: ``torch.cuda.max_memory_allocated``;
- ``MFU`` (GPU only): model FLOPs per second / ``--peak-tflops`` per GPU, with training
  FLOPs per token ``6·N + 12·L·d·s`` (N parameters without the embedding, L layers, width d,
  sequence length s).

``--offload`` adds rows with ``param_offload`` + ``optimizer_offload`` (FSDP2's
``CPUOffloadPolicy``; on a CPU it changes nothing: the parameters are already in host
memory), ``--checkpointing`` rows with gradient checkpointing.

The GPU mode (``--device cuda``) has not been run: no GPU was available where this was
written. Its model ``qwen2-0.5b`` is Qwen2-0.5B's shape (24 layers, width 896, 14 heads,
2 KV heads, MLP 4864, vocabulary 151936, tied embeddings) with random weights, bf16
compute (FSDP2 mixed precision), fp32 master weights.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

MODELS: dict[str, dict[str, int]] = {
    "small": {"hidden_size": 256, "num_layers": 4, "num_heads": 4, "num_kv_heads": 2},
    "medium": {"hidden_size": 512, "num_layers": 8, "num_heads": 8, "num_kv_heads": 2},
}
"""CPU models (the tiny model's BPE tokenizer, random weights)."""

QWEN2_05B = {"hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
             "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936,
             "tie_word_embeddings": True, "max_position_embeddings": 32768,
             "rope_theta": 1000000.0, "rms_norm_eps": 1e-6}


def build_model(name: str, directory: Path) -> Path:
    if name == "qwen2-0.5b":
        import torch
        from transformers import Qwen2Config, Qwen2ForCausalLM

        torch.manual_seed(0)
        Qwen2ForCausalLM(Qwen2Config(**QWEN2_05B)).save_pretrained(directory)
        return directory
    from rft.testing.tiny_model import build_tiny_model

    return build_tiny_model(directory, seed=0, **MODELS[name])


def trainer_plan(model: Path, directory: Path, ranks: int, args: argparse.Namespace, *,
                 offload: bool, checkpointing: bool) -> Any:
    import rft_plugin_grpo
    from rft.config import build_stages
    from rft.plugins import PluginRegistry

    tree: dict[str, Any] = {"torch": {"device": args.device}}
    if offload:
        tree["actor_rollout_ref"] = {"actor": {"fsdp_config": {"param_offload": True,
                                                               "optimizer_offload": True}}}
    if checkpointing:
        tree.setdefault("actor_rollout_ref", {})["model"] = {
            "enable_gradient_checkpointing": True}
    gpus = 1 if args.device == "cuda" else 0
    plain = {
        "mode": "train", "checkpoint_root_dir": str(directory / "ck"),
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 2,
                      "kl_loss_fn": "none", "optimizer": {"lr": 1e-6}},
        "model": {"model_path": str(model), "max_prompt_tokens": args.prompt,
                  "max_response_tokens": args.response},
        "cluster": {"node_num": 1, "gpu_per_node": ranks if gpus else 0},
        "buffer": {"batch_size": args.rows // 2, "total_steps": args.steps,
                   "trainer_input": {"experience_buffer": {
                       "name": "exp", "storage_type": "sql", "path": str(directory / "e.db")}}},
        "explorer": {"rollout_model": {"engine_type": "hf"}},
        "synchronizer": {"sync_method": "checkpoint"},
        "trainer": {"trainer_type": "torch", "cpu_ranks": ranks, "use_dynamic_bsz": True,
                    "max_token_len_per_gpu": args.token_budget, "trainer_config": tree},
        "monitor": {"monitor_type": "jsonl"},
    }
    registry = PluginRegistry.create(autoload=False, extra_plugins=[rft_plugin_grpo])
    plan = build_stages(plain, registry).stages[0].plan.trainer_plan()
    return plan


def batch(args: argparse.Namespace, vocab: int) -> list[Any]:
    import torch
    from rft.experience import EID, Experience

    g = torch.Generator().manual_seed(0)
    out = []
    for i in range(args.rows):
        tokens = torch.randint(3, vocab, (args.prompt + args.response,), generator=g)
        out.append(Experience(tokens=tokens, prompt_length=args.prompt,
                              reward=float(torch.rand(1, generator=g).item() > 0.5),
                              eid=EID(batch=0, task=i // 2, run=i % 2)))
    return out


def _rank_state_bytes(rank: Any) -> int:
    """On a rank: the bytes of its shards of the actor's parameters, gradients and Adam
    moments that live on the compute device."""
    import torch

    trainer = rank.trainer
    device = trainer.options.device

    def local(t: Any) -> Any:
        return t.to_local() if hasattr(t, "to_local") else t

    tensors = [t for p in trainer.actor.parameters() for t in (p, p.grad) if t is not None]
    tensors += [t for moments in trainer.optimizer.state.values() for t in moments.values()
                if isinstance(t, torch.Tensor) and t.dim()]
    return sum(local(t).numel() * local(t).element_size() for t in tensors
               if local(t).device.type == device.type)


def run_case(model: Path, ranks: int, args: argparse.Namespace, *, offload: bool,
             checkpointing: bool) -> dict[str, Any]:
    from rft.trainer.ranks import RankedTrainer
    from rft.trainer.torch_trainer import TorchTrainer

    with tempfile.TemporaryDirectory() as tmp:
        plan = trainer_plan(model, Path(tmp), ranks, args, offload=offload,
                            checkpointing=checkpointing)
        trainer = RankedTrainer(plan, TorchTrainer)  # 1 rank too: the same process layout
        try:
            vocab = int(trainer.call_rank0(lambda r: r.trainer.vocab_size))
            experiences = batch(args, vocab)
            tokens = sum(e.tokens.numel() for e in experiences)
            times = []
            for _ in range(args.steps):
                started = time.perf_counter()
                trainer.train_step(experiences)
                times.append(time.perf_counter() - started)
            state = trainer.call_all(_rank_state_bytes)
            memory = trainer.memory()
            params = trainer.call_rank0(_count_parameters)
        finally:
            trainer.close()
    seconds = statistics.median(times[1:] if len(times) > 1 else times)
    row = {"ranks": ranks, "offload": offload, "checkpointing": checkpointing,
           "tokens_per_s": tokens / seconds, "step_s": seconds,
           "state_mb_per_rank": max(state) / 2**20,
           "peak_mb_per_rank": max(m.get("peak_cuda", m["peak_rss"] - m["rss_at_start"])
                                   for m in memory) / 2**20}
    if args.device == "cuda":
        flops_per_token = 6 * params["non_embedding"] + 12 * params["layers"] * \
            params["width"] * (args.prompt + args.response)
        row["mfu"] = flops_per_token * tokens / seconds / (ranks * args.peak_tflops * 1e12)
    return row


def _count_parameters(rank: Any) -> dict[str, int]:
    config = rank.trainer.actor.config
    total = sum(p.numel() for p in rank.trainer.actor.parameters())  # DTensor: global numel
    embedding = config.vocab_size * config.hidden_size
    return {"non_embedding": total - embedding, "layers": config.num_hidden_layers,
            "width": config.hidden_size}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--model", default="small", choices=[*MODELS, "qwen2-0.5b"])
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--prompt", type=int, default=32)
    parser.add_argument("--response", type=int, default=96)
    parser.add_argument("--token-budget", type=int, default=1024,
                        help="trainer.max_token_len_per_gpu")
    parser.add_argument("--offload", action="store_true")
    parser.add_argument("--checkpointing", action="store_true")
    parser.add_argument("--peak-tflops", type=float, default=989.0,
                        help="dense bf16 peak per GPU (H100 SXM: 989)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args()

    import ray

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    cpus = max(args.ranks) if args.device == "cpu" else None
    ray.init(num_cpus=cpus, include_dashboard=False, _node_ip_address="127.0.0.1",
             runtime_env={"env_vars": {"OMP_NUM_THREADS": os.environ["OMP_NUM_THREADS"]}},
             log_to_driver=False)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        model = build_model(args.model, Path(tmp) / "model")
        cases = [(False, False)]
        if args.offload:
            cases.append((True, False))
        if args.checkpointing:
            cases.append((False, True))
        for offload, checkpointing in cases:
            for ranks in args.ranks:
                rows.append(run_case(model, ranks, args, offload=offload,
                                     checkpointing=checkpointing))
    ray.shutdown()
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    base = {(r["offload"], r["checkpointing"]): r for r in rows if r["ranks"] == min(args.ranks)}
    print(f"model {args.model}, {args.device}, batch {args.rows} × ({args.prompt} + "
          f"{args.response}) tokens, OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}")
    header = (f"{'ranks':>5} {'offload':>7} {'ckpt':>5} {'tokens/s':>10} {'speed-up':>8} "
              f"{'state MB/rank':>13} {'ratio':>6} {'peak MB/rank':>12} {'ratio':>6}")
    if args.device == "cuda":
        header += f" {'MFU':>6}"
    print(header)
    for r in rows:
        b = base[(r["offload"], r["checkpointing"])]
        line = (f"{r['ranks']:>5} {r['offload']!s:>7} {r['checkpointing']!s:>5} "
                f"{r['tokens_per_s']:>10.0f} {r['tokens_per_s'] / b['tokens_per_s']:>8.2f} "
                f"{r['state_mb_per_rank']:>13.1f} "
                f"{r['state_mb_per_rank'] / b['state_mb_per_rank']:>6.2f} "
                f"{r['peak_mb_per_rank']:>12.1f} "
                f"{r['peak_mb_per_rank'] / max(b['peak_mb_per_rank'], 1e-9):>6.2f}")
        if "mfu" in r:
            line += f" {r['mfu']:>6.1%}"
        print(line)


if __name__ == "__main__":
    main()
