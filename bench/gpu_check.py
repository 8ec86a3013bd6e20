"""A first check of rft on one GPU, for a machine with torch, transformers, peft, accelerate
and pytest but no vLLM and no Ray (one H200 with a fixed image, nothing downloadable).

    pip install --no-deps <rft wheels>   # the core and the grpo, workflows, rewards plugins,
                                         # with pluggy and omegaconf if the image lacks them
    python bench/gpu_check.py                          # on the GPU (≤ 9 minutes)
    python bench/gpu_check.py --device cpu --model tiny --steps 2   # the smoke run (the suite)

Each check prints one line ``RESULT <name> ok|FAIL <figures>``:

- ``import``: rft imports and its trainer runs on this torch (or names the torch it needs);
- ``trainer``: the torch trainer (one process) on the device, bf16 on CUDA, a random
  Qwen2-0.5B-shaped model (``--model qwen2-0.5b``): s/step, tokens/s, peak memory, MFU;
- ``fsdp2_offload``: FSDP2 on one rank with ``CPUOffloadPolicy`` under the backend rft picks
  (``cpu:gloo,cuda:nccl`` on CUDA): a backward, the gradient clip and a full-tensor gather;
- ``colocate_t1`` / ``colocate_t0.7``: mode ``colocate`` with the ``hf`` engine on the
  device: generation, the weight sync, and the engine's log-probs against the trainer's
  (``training/rollout_logprobs_diff_max``) at temperature 1 and 0.7;
- ``compile_decode``: the ``hf`` engine with ``compile_decode`` (inductor: Triton kernels
  on CUDA) against the same engine eager, fp32 on the device: sampled tokens agreeing,
  the compiled engine's log-probs against eager teacher forcing, the compile's seconds and
  the decode's s/call after it (a fallback to eager is a FAIL naming its error);
- ``prefix_sharing``: response log-probs with each prompt run once vs per row (fp32: the
  shared-prompt forward needs plain fp32 parameters; under the trainer's bf16 autocast it
  is not used, which the line reports).

The colocate checks read their taskset through ``datasets`` (rft's taskset reader), whose
``pyarrow`` wheel is ~40 MB: carry both, or those two checks print ``FAIL
ModuleNotFoundError …`` naming it. The others need torch, transformers and rft only (the
suite runs this script with ``ray`` and ``vllm`` unimportable).

What needs vLLM or Ray on a GPU (mode ``both``, the ``nccl`` weight broadcast, vLLM's sleep
mode, trainer ranks) is not checked here: it is tested on CPU only (docs/distributed.md,
"First run on GPUs").
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("OMP_NUM_THREADS", "1")


def result(name: str, ok: bool, figures: str) -> bool:
    print(f"RESULT {name} {'ok' if ok else 'FAIL'} {figures}", flush=True)
    return ok


def guarded(name: str, check: Callable[[], tuple[bool, str]]) -> bool:
    """Run one check; an exception is a FAIL line with its last message line."""
    try:
        ok, figures = check()
    except Exception as exc:  # noqa: BLE001 (every check reports, whatever happens)
        traceback.print_exc(file=sys.stderr)
        lines = [line for line in str(exc).strip().splitlines() if line.strip()]
        return result(name, False, f"{type(exc).__name__}: {lines[0] if lines else ''}")
    return result(name, ok, figures)


def check_import() -> tuple[bool, str]:
    """rft imports; the torch here meets the distribution's requirement."""
    import torch

    import rft  # noqa: F401
    from rft.trainer.torch_trainer import TorchTrainer  # noqa: F401

    try:
        requires = importlib.metadata.requires("rft-framework") or []
    except importlib.metadata.PackageNotFoundError:  # run from a checkout: its pyproject
        import tomllib

        pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
        requires = (tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
                    ["dependencies"] if pyproject.exists() else [])
    need = torch_needed(requires)
    refusal = torch_refusal(torch.__version__, need)
    if refusal is not None:
        return False, refusal
    return True, f"torch {torch.__version__} (needs torch{need or ' any'}), cuda " \
                 f"{torch.version.cuda}"


