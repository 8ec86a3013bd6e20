"""GRPO on CPU: rft's embedded run vs TRL's GRPOTrainer vs a minimal hand-written loop.

    .venv-bench/bin/python bench/grpo_vs_trl.py [--steps 80] [--threads 1] [--rounds 2] [--beta 0]
    .venv-bench/bin/python bench/grpo_vs_trl.py --grid [--steps 10]

TRL runs from a side venv, ``.venv-bench`` (``scripts/bench_venv.sh``: the project venv
plus requirements/bench.txt — trl 1.16.0, accelerate 1.15.0 — on the venv's torch
2.13.0+cpu and transformers 5.19.0); it is not installed into ``.venv`` because veRL
0.9.1 cannot build models beside trl >= 1.13::

    scripts/bench_venv.sh && .venv-bench/bin/python bench/grpo_vs_trl.py --grid

``--cpu-parts`` adds, for rft, the median process CPU ms per step of each model part
(decode, the rest of the engine's ``generate``, reference / actor forward, actor
backward, optimiser step, weight sync), of the rest (rft's framework work), of Python's
garbage collector and of the kernel (system time): :class:`CpuParts`.

``--grid`` runs the five contestants ``bare, rft, rft_compiled, trl, trl_gc`` at every
shape of prompts {4, 8, 16} × max new tokens {8, 16, 32} (8 completions per prompt;
``--steps`` steps each, default 10 in this mode, ``--warmup`` 3) and prints one table:
seconds per step, each rft run / bare and / TRL (checkpointing off and on), the mean
reward of each run.

One tiny Qwen2 model (:func:`rft.testing.tiny_model.build_tiny_model`, random weights),
one toy task with a dense reward (the share of the response's letters that are vowels —
the same Python function scores all three), the same batch shape, optimiser and number
of steps. Each contestant runs in its own subprocess (fresh process: fair peak RSS,
``OMP_NUM_THREADS`` set before torch is imported); the parent prints one table:

- wall time per step: median and mean of the steps after the ``--warmup`` first ones
  (every figure per step leaves them out: CPU time too), of the fastest of
  ``--rounds`` runs of each (the order rotates between rounds; other load on the machine
  only slows a run down);
- ratios rft / bare loop and rft / TRL without gradient checkpointing, and rft / TRL
  with it, against #31's targets (:data:`TARGETS`: ≤ 0.60 × the bare loop, ≤ 0.50 × TRL);
- the mean reward over 5 steps starting at steps 0, 10, 25, 50, … (learning curves);
- peak RSS of each process (``resource.getrusage``) and whether it held a reference model
  (``ref``: the rft trainer's ``ref``, TRL's ``ref_model``, the bare loop's copy).

The contestants:

- ``rft`` (explorer defaults: ``concurrent_mode: sequential``, but ``runner_per_model``
  at least the prompts of a step, so that their model calls meet in one engine call as
  the other contestants generate every row at once) and ``rft_mt``
  (``concurrent_mode: multi-threading``: the tasks of a step run in threads and their
  model calls are merged into one engine call) and ``rft_compiled`` (the ``hf`` engine's
  ``extra_engine_args: {compile_decode: true}``: decode steps through ``torch.compile``;
  its first step holds the compile, ~20–30 s cold, a few seconds from inductor's on-disk
  cache: a warm-up step, printed apart):
  the real embedded colocate run — ``rft.config.load_config`` on a YAML written
  here + ``rft.launcher.run`` (explorer with the ``hf`` engine and ``simple_workflow``,
  queue experience buffer, ``torch`` trainer, memory weight sync, monitors). The reward
  and a timing monitor are registered as an in-process plugin (``extra_plugins``).
  A step is measured between consecutive trainer-monitor calls (explore + sample +
  train + weight sync + monitors); the final checkpoint written after the last step is
  not counted.
- ``trl`` and ``trl_gc``: ``trl.GRPOTrainer`` on CPU, ``use_vllm=False`` (transformers
  ``generate``), with gradient checkpointing off (``trl``: like rft and the bare loop,
  which recompute nothing) and on (``trl_gc``: TRL's default). A step is measured between
  consecutive ``on_step_end`` callbacks (generation, reward, reference / policy forward,
  backward, optimiser step, TRL's logging).
- ``bare``: :func:`bare_loop` below — ``model.generate`` for all prompts × n at once,
  score, group-normalise, reference log-probs, one clipped-surrogate + k2-KL step.

Settings mapping (rft's GRPO defaults → TRL 1.16 ``GRPOConfig``):

============================  ===============================  ============================
rft (config / preset)         TRL ``GRPOConfig``               bare loop
============================  ===============================  ============================
buffer.batch_size = P         per_device_train_batch_size=P·n  P prompts
algorithm.repeat_times = n    num_generations = n              num_return_sequences = n
model.max_response_tokens=N   max_completion_length = N        max_new_tokens = N
temperature 1, top_p 1, no    temperature=1, top_p=1, top_k=0  same
top-k
advantage ``grpo``            scale_rewards="group" (TRL adds  (r − μ_g) / (σ_g + 1e-6)
(r − μ_g)/(σ_g + 1e-6)        1e-4 to σ)
policy loss ``ppo``, clip 0.2 epsilon=0.2, num_iterations=1    ratio clip 0.2
token-mean aggregation        loss_type="dapo" (token mean     token mean
                              over the global batch)
kl_loss ``k2``, coef 0.001    beta=0.001 (TRL's estimator is   k2, coef 0.001
(reference model)             k3; same compute: 1 ref forward)
entropy coef 0 (entropy is    (TRL also computes entropies     not computed
computed, no gradient)        for its metrics)
AdamW lr, betas (0.9,0.999),  learning_rate, adam_beta1/2,     torch.optim.AdamW, same
wd 0.01, constant schedule,   weight_decay=0.01,
grad clip 1.0                 lr_scheduler_type="constant",
                              max_grad_norm=1.0
1 optimiser step per step     gradient_accumulation_steps=1,   1 step
(mini-batch = whole batch)    steps_per_generation=1
one forward / backward        per_device_train_batch_size      one forward / backward
(use_dynamic_bsz: false, no   = P·n (one micro-batch)
micro-batch size)
no gradient checkpointing     gradient_checkpointing=False     none
                              (``trl_gc``: True, TRL's
                              default)
float32, CPU                  use_cpu=True, no bf16            float32
============================  ===============================  ============================

``--beta 0`` drops the KL term and the reference model everywhere: rft's
``kl_loss_fn: none`` (the trainer then holds no reference model, issue #23), TRL's beta 0
(its ``ref_model`` is ``None``), the bare loop's ``deepcopy`` skipped; the table's ``ref``
column shows what each process held.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

VOWELS = set("aeiouAEIOU")
PROMPT_WORDS = ("apples", "books", "pencils", "cookies", "marbles", "stickers", "eggs",
                "pages", "cars", "flowers", "cups", "shirts", "balls", "candies", "clips",
                "dollars")
REWARD_LOG: list[float] = []
"""Every reward computed in this process, in order (chunked into steps afterwards)."""
PARTS: dict[str, list[float]] = {}
"""rft's ``timing_s/<part>`` metrics, one value per step."""
CPU_STAMPS: list[float] = []
"""The process's CPU time at every step boundary (beside the wall-clock stamps): on a
shared machine CPU time per step is steadier than wall time."""
CPU_PARTS: dict[str, list[float]] = {}
"""``--cpu-parts``: rft's process CPU seconds per step in each model part (and the rest)."""
HELD: dict[str, bool] = {}
"""``{"ref": …}``: whether the contestant held a reference model."""
GRID_PROMPTS = (4, 8, 16)
GRID_TOKENS = (8, 16, 32)
CONTESTANTS = ("bare", "rft", "rft_compiled", "rft_mt", "trl", "trl_gc")
RFT_RUNS = ("rft", "rft_compiled", "rft_mt")
"""The contestants that are rft runs: each is compared with the bare loop and TRL."""
TARGETS = {"bare": 0.60, "trl": 0.50}
"""Issue #31's goal: rft's step at most these times the bare loop's and TRL's."""


