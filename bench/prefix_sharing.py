"""Trainer prefix sharing on vs off, on the paths GPU users run (on CPU): float32, bf16
autocast, LoRA, two FSDP2 ranks, and multi-turn episodes.

    .venv/bin/python bench/prefix_sharing.py [--hidden 256] [--layers 4] [--prompt 64]
        [--response 64] [--prompts 2] [--samples 8] [--steps 6] [--which fp32,bf16,...]

One random Qwen2 (``--hidden`` wide, ``--layers`` deep, sdpa attention) and one GRPO
batch: ``--prompts`` prompts of ``--prompt`` random tokens, each with ``--samples``
responses of ``--response`` random tokens (the prompt is ``prompt / (prompt + response)``
of each row). A *step* is the trainer's actor pass: ``rft.trainer.models.
response_logprobs`` (the torch trainer's own forward, ``shared_prompts`` on or off:
``trainer.prefix_sharing: auto | off``), a policy-gradient loss over the response tokens,
``backward`` and an AdamW step. On and off alternate within one process (load on the
machine slows both alike); each contestant runs in a fresh subprocess with one thread.

Contestants (``--which``): ``fp32``; ``bf16`` (``torch.autocast(cpu, bfloat16)``, float32
master weights, as ``trainer_config.torch.dtype: bfloat16``); ``lora`` (peft, rank 8 on
every linear layer, plus gradient checkpointing); ``fsdp2`` (two gloo ranks, the model
``fully_shard``-ed per layer, each rank half of the prompts: rank 0's times); ``multiturn``
(``--episodes`` episodes of 5 turns, one row per turn whose prompt is the episode's
history: tree-packed vs one row per turn).

Columns: median seconds per step off and on and their ratio (speed-up); *tokens*: the
tokens the forward computes (off: every row's valid tokens; on: the prefix tree's
nodes); *act MB*: bytes saved for backward in one step (``saved_tensors_hooks``: the
activation memory of a step, exact and independent of load; peak RSS would mix the two
modes). Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch

CONTESTANTS = ("fp32", "bf16", "lora", "fsdp2", "multiturn")


def build_model(hidden: int, layers: int, vocab: int) -> torch.nn.Module:
    """A random Qwen2 with sdpa attention (``hidden / 32`` heads of 32, GQA 2:1)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    heads = max(2, hidden // 32)
    config = Qwen2Config(vocab_size=vocab, hidden_size=hidden, intermediate_size=hidden * 3,
                         num_hidden_layers=layers, num_attention_heads=heads,
                         num_key_value_heads=max(1, heads // 2), tie_word_embeddings=True,
                         attn_implementation="sdpa")
    return Qwen2ForCausalLM(config).train()


def grpo_batch(args: argparse.Namespace, prompts: int, seed: int = 0) -> Any:
    """``prompts × samples`` rows: each prompt repeated, responses of random lengths
    between half and all of ``--response`` (right-padded)."""
    from rft.trainer.batching import TensorBatch

    g = torch.Generator().manual_seed(seed)
    prompt = torch.randint(3, args.vocab, (prompts, args.prompt), generator=g)
    ids = prompt.repeat_interleave(args.samples, 0)  # (B, P)
    rows = ids.shape[0]
    response = torch.randint(3, args.vocab, (rows, args.response), generator=g)
    lengths = torch.randint(args.response // 2, args.response + 1, (rows,), generator=g)
    response_mask = (torch.arange(args.response)[None] < lengths[:, None]).long()
    mask = torch.cat([torch.ones_like(ids), response_mask], 1)
    return TensorBatch(args.prompt, {
        "input_ids": torch.cat([ids, response * response_mask], 1), "attention_mask": mask,
        "position_ids": (mask.cumsum(-1) - 1).clamp(min=0), "response_mask": response_mask})


def multi_turn_batch(args: argparse.Namespace, seed: int = 0) -> Any:
    """``--episodes`` episodes of 5 turns, one row per turn: the prompt is the history
    (first prompt of ``--prompt // 2`` tokens, then each earlier reply and a user turn of
    8 tokens), the response the turn's reply of ``--response // 2`` tokens."""
    from rft.trainer.batching import TensorBatch

    g = torch.Generator().manual_seed(seed)
    reply, user = args.response // 2, 8
    rows: list[tuple[list[int], list[int]]] = []
    for _ in range(args.episodes):
        history = torch.randint(3, args.vocab, (args.prompt // 2,), generator=g).tolist()
        for _ in range(5):
            answer = torch.randint(3, args.vocab, (reply,), generator=g).tolist()
            rows.append((list(history), answer))
            history += answer + torch.randint(3, args.vocab, (user,), generator=g).tolist()
    width = max(len(p) for p, _ in rows)
    ids = torch.zeros(len(rows), width + reply, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, (p, r) in enumerate(rows):
        ids[row, width - len(p): width + len(r)] = torch.tensor(p + r)
        mask[row, width - len(p): width + len(r)] = 1
    return TensorBatch(width, {"input_ids": ids, "attention_mask": mask,
                               "position_ids": (mask.cumsum(-1) - 1).clamp(min=0),
                               "response_mask": mask[:, width:].clone()})


def step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: Any, shared: bool,
         dtype: torch.dtype | None) -> tuple[float, int]:
    """One actor step; its seconds and the bytes saved for backward."""
    from rft.trainer.models import response_logprobs

    saved = [0]

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        saved[0] += tensor.numel() * tensor.element_size()
        return tensor

    started = time.perf_counter()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logps, _ = response_logprobs(model, batch, device=torch.device("cpu"), dtype=dtype,
                                     shared_prompts=shared)
        mask = batch["response_mask"].float()
        loss = -(logps * mask).sum() / mask.sum()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return time.perf_counter() - started, saved[0]


def tokens(batch: Any, shared: bool) -> int:
    """Tokens the forward computes: valid tokens, or the prefix tree's nodes."""
    from rft.trainer.prefix_tree import pack_rows

    if not shared:
        return int(batch["attention_mask"].sum())
    return pack_rows(batch["input_ids"], batch["attention_mask"], batch["position_ids"],
                     batch.prompt_width).tokens


def measure(model: torch.nn.Module, batch: Any, args: argparse.Namespace,
            dtype: torch.dtype | None = None) -> dict[str, Any]:
    """Alternating off / on steps (one warm-up each); medians and activation bytes."""
    from rft.trainer.lora import trainable_parameters
    from rft.trainer.models import uses_shared_prompts

    assert uses_shared_prompts(model, batch, dtype), "prefix sharing does not apply"
    params = list(trainable_parameters(model))
    optimizer = torch.optim.AdamW(params, lr=1e-5)
    times: dict[bool, list[float]] = {False: [], True: []}
    act: dict[bool, int] = {}
    for index in range(args.steps + 1):
        for shared in ((False, True) if index % 2 == 0 else (True, False)):
            seconds, saved = step(model, optimizer, batch, shared, dtype)
            if index:
                times[shared].append(seconds)
            act[shared] = saved
    return {"off_s": statistics.median(times[False]), "on_s": statistics.median(times[True]),
            "off_tokens": tokens(batch, False), "on_tokens": tokens(batch, True),
            "off_act_mb": act[False] / 2**20, "on_act_mb": act[True] / 2**20}


def _fsdp_rank(rank: int, port: int, args: argparse.Namespace, out: str) -> None:
    import torch.distributed as dist
    from rft.trainer.fsdp import shard_model
    from rft.trainer.parallel import RankGroup

    torch.set_num_threads(1)
    group = RankGroup.initialize(rank, 2, "127.0.0.1", port, torch.device("cpu"), 600.0)
    try:
        model = build_model(args.hidden, args.layers, args.vocab)
        shard_model(model, group)
        batch = grpo_batch(args, args.prompts // 2 or 1, seed=rank)
        result = measure(model, batch, args)
        if rank == 0:
            with open(out, "w") as handle:
                json.dump(result, handle)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def run_one(which: str, args: argparse.Namespace) -> dict[str, Any]:
    """One contestant, in this process."""
    torch.set_num_threads(1)
    if which == "fsdp2":
        import socket
        import tempfile

        import torch.multiprocessing as mp

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "rank0.json")
            mp.spawn(_fsdp_rank, args=(port, args, out), nprocs=2, join=True)
            with open(out) as handle:
                return dict(json.load(handle))
    model = build_model(args.hidden, args.layers, args.vocab)
    if which == "lora":
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16,
                                                 target_modules="all-linear")).train()
        model.gradient_checkpointing_enable(
            gradient_checkpointing_kwargs={"use_reentrant": False})
    batch = multi_turn_batch(args) if which == "multiturn" else grpo_batch(args, args.prompts)
    dtype = torch.bfloat16 if which == "bf16" else None
    return measure(model, batch, args, dtype)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=2048)
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--response", type=int, default=64)
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--episodes", type=int, default=4)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--which", default=",".join(CONTESTANTS))
    parser.add_argument("--only", choices=CONTESTANTS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.only:
        print(json.dumps(run_one(args.only, args)))
        return 0
    print(f"Qwen2 hidden {args.hidden}, {args.layers} layers; {args.prompts} prompts × "
          f"{args.samples} samples, prompt {args.prompt} + response ≤ {args.response} tokens; "
          f"median of {args.steps} steps; load average {os.getloadavg()[0]:.1f} "
          f"on {os.cpu_count()} CPUs")
    print(f"{'':10} {'off s':>7} {'on s':>7} {'speed-up':>8} {'tokens off':>10} "
          f"{'tokens on':>9} {'ratio':>6} {'act MB off':>10} {'act MB on':>9}")
    for which in args.which.split(","):
        argv = [sys.executable, __file__, "--only", which] + [
            f"--{k}={v}" for k, v in vars(args).items() if k not in ("only", "which")]
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            print(f"{which:10} failed: {done.stderr.strip().splitlines()[-1:]}")
            continue
        r = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"{which:10} {r['off_s']:7.3f} {r['on_s']:7.3f} {r['off_s'] / r['on_s']:7.2f}× "
              f"{r['off_tokens']:10d} {r['on_tokens']:9d} "
              f"{r['off_tokens'] / r['on_tokens']:5.2f}× {r['off_act_mb']:10.1f} "
              f"{r['on_act_mb']:9.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