def torch_needed(requires: list[str]) -> str:
    """The torch version specifier among ``requires`` (requirement strings; ``""``: none)."""
    from packaging.requirements import Requirement

    for line in requires:
        req = Requirement(line)
        if req.name == "torch" and not req.marker:
            return str(req.specifier)
    return ""


def torch_refusal(version: str, need: str) -> str | None:
    """One line when torch ``version`` does not meet ``need`` (a specifier); else ``None``."""
    from packaging.specifiers import SpecifierSet

    have = version.split("+")[0]
    if need and not SpecifierSet(need).contains(have, prereleases=True):
        return f"torch {have}, rft needs torch{need}"
    return None


def check_trainer(args: argparse.Namespace, model: Path, work: Path) -> tuple[bool, str]:
    """The torch trainer in this process: ``--steps`` GRPO steps on a fixed batch."""
    import torch
    from trainer_scaling import batch, trainer_plan

    from rft.trainer.torch_trainer import TorchTrainer

    plan = trainer_plan(model, work / "trainer", 1, args, offload=False, checkpointing=False)
    cuda = args.device == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    trainer = TorchTrainer(plan)
    try:
        experiences = batch(args, trainer.vocab_size)
        tokens = sum(e.tokens.numel() for e in experiences)
        times = []
        for _ in range(args.steps):
            started = time.perf_counter()
            metrics = trainer.train_step(experiences)
            if cuda:
                torch.cuda.synchronize()
            times.append(time.perf_counter() - started)
        config = trainer.actor.config
        total = sum(p.numel() for p in trainer.actor.parameters())
    finally:
        trainer.close()
    seconds = statistics.median(times[1:] if len(times) > 1 else times)
    figures = f"s/step={seconds:.3f} tokens/s={tokens / seconds:.0f}"
    if cuda:
        non_embedding = total - config.vocab_size * config.hidden_size
        flops = (6 * non_embedding + 12 * config.num_hidden_layers * config.hidden_size
                 * (args.prompt + args.response)) * tokens / seconds
        figures += (f" peak_GiB={torch.cuda.max_memory_allocated() / 2**30:.2f}"
                    f" MFU={flops / (args.peak_tflops * 1e12):.3f}")
    loss = metrics.get("actor/pg_loss", float("nan"))
    return loss == loss, figures + f" pg_loss={loss:.4g}"


def check_fsdp2_offload(args: argparse.Namespace, model: Path) -> tuple[bool, str]:
    """One FSDP2 rank with ``CPUOffloadPolicy`` under :func:`process_group_backend`."""
    import torch
    import torch.distributed as dist
    from transformers import AutoModelForCausalLM

    from rft.trainer.fsdp import clip_grad_norm, shard_model
    from rft.trainer.parallel import RankGroup, free_port, process_group_backend

    device = torch.device(args.device, 0) if args.device == "cuda" else torch.device("cpu")
    group = RankGroup.initialize(0, 1, "127.0.0.1", free_port(), device, 120.0,
                                 cpu_offload=True)
    try:
        actor = AutoModelForCausalLM.from_pretrained(str(model), dtype=torch.float32)
        shard_model(actor, group, offload=True,
                    param_dtype=torch.bfloat16 if device.type == "cuda" else None)
        ids = torch.randint(3, actor.config.vocab_size, (2, 32), device=device)
        actor(input_ids=ids, labels=ids).loss.backward()
        norm = float(clip_grad_norm(actor.parameters(), 1.0))
        gathered = sum(p.full_tensor().numel() for p in actor.parameters())
        on_host = all(p.to_local().device.type == "cpu" for p in actor.parameters())
    finally:
        dist.destroy_process_group()
    backend = process_group_backend(device.type, True)
    ok = group.backend == backend and norm == norm and norm > 0 and on_host
    return ok, (f"backend={group.backend} grad_norm={norm:.4g} gathered={gathered} "
                f"params_on_host={on_host}")