def vowel_reward(text: str) -> float:
    """Dense toy reward in [0, 1]: the share of the response's letters that are vowels
    (0 for a response without letters)."""
    letters = [c for c in text if c.isalpha()]
    value = sum(c in VOWELS for c in letters) / len(letters) if letters else 0.0
    REWARD_LOG.append(value)
    return value


def prompts(count: int) -> list[str]:
    return [f"Write a sentence about {PROMPT_WORDS[i % len(PROMPT_WORDS)]}." for i in range(count)]


# ---- the contestants (each runs in a child process) -------------------------------------

def run_bare(args: argparse.Namespace, model_dir: Path) -> list[float]:
    """The minimal GRPO loop; returns the wall time of every step."""
    import copy

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(args.seed)
    tok = AutoTokenizer.from_pretrained(model_dir)
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).train()
    ref = copy.deepcopy(model).eval().requires_grad_(False) if args.beta else None
    HELD["ref"] = ref is not None
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.999), weight_decay=0.01)
    eos = [tok.convert_tokens_to_ids("<|im_end|>"), tok.pad_token_id]
    texts = [tok.apply_chat_template([{"role": "user", "content": p}], tokenize=False,
                                     add_generation_prompt=True) for p in prompts(16)]
    P, n, times = args.prompts, args.generations, []
    for step in range(args.steps):
        started = time.perf_counter()
        CPU_STAMPS.append(time.process_time())
        batch = [texts[(step * P + i) % len(texts)] for i in range(P)]
        enc = tok(batch, return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.no_grad():
            seqs = model.generate(**enc, do_sample=True, temperature=1.0, top_p=1.0, top_k=0,
                                  max_new_tokens=args.max_new_tokens, num_return_sequences=n,
                                  eos_token_id=eos, pad_token_id=tok.pad_token_id)
        width = enc.input_ids.shape[1]
        comp = seqs[:, width:]  # (P·n, N)
        is_eos = torch.isin(comp, torch.tensor(eos))
        first = torch.where(is_eos.any(1), is_eos.int().argmax(1), comp.shape[1])
        mask = (torch.arange(comp.shape[1]) <= first[:, None]).float()  # through the eos
        rewards = torch.tensor([vowel_reward(tok.decode(c[: int(f) + 1], skip_special_tokens=True))
                                for c, f in zip(comp, first, strict=True)]).view(P, n)
        generated = time.perf_counter()
        adv = ((rewards - rewards.mean(1, keepdim=True))
               / (rewards.std(1, keepdim=True) + 1e-6)).view(-1, 1)  # (P·n, 1)
        attn = torch.cat([enc.attention_mask.repeat_interleave(n, 0), mask.long()], 1)
        pos = (attn.cumsum(-1) - 1).clamp(min=0)

        def logps(m: torch.nn.Module) -> torch.Tensor:
            logits = m(input_ids=seqs, attention_mask=attn, position_ids=pos).logits
            return torch.log_softmax(logits[:, width - 1:-1].float(), -1).gather(
                -1, comp[..., None]).squeeze(-1)  # (P·n, N)

        logp = logps(model)
        ratio = torch.exp(logp - logp.detach())
        loss = -torch.min(ratio * adv, ratio.clamp(0.8, 1.2) * adv)
        if ref is not None:
            with torch.no_grad():
                ref_logp = logps(ref)
            loss = loss + args.beta * 0.5 * (logp - ref_logp) ** 2  # k2
        loss = (loss * mask).sum() / mask.sum()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - started)
        CPU_STAMPS.append(time.process_time())
        PARTS.setdefault("generate+score", []).append(generated - started)
        PARTS.setdefault("update", []).append(times[-1] - (generated - started))
    return times


