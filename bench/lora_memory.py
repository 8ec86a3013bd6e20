"""Trainer memory and weight-sync bytes: LoRA vs full fine-tuning, on the same model.

    .venv/bin/python bench/lora_memory.py [--hidden 256] [--layers 4] [--rank 8] [--steps 3]

One random Qwen2 (:func:`rft.testing.tiny_model.build_tiny_model`, ``--hidden`` wide,
``--layers`` deep) and one GRPO batch (``--rows`` sequences of ``--prompt`` + ``--response``
random tokens, random 0/1 rewards, a KL loss to the reference model). Each contestant
runs in a fresh subprocess (one CPU thread) and does ``--steps`` train steps then one
weight sync's worth of gathering:

- ``full``: full fine-tuning (the reference model is a frozen copy of the actor);
- ``lora``: ``model.lora_configs`` with rank ``--rank`` (alpha ``2 × rank``) on
  ``all-linear`` (the reference is the actor with its adapter disabled: no copy).

Columns, per contestant:

- ``peak RSS MB``: growth of the process's peak resident memory (``VmHWM``, Linux) from
  just before the trainer was built to the end — what the trainer needed at its worst
  (resident set size, not ``tracemalloc``: torch allocates outside Python's allocator);
- ``state MB``: exact bytes of the training state: parameters (base + adapter),
  reference copy, gradients and Adam moments;
- ``trainable``: parameters the optimizer updates;
- ``sync KB``: bytes one weight sync moves to an engine (the whole weights, or the
  adapter: :meth:`rft.trainer.base.Trainer.adapter_weights`).

The printed ratios are LoRA / full. Nothing is asserted: numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any


def _vm(key: str) -> int:
    with open("/proc/self/status", encoding="utf-8") as handle:
        for line in handle:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def contestant(args: argparse.Namespace) -> dict[str, Any]:
    """One contestant in this process; returns its measurements."""
    import torch

    torch.set_num_threads(1)
    import rft_plugin_grpo
    import rft_plugin_rewards
    import rft_plugin_selectors
    import rft_plugin_workflows
    from rft.config import build_stages
    from rft.experience import EID, Experience
    from rft.plugins import PluginRegistry
    from rft.trainer.lora import is_peft
    from rft.trainer.torch_trainer import TorchTrainer

    registry = PluginRegistry.create(autoload=False, extra_plugins=[
        rft_plugin_grpo, rft_plugin_workflows, rft_plugin_rewards, rft_plugin_selectors])
    lora = ([{"lora_rank": args.rank, "lora_alpha": 2 * args.rank}]
            if args.contestant == "lora" else None)
    work = Path(args.work)
    plain = {
        "mode": "train", "checkpoint_root_dir": str(work / "ck"),
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 2, "optimizer": {"lr": 1e-4},
                      "kl_loss_fn": "k2"},
        "model": {"model_path": args.model, "max_prompt_tokens": args.prompt,
                  "max_response_tokens": args.response, "lora_configs": lora},
        "cluster": {"node_num": 1, "gpu_per_node": 0},
        "buffer": {"batch_size": args.rows // 2, "total_steps": args.steps,
                   "trainer_input": {"experience_buffer": {
                       "name": "exp", "storage_type": "sql", "path": str(work / "exp.db")}}},
        "explorer": {"rollout_model": {"engine_type": "hf"}},
        "synchronizer": {"sync_method": "checkpoint"},
        "trainer": {"trainer_type": "torch", "use_dynamic_bsz": False},
        "monitor": {"monitor_type": "jsonl"},
    }
    plan = build_stages(plain, registry).stages[0].plan.trainer_plan()
    g = torch.Generator().manual_seed(0)
    batch = [Experience(tokens=torch.randint(3, 900, (args.prompt + args.response,), generator=g),
                        prompt_length=args.prompt, reward=float(i % 2),
                        eid=EID(batch=0, task=i // 2, run=i % 2)) for i in range(args.rows)]
    before = _vm("VmRSS")
    trainer = TorchTrainer(plan)
    for _ in range(args.steps):
        trainer.train_step(batch)
    adapter = trainer.adapter_weights()
    if adapter is not None:
        sync_bytes = adapter.nbytes
    else:
        sync_bytes = sum(t.numel() * t.element_size() for _, t in trainer.named_weights())
    peak = _vm("VmHWM") - before

    def nbytes(tensors: Any) -> int:
        return sum(t.numel() * t.element_size() for t in tensors)

    params = nbytes(trainer.actor.parameters())
    grads = nbytes(p.grad for p in trainer.actor.parameters() if p.grad is not None)
    moments = nbytes(v for s in trainer.optimizer.state.values() for v in s.values()
                     if isinstance(v, torch.Tensor) and v.dim() > 0)
    reference = (nbytes(trainer.ref.parameters()) if trainer.ref is not None else 0)
    return {"peak_rss": peak, "state": params + grads + moments + reference,
            "params": params, "reference": reference, "moments": moments,
            "trainable": sum(p.numel() for p in trainer.actor.parameters() if p.requires_grad),
            "sync_bytes": sync_bytes, "peft": is_peft(trainer.actor)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--prompt", type=int, default=32)
    parser.add_argument("--response", type=int, default=32)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--contestant", choices=("full", "lora"), help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.contestant:  # a child: one contestant, its result as JSON on the last line
        print(json.dumps(contestant(args)))
        return
    from rft.testing.tiny_model import build_tiny_model

    with tempfile.TemporaryDirectory(prefix="rft-lora-bench-") as work:
        model = build_tiny_model(Path(work) / "model", hidden_size=args.hidden,
                                 num_layers=args.layers, num_heads=max(2, args.hidden // 64),
                                 num_kv_heads=max(1, args.hidden // 128), seed=0)
        results = {}
        for name in ("full", "lora"):
            command = [sys.executable, __file__, "--contestant", name, "--model", str(model),
                       "--work", str(Path(work) / name)] + [
                f"--{k}={getattr(args, k)}" for k in ("hidden", "layers", "rank", "rows",
                                                       "prompt", "response", "steps")]
            env = {**os.environ, "OMP_NUM_THREADS": "1"}
            out = subprocess.run(command, env=env, check=True, capture_output=True, text=True)
            results[name] = json.loads(out.stdout.strip().splitlines()[-1])
    full, lora = results["full"], results["lora"]
    print(f"model: hidden {args.hidden}, {args.layers} layers, "
          f"{full['params'] / 4 / 1e6:.2f} M parameters (fp32); LoRA rank {args.rank} on "
          f"all-linear; {args.steps} GRPO steps of {args.rows} × {args.prompt}+{args.response} "
          "tokens with a KL loss")
    rows = [("", "full", "lora", "lora / full"),
            ("peak RSS MB (VmHWM growth)", f"{full['peak_rss'] / 2**20:.1f}",
             f"{lora['peak_rss'] / 2**20:.1f}", f"{lora['peak_rss'] / full['peak_rss']:.3f}"),
            ("state MB (params+ref+grads+Adam)", f"{full['state'] / 2**20:.1f}",
             f"{lora['state'] / 2**20:.1f}", f"{lora['state'] / full['state']:.3f}"),
            ("  reference copy MB", f"{full['reference'] / 2**20:.1f}",
             f"{lora['reference'] / 2**20:.1f}", "-"),
            ("  Adam moments MB", f"{full['moments'] / 2**20:.2f}",
             f"{lora['moments'] / 2**20:.2f}", f"{lora['moments'] / full['moments']:.4f}"),
            ("trainable parameters", f"{full['trainable']:,}", f"{lora['trainable']:,}",
             f"{lora['trainable'] / full['trainable']:.4f}"),
            ("sync KB per engine", f"{full['sync_bytes'] / 1024:.1f}",
             f"{lora['sync_bytes'] / 1024:.1f}",
             f"{lora['sync_bytes'] / full['sync_bytes']:.4f}")]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for n, row in enumerate(rows):
        print("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)))
        if n == 0:
            print("  ".join("-" * w for w in widths))


if __name__ == "__main__":
    main()