def check_colocate(args: argparse.Namespace, model: Path, work: Path,
                   temperature: float) -> tuple[bool, str]:
    """Mode colocate, ``hf`` engine on the device, 2 steps; the engine's log-probs against
    the trainer's after each sync (``rollout_logprobs_diff_max``)."""
    from rft.testing.runs import run_tiny, write_taskset

    root = work / f"colocate_t{temperature:g}"
    root.mkdir(parents=True, exist_ok=True)
    cuda = args.device == "cuda"
    dtype = "bfloat16" if cuda else "float32"
    started = time.perf_counter()
    outcome = run_tiny(model, write_taskset(root / "tasks.jsonl"), root, {
        "model.temperature": temperature,
        "explorer.rollout_model.dtype": dtype,
        "explorer.rollout_model.extra_engine_args": {"device": args.device},
        "trainer.trainer_config": {"torch": {"device": args.device, "dtype": dtype},
                                   "actor_rollout_ref": {"actor": {"ppo_epochs": 2}}},
    }, steps=2)
    seconds = time.perf_counter() - started
    gaps = [m["training/rollout_logprobs_diff_max"] for m in outcome.metrics
            if "training/rollout_logprobs_diff_max" in m]
    probs = [m["training/rollout_probs_diff_mean"] for m in outcome.metrics
             if "training/rollout_probs_diff_mean" in m]
    limit = 0.05 if cuda else 1e-4  # bf16 engine and bf16-autocast trainer vs fp32 on CPU
    ok = len(outcome.metrics) == 2 and len(gaps) == 2 and max(probs) <= 0.01 and (
        cuda or max(gaps) <= limit)
    return ok, (f"steps={len(outcome.metrics)} s={seconds:.1f} logprobs_diff_max="
                f"{max(gaps, default=float('nan')):.3g} probs_diff_mean="
                f"{max(probs, default=float('nan')):.3g}")


def check_prefix_sharing(args: argparse.Namespace, model: Path) -> tuple[bool, str]:
    """``response_logprobs`` with each distinct prompt run once vs per row, the model in
    bf16 on the device."""
    import torch
    from transformers import AutoModelForCausalLM

    from rft.experience import EID, Experience, pad_batch
    from rft.trainer.batching import TensorBatch
    from rft.trainer.models import response_logprobs, uses_shared_prompts

    device = torch.device(args.device)
    actor = AutoModelForCausalLM.from_pretrained(str(model), dtype=torch.float32,
                                                 attn_implementation="sdpa").to(device).eval()
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(3, actor.config.vocab_size, (args.prompt,), generator=g)
    experiences = [Experience(tokens=torch.cat([prompt, torch.randint(
        3, actor.config.vocab_size, (args.response,), generator=g)]),
        prompt_length=args.prompt, reward=0.0, eid=EID(batch=0, task=0, run=i))
        for i in range(4)]
    padded = pad_batch(experiences, pad_token_id=0)
    batch = TensorBatch(padded.prompt_width, {
        "input_ids": padded.input_ids, "attention_mask": padded.attention_mask,
        "position_ids": padded.position_ids, "response_mask": padded.response_mask})
    from rft.trainer.packed_forward import fallback_reason

    if not uses_shared_prompts(actor, batch, None):
        reason = fallback_reason(actor, batch["input_ids"], batch["attention_mask"],
                                 batch["position_ids"], batch.prompt_width)
        return False, f"prefix sharing does not apply: {reason}"
    times = {}
    logps = {}
    with torch.no_grad():
        for shared in (False, True):
            started = time.perf_counter()
            logps[shared], _ = response_logprobs(actor, batch, device=device,
                                                shared_prompts=shared)
            if device.type == "cuda":
                torch.cuda.synchronize()
            times[shared] = time.perf_counter() - started
    gap = (logps[True] - logps[False]).abs().max().item()
    bf16 = uses_shared_prompts(actor, batch, torch.bfloat16)  # the trainer's bf16 autocast
    return gap <= 1e-3, (f"max_logprob_gap={gap:.3g} s_shared={times[True]:.3f} "
                         f"s_per_row={times[False]:.3f} shares_in_bf16={bf16}")