class CpuParts:
    """``--cpu-parts``: the process CPU time (``time.process_time``) that each of rft's model
    parts takes per step, by wrapping the functions that run them — the hf engine's decode
    loop (``decode_loop.sample_tokens``), the forwards with their log-probs
    (``response_logprobs``: reference and actor), the actor's backward
    (``torch.Tensor.backward``), the rest of the engine's ``generate`` (prompt rendering,
    sampled log-probs, detokenising), the optimiser step (``PolicyUpdates._step``: clipping,
    Adam) and the weight sync into the engine (``HFEngine.update_weights``). The step's CPU
    time less these is rft's framework work (workflow, reward, experiences, buffer, batch
    building, advantages, loss, metrics, monitors). Everything in a colocate step runs one
    part after another, so process CPU time is the part's own."""

    def __init__(self) -> None:
        self.current: dict[str, float] = {}
        self.inner: list[float] = []  # per open part: CPU time of the parts inside it
        self.system: float | None = None
        self.gc_started = self.gc_seconds = 0.0

    def wrap(self, owner: Any, attr: str, part: str) -> None:
        inner = getattr(owner, attr)

        def timed(*a: Any, **k: Any) -> Any:
            self.inner.append(0.0)
            started = time.process_time()
            try:
                return inner(*a, **k)
            finally:
                elapsed = time.process_time() - started
                own = elapsed - self.inner.pop()  # a part inside another counts once
                self.current[part] = self.current.get(part, 0.0) + own
                if self.inner:
                    self.inner[-1] += elapsed

        setattr(owner, attr, timed)

    def install(self) -> None:
        import torch

        import rft.engines.decode_loop as decode_loop
        import rft.engines.hf_engine as hf_engine
        import rft.trainer.policy_updates as policy_updates
        import rft.trainer.rollout_prep as rollout_prep

        self.wrap(decode_loop, "sample_tokens", "decode")
        self.wrap(hf_engine.HFEngine, "generate", "engine besides decode")
        self.wrap(rollout_prep, "response_logprobs", "ref forward")
        self.wrap(policy_updates, "response_logprobs", "actor forward")
        self.wrap(torch.Tensor, "backward", "actor backward")
        self.wrap(policy_updates.PolicyUpdates, "_step", "optimizer step")
        self.wrap(hf_engine.HFEngine, "update_weights", "weight sync")
        gc.callbacks.append(self._collected)

    def _collected(self, phase: str, info: dict[str, int]) -> None:
        """Python's cyclic garbage collector, timed apart (it runs inside any part)."""
        if phase == "start":
            self.gc_started = time.process_time()
        else:
            self.gc_seconds += time.process_time() - self.gc_started

    def close_step(self, step_cpu: float) -> None:
        for part, seconds in self.current.items():
            CPU_PARTS.setdefault(part, []).append(seconds)
        CPU_PARTS.setdefault("rest", []).append(step_cpu - sum(self.current.values()))
        self.current = {}
        CPU_PARTS.setdefault("of the step: python gc", []).append(self.gc_seconds)
        self.gc_seconds = 0.0
        system = os.times().system  # of all parts: the kernel's share (page faults, …)
        if self.system is not None:
            CPU_PARTS.setdefault("of the step: system", []).append(system - self.system)
        self.system = system


def run_rft(args: argparse.Namespace, model_dir: Path, work: Path,
            concurrent_mode: str = "sequential", compile_decode: bool = False) -> list[float]:
    """The real embedded run (load_config + launcher.run); returns per-step wall times."""
    import contextlib
    import io

    import torch
    import yaml

    from rft import hookimpl
    from rft.config import load_config
    from rft.launcher import run
    from rft.monitor.base import Monitor
    from rft.plugins import PluginRegistry

    stamps: list[float] = []
    parts = CpuParts() if args.cpu_parts else None
    if parts is not None:
        parts.install()

    class TimerMonitor(Monitor):
        """Timestamps of the trainer's per-step log calls (start = before step 1), and
        rft's own ``timing_s/*`` metrics (explore, train step, sync …)."""

        def start(self, total_steps: int) -> None:
            if self.role == "trainer":
                stamps.append(time.perf_counter())
                CPU_STAMPS.append(time.process_time())

        def log(self, metrics: Any, step: int) -> None:
            if self.role == "trainer":
                stamps.append(time.perf_counter())
                CPU_STAMPS.append(time.process_time())
                if parts is not None:
                    parts.close_step(CPU_STAMPS[-1] - CPU_STAMPS[-2])
            for key, value in metrics.items():
                if key.startswith("timing_s/"):
                    PARTS.setdefault(key[len("timing_s/"):], []).append(float(value))

    class BenchPlugin:
        @hookimpl
        def register_reward_fns(self) -> dict[str, Any]:
            return {"bench_vowels": lambda response, truth: {"vowels": vowel_reward(response)}}

        @hookimpl
        def register_monitors(self) -> dict[str, Any]:
            return {"bench_timer": TimerMonitor}

    tasks = work / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"question": q, "answer": ""}) + "\n"
                             for q in prompts(16)))
    algorithm: dict[str, Any] = {"algorithm_type": "grpo", "repeat_times": args.generations,
                                 "optimizer": {"lr": args.lr}}
    if args.beta:
        algorithm["kl_loss_fn_args"] = {"kl_coef": args.beta}
    else:
        algorithm["kl_loss_fn"] = "none"
    config = {
        "project": "bench", "name": "grpo", "mode": "colocate",
        "checkpoint_root_dir": str(work / "ck"),
        "algorithm": algorithm,
        "model": {"model_path": str(model_dir), "max_prompt_tokens": 64,
                  "max_response_tokens": args.max_new_tokens},
        "cluster": {"node_num": 1, "gpu_per_node": 0},
        "buffer": {
            "batch_size": args.prompts, "total_steps": args.steps,
            "explorer_input": {"taskset": {
                "name": "train", "path": str(tasks),
                "format": {"prompt_key": "question", "response_key": "answer"},
                "default_workflow_type": "simple_workflow",
                "default_reward_fn_type": "bench_vowels"}},
            "trainer_input": {"experience_buffer": {"name": "exp", "storage_type": "queue"}},
        },
        # one runner per task: a step's tasks meet in one engine call, as the bare loop's and
        # TRL's one generate over every row (rft's default, 8 runners, makes two decode
        # calls of 8 prompts at 16 prompts: each step's per-token overhead twice)
        "explorer": {"concurrent_mode": concurrent_mode,
                     "runner_per_model": max(8, args.prompts),
                     "rollout_model": {"engine_type": "hf", "dtype": "float32",
                                       "seed": args.seed,
                                       "extra_engine_args": {"compile_decode": compile_decode}}},
        "synchronizer": {"sync_method": "memory", "sync_interval": 1},
        # one forward / backward over the whole batch, as TRL and the bare loop do (the
        # default token budget, 2 × max_model_len, would cut it into ~8 micro-batches)
        "trainer": {"trainer_type": "torch", "save_interval": 0, "use_dynamic_bsz": False},
        "monitor": {"monitor_type": "bench_timer"},
    }
    path = work / "rft.yaml"
    path.write_text(yaml.safe_dump(config))
    import rft.trainer.torch_trainer as torch_trainer

    build = torch_trainer.TorchTrainer.__init__

    def init(self: Any, *a: Any, **k: Any) -> None:  # what the trainer holds
        build(self, *a, **k)
        HELD["ref"] = self.ref is not None

    torch_trainer.TorchTrainer.__init__ = init
    torch.manual_seed(args.seed)
    registry = PluginRegistry.create(extra_plugins=[BenchPlugin()])
    loaded = load_config(path, registry=registry)
    with contextlib.redirect_stdout(io.StringIO()):  # the console monitor's lines
        assert run(loaded) == 0
    return [b - a for a, b in zip(stamps, stamps[1:])]