def check_compile_decode(args: argparse.Namespace, model: Path) -> tuple[bool, str]:
    """The ``hf`` engine's decode steps through ``torch.compile`` against eager decoding,
    both fp32 on the device with one seed: greedy tokens, and the compiled engine's sampled
    log-probs (drawn in the compiled graph: ``compiled_draws``) against the eager engine's
    teacher forcing."""
    import torch

    from rft.engines import SamplingArgs
    from rft.engines.compiled_step import CompiledStep
    from rft.engines.hf_engine import HFEngine

    engines = {compiled: HFEngine(str(model), seed=0, device=args.device,
                                  compile_decode=compiled) for compiled in (True, False)}
    g = torch.Generator().manual_seed(0)
    vocab = engines[False].model.config.vocab_size
    prompts = [torch.randint(3, vocab, (args.prompt,), generator=g).tolist()
               for _ in range(4)]
    greedy = SamplingArgs(temperature=0, max_tokens=32)
    sampled = SamplingArgs(temperature=1.0, max_tokens=32)
    seconds: dict[bool, list[float]] = {True: [], False: []}
    tokens: dict[bool, list[list[int]]] = {}
    for compiled, engine in engines.items():
        for _ in range(3):  # the first compiled call holds the compile
            started = time.perf_counter()
            results = engine.generate(prompts, greedy, 8)
            if args.device == "cuda":
                torch.cuda.synchronize()
            seconds[compiled].append(time.perf_counter() - started)
        tokens[compiled] = [c.token_ids for group in results for c in group]
    same = sum(a == b for a, b in zip(tokens[True], tokens[False], strict=True))
    completions = [c for group in engines[True].generate(prompts, sampled, 8) for c in group]
    forced = engines[False].compute_logprobs([c.tokens for c in completions],
                                             [len(c.prompt_token_ids) for c in completions])
    gap = max(float((c.logprobs - f).abs().max()) for c, f in zip(completions, forced,
                                                                    strict=True)
              if c.logprobs is not None)
    step = engines[True].step_forward
    assert isinstance(step, CompiledStep)
    ok = (step.failure is None and step.compiled_calls > 0 and step.compiled_draws > 0
          and gap <= 1e-3)
    return ok, (f"compiled_calls={step.compiled_calls} compiled_draws={step.compiled_draws} "
                f"failure={step.failure!r} "
                f"greedy_rows_equal={same}/{len(tokens[True])} max_logprob_gap={gap:.3g} "
                f"s_first_compiled={seconds[True][0]:.1f} "
                f"s_per_call_compiled={min(seconds[True][1:]):.3f} "
                f"s_per_call_eager={min(seconds[False][1:]):.3f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--model", choices=["tiny", "small", "qwen2-0.5b"], default="qwen2-0.5b")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--response", type=int, default=192)
    parser.add_argument("--token-budget", type=int, default=4096)
    parser.add_argument("--peak-tflops", type=float, default=989.0,
                        help="dense bf16 peak per GPU (H100 SXM and H200: 989)")
    args = parser.parse_args()
    if not guarded("import", check_import):
        return 1
    from trainer_scaling import build_model

    from rft.testing.tiny_model import build_tiny_model

    with tempfile.TemporaryDirectory(prefix="rft-gpu-check-") as tmp:
        work = Path(tmp)
        if args.model == "tiny":  # head size 16: the smoke run's model
            big = build_tiny_model(work / "model", seed=0)
        else:
            big = build_model(args.model, work / "model")
        small = build_tiny_model(work / "small", seed=0, hidden_size=128, num_heads=4,
                                 num_kv_heads=2) if args.model != "tiny" else big
        outcomes = [
            guarded("trainer", lambda: check_trainer(args, big, work)),
            guarded("fsdp2_offload", lambda: check_fsdp2_offload(args, small)),
            guarded("colocate_t1", lambda: check_colocate(args, small, work, 1.0)),
            guarded("colocate_t0.7", lambda: check_colocate(args, small, work, 0.7)),
            guarded("compile_decode", lambda: check_compile_decode(args, small)),
            guarded("prefix_sharing", lambda: check_prefix_sharing(args, big)),
        ]
    return 0 if all(outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