def run_trl(args: argparse.Namespace, model_dir: Path, work: Path,
            checkpointing: bool) -> list[float]:
    """TRL's GRPOTrainer on CPU without vLLM, gradient checkpointing on or off; returns
    per-step wall times."""
    import logging

    import torch
    import transformers
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    logging.getLogger("trl").setLevel(logging.ERROR)
    stamps: list[float] = []

    class Timer(TrainerCallback):
        def on_train_begin(self, *a: Any, **k: Any) -> None:
            stamps.append(time.perf_counter())
            CPU_STAMPS.append(time.process_time())

        def on_step_end(self, *a: Any, **k: Any) -> None:
            stamps.append(time.perf_counter())
            CPU_STAMPS.append(time.process_time())

    def reward(completions: list[Any], **_: Any) -> list[float]:
        return [vowel_reward(c[0]["content"] if isinstance(c, list) else c) for c in completions]

    torch.manual_seed(args.seed)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    data = Dataset.from_list([{"prompt": [{"role": "user", "content": q}]} for q in prompts(16)])
    config = GRPOConfig(
        output_dir=str(work / "trl"), max_steps=args.steps, seed=args.seed, use_cpu=True,
        per_device_train_batch_size=args.prompts * args.generations,
        num_generations=args.generations, gradient_accumulation_steps=1,
        steps_per_generation=1, num_iterations=1,
        max_completion_length=args.max_new_tokens, temperature=1.0, top_p=1.0, top_k=0,
        learning_rate=args.lr, lr_scheduler_type="constant", warmup_steps=0,
        weight_decay=0.01, adam_beta1=0.9, adam_beta2=0.999, max_grad_norm=1.0,
        beta=args.beta, epsilon=0.2, loss_type="dapo", scale_rewards="group",
        use_vllm=False, bf16=False, fp16=False, shuffle_dataset=False,
        logging_steps=1, save_strategy="no", report_to=[], disable_tqdm=True,
        dataloader_num_workers=0, log_completions=False,
        gradient_checkpointing=checkpointing,
    )
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=config, train_dataset=data,
                          processing_class=tok, callbacks=[Timer()])
    HELD["ref"] = trainer.ref_model is not None
    trainer.train()
    return [b - a for a, b in zip(stamps, stamps[1:])]


def child(args: argparse.Namespace) -> None:
    import resource

    import torch

    torch.set_num_threads(args.threads)
    model_dir, work = Path(args.model_dir), Path(tempfile.mkdtemp(prefix=f"bench_{args.only}_"))
    started = time.perf_counter()
    if args.only == "bare":
        times = run_bare(args, model_dir)
    elif args.only == "rft":
        times = run_rft(args, model_dir, work)
    elif args.only == "rft_compiled":
        times = run_rft(args, model_dir, work, compile_decode=True)
    elif args.only == "rft_mt":
        times = run_rft(args, model_dir, work, "multi-threading")
    else:
        times = run_trl(args, model_dir, work, checkpointing=args.only == "trl_gc")
    total = time.perf_counter() - started
    per_step = args.prompts * args.generations
    if len(REWARD_LOG) < per_step * args.steps:
        raise SystemExit(f"{args.only}: {len(REWARD_LOG)} rewards for {args.steps} steps")
    rewards = [statistics.fmean(REWARD_LOG[i * per_step:(i + 1) * per_step])
               for i in range(args.steps)]
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    parts = {k: statistics.median(v) for k, v in PARTS.items()}
    cpu = CPU_STAMPS
    cpu_times = ([b - a for a, b in zip(cpu[0::2], cpu[1::2])] if args.only == "bare"
                 else [b - a for a, b in zip(cpu, cpu[1:])])
    Path(args.json).write_text(json.dumps({"times": times, "cpu_times": cpu_times,
                                           "rewards": rewards, "parts": parts,
                                           "total_s": total, "peak_rss_mib": peak_mib,
                                           "ref": HELD.get("ref"),
                                           "cpu_parts": {k: statistics.median(v)
                                                         for k, v in CPU_PARTS.items()}}))


# ---- the parent: build the model, run the three, print the table ------------------------

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=None,
                        help="steps per run (default 80; 10 with --grid)")
    parser.add_argument("--threads", type=int, default=1, help="torch / OMP threads")
    parser.add_argument("--prompts", type=int, default=4, help="prompts per step")
    parser.add_argument("--generations", type=int, default=8, help="completions per prompt")
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--beta", type=float, default=0.001, help="KL coefficient (0: none)")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=None,
                        help="steps left out of the mean (default 5; 3 with --grid)")
    parser.add_argument("--rounds", type=int, default=None,
                        help="runs of each contestant (order rotated); the fastest is shown "
                             "(default 2; 1 with --grid)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--which", default=None,
                        help="contestants, in run order (default bare,rft,rft_compiled,rft_mt,"
                             "trl,trl_gc; bare,rft,rft_compiled,trl,trl_gc with --grid; "
                             "rft_compiled: rft with the hf engine's compile_decode; rft_mt: "
                             "rft with explorer.concurrent_mode=multi-threading; trl_gc: TRL "
                             "with gradient checkpointing)")
    parser.add_argument("--grid", action="store_true",
                        help="every shape of prompts {4, 8, 16} × max new tokens {8, 16, 32}")
    parser.add_argument("--cpu-parts", action="store_true",
                        help="rft: also the median process CPU ms per step of each model "
                             "part (decode, the engine's generate besides decode, reference / "
                             "actor forward, backward, optimiser step, weight sync), of the "
                             "rest (rft's framework work), of Python's gc and of the kernel")
    parser.add_argument("--only", choices=CONTESTANTS, help=argparse.SUPPRESS)
    parser.add_argument("--model-dir", help=argparse.SUPPRESS)
    parser.add_argument("--json", help=argparse.SUPPRESS)
    args = parser.parse_args()
    defaults = ({"steps": 10, "warmup": 3, "rounds": 1,
                 "which": "bare,rft,rft_compiled,trl,trl_gc"}
                if args.grid else
                {"steps": 80, "warmup": 5, "rounds": 2, "which": ",".join(CONTESTANTS)})
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.only:
        child(args)
        return

    from rft.testing.tiny_model import build_tiny_model

    with tempfile.TemporaryDirectory(prefix="bench_grpo_") as tmp:
        model_dir = build_tiny_model(Path(tmp) / "model", hidden_size=args.hidden,
                                     num_layers=args.layers, seed=args.seed)
        if not args.grid:
            report(args, run_contestants(args, model_dir, Path(tmp)))
            return
        grid: dict[tuple[int, int], dict[str, dict[str, Any]]] = {}
        for prompts_ in GRID_PROMPTS:
            for tokens in GRID_TOKENS:
                shape = argparse.Namespace(**{**vars(args), "prompts": prompts_,
                                              "max_new_tokens": tokens})
                grid[prompts_, tokens] = run_contestants(shape, model_dir, Path(tmp))
                print(f"shape {prompts_} x {tokens}: " + ", ".join(
                    f"{name} {statistics.median(r['times']):.4f} s/step"
                    for name, r in grid[prompts_, tokens].items()), flush=True)
        report_grid(args, grid)


def run_contestants(args: argparse.Namespace, model_dir: Path, tmp: Path
                    ) -> dict[str, dict[str, Any]]:
    """Every contestant of ``--which``, ``--rounds`` times (order rotated), each in its own
    subprocess; per contestant the least disturbed round's result."""
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads),
           "MKL_NUM_THREADS": str(args.threads), "TOKENIZERS_PARALLELISM": "false",
           "PYTHONWARNINGS": "ignore"}
    results: dict[str, dict[str, Any]] = {}
    passed = [f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items()
              if v is not None and k not in ("which", "only", "model_dir", "json", "rounds",
                                             "grid", "cpu_parts")]
    passed += ["--cpu-parts"] if args.cpu_parts else []
    names = args.which.split(",")
    for round_ in range(args.rounds):
        shift = round_ % len(names)  # rotate the order: load drifts hit everyone alike
        for name in names[shift:] + names[:shift]:
            out = tmp / f"{name}.json"
            proc = subprocess.run([sys.executable, __file__, *passed, "--only", name,
                                   "--model-dir", str(model_dir), "--json", str(out)],
                                  env=env, capture_output=True, text=True)
            if proc.returncode != 0:
                tail = (proc.stderr or proc.stdout).strip().splitlines()[-15:]
                print(f"{name}: failed (exit {proc.returncode}):\n  " + "\n  ".join(tail))
                continue
            result = json.loads(out.read_text())
            result["first_step"] = result["times"][0]
            for key in ("times", "cpu_times"):  # the steps after the warm-up
                result[key] = result[key][args.warmup:] or result[key]
            result["round_medians"] = [*results.get(name, {}).get("round_medians", []),
                                       statistics.median(result["times"])]
            best = results.get(name)
            if best is None or min(result["round_medians"]) == result["round_medians"][-1]:
                results[name] = result  # keep the least disturbed round
            else:
                best["round_medians"] = result["round_medians"]
    return results


def median_ratio(results: dict[str, dict[str, Any]], a: str, b: str,
                 key: str = "times") -> float | None:
    """``median s/step of a / median s/step of b`` (``None`` when one is missing); ``key``
    ``cpu_times``: from the processes' CPU time per step."""
    if a not in results or b not in results or not results[b].get(key):
        return None
    return statistics.median(results[a][key]) / statistics.median(results[b][key])


def report_grid(args: argparse.Namespace,
                grid: dict[tuple[int, int], dict[str, dict[str, Any]]]) -> None:
    print(f"\nGRPO grid, tiny Qwen2 (hidden {args.hidden}, {args.layers} layers), CPU, "
          f"{args.threads} thread(s), {args.generations} completions per prompt, beta "
          f"{args.beta:g}, {args.steps} steps per run (median s/step), best of {args.rounds} "
          "round(s); trl: gradient checkpointing off, trl_gc: on (TRL's default)\n")
    names = [n for n in args.which.split(",")]
    runs = [n for n in names if n in RFT_RUNS]
    others = [n for n in ("bare", "trl", "trl_gc") if n in names]
    head = ["prompts x tokens", *[f"{n} s" for n in names],
            *[f"{r}/{o}" for r in runs for o in others],
            *[f"CPU: {r}/{o}" for r in runs[:1] for o in others],
            "mean reward " + "/".join(names)]
    rows = [head]
    for (prompts_, tokens), results in grid.items():
        def cell(value: float | None) -> str:
            return "-" if value is None else f"{value:.2f}"

        rows.append([f"{prompts_} x {tokens}",
                     *[f"{statistics.median(results[n]['times']):.4f}" if n in results
                       else "-" for n in names],
                     *[cell(median_ratio(results, r, o)) for r in runs for o in others],
                     *[cell(median_ratio(results, r, o, "cpu_times"))
                       for r in runs[:1] for o in others],
                     " / ".join(f"{statistics.fmean(results[n]['rewards']):.2f}"
                                if n in results else "-" for n in names)])
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    for row in rows:
        print("  ".join(cell.rjust(w) if i else cell.ljust(w)
                        for i, (cell, w) in enumerate(zip(row, widths, strict=True))))
    held = {n: {bool(r.get("ref")) for res in grid.values() for k, r in res.items() if k == n}
            for n in names}
    print("reference model held: " + ", ".join(
        f"{n} {'yes' if True in h else 'no'}" for n, h in held.items()))
    for run in runs:
        for key, clock in (("times", "wall"), ("cpu_times", "CPU")):
            for other, target in (("bare", TARGETS["bare"]), ("trl", TARGETS["trl"])):
                values = [v for r in grid.values()
                          if (v := median_ratio(r, run, other, key)) is not None]
                if values:
                    worst = max(values)
                    print(f"{clock}: worst {run} / {other} {worst:.2f} (target ≤ "
                          f"{target:.2f}: {'meets' if worst <= target else 'misses'})")
    firsts = [r["rft_compiled"]["first_step"] for r in grid.values() if "rft_compiled" in r]
    if firsts:
        print(f"rft_compiled: first step (with the decode step's compile) {min(firsts):.1f}–"
              f"{max(firsts):.1f} s, a warm-up step")


def report(args: argparse.Namespace, results: dict[str, dict[str, Any]]) -> None:
    print(f"\nGRPO, tiny Qwen2 (hidden {args.hidden}, {args.layers} layers), CPU, "
          f"{args.threads} thread(s): {args.prompts} prompts × {args.generations} completions, "
          f"≤ {args.max_new_tokens} new tokens, lr {args.lr:g}, beta {args.beta:g}, "
          f"{args.steps} steps (median and mean after {args.warmup} warm-up steps); best of "
          f"{args.rounds} round(s)\n")
    marks = [k for k in (0, 10, 25, 50, 75, 100, 150, 200, 300) if k + 5 <= args.steps]
    head = ["", "median s/step", "mean s/step", "median CPU s/step", "rounds' medians",
            "total s", "peak RSS MiB", "ref", *[f"R@{k}" for k in marks], "R@last5"]
    rows = [head]
    for name, r in results.items():
        t, rw = r["times"], r["rewards"]
        rows.append([name, f"{statistics.median(t):.4f}",
                     f"{statistics.fmean(t):.4f}",
                     f"{statistics.median(r['cpu_times']):.4f}" if r.get("cpu_times") else "-",
                     " ".join(f"{m:.3f}" for m in r["round_medians"]), f"{r['total_s']:.1f}",
                     f"{r['peak_rss_mib']:.0f}", "yes" if r.get("ref") else "no",
                     *[f"{statistics.fmean(rw[k:k + 5]):.3f}" for k in marks],
                     f"{statistics.fmean(rw[-5:]):.3f}"])
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    for row in rows:
        print("  ".join(cell.rjust(w) if i else cell.ljust(w)
                        for i, (cell, w) in enumerate(zip(row, widths, strict=True))))
    print("R@k: mean reward over steps k..k+4 (vowel share of the response's letters); ref: a "
          "reference model was held; trl: gradient checkpointing off, trl_gc: on")
    for name, r in results.items():
        if r.get("parts") and name == "bare":
            print("bare: median s of " + ", ".join(f"{k} {v:.4f}" for k, v in r["parts"].items()))
        elif r.get("parts"):
            main = ("explore", "step", "update_weights")
            known = {k: v for k, v in r["parts"].items() if k in main}
            other = statistics.median(r["times"]) - sum(known.values())
            inner = ", ".join(f"{k} {v:.4f}" for k, v in sorted(r["parts"].items())
                              if k not in main)
            print(f"{name}: median s of explore {known.get('explore', 0):.4f} + train step "
                  f"{known.get('step', 0):.4f} + sync {known.get('update_weights', 0):.4f} + rest "
                  f"{other:.4f}; inside the train step: {inner}")
        if r.get("cpu_parts") and name != "bare":
            print(f"{name}: median CPU ms per step of " + ", ".join(
                f"{k} {1000 * v:.1f}" for k, v in r["cpu_parts"].items()))

    def ratio(a: str, b: str, target: float) -> None:
        if a in results and b in results:
            med = statistics.median(results[a]["times"]) / statistics.median(results[b]["times"])
            mean = statistics.fmean(results[a]["times"]) / statistics.fmean(results[b]["times"])
            verdict = "meets" if max(med, mean) <= target else "misses"
            cpu = median_ratio(results, a, b, "cpu_times")
            on_cpu = f", {cpu:.2f} (median CPU time)" if cpu is not None else ""
            print(f"{a} / {b}: {med:.2f} (median), {mean:.2f} (mean){on_cpu}; target ≤ "
                  f"{target:.2f}: {verdict}")

    print()
    if "rft_compiled" in results:
        print(f"rft_compiled: first step (with the decode step's compile) "
              f"{results['rft_compiled']['first_step']:.1f} s, a warm-up step")
    for name in RFT_RUNS:
        ratio(name, "bare", TARGETS["bare"])
        ratio(name, "trl", TARGETS["trl"])
        ratio(name, "trl_gc", TARGETS["trl"])


if __name__ == "__main__":
    main()
