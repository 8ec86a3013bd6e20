"""Generation on the ``hf`` engine's decode loop: each prompt prefilled once vs once per sample.

    .venv/bin/python bench/hf_prefix_generation.py [--rounds 3] [--threads 1]
        [--prompts 16] [--n 8] [--prompt-tokens 48] [--new-tokens 32]
        [--lean-from 7d279e1]

Two models built here (:func:`rft.testing.tiny_model.build_tiny_model`, random weights,
float32): the quickstart's tiny Qwen2 (hidden 64, 2 layers) and one of hidden 512 with 4
layers. For each, ``--prompts`` distinct prompts of ``--prompt-tokens`` tokens (left
padding on a third of them), ``--n`` samples each, ``--new-tokens`` sampled tokens per
row (no stop token: every row decodes to the end), temperature 1. Contestants, one call
of :func:`rft.engines.decode_loop.sample_tokens` each (median wall time over ``--rounds``
rounds, the order rotating between rounds; one warm-up call each first):

- ``prompt_once``: the distinct prompts with ``repeats=n`` — each prompt's forward runs once
  and its ``transformers`` cache is expanded over its ``n`` rows — with
  :mod:`rft.engines.gqa_attention` (what the engine does);
- ``per_row``: the same with ``share_prompts=False`` — the ``P·n`` repeated rows are
  prefilled;
- ``once_sdpa``: ``prompt_once`` with ``transformers``' own sdpa attention (which copies
  the grouped key / value heads when a mask is given);
- ``lean`` (``--lean-from REV``, default ``7d279e1``, the last revision with it): the
  hand-written Llama-layout decoder of an earlier revision (``rft.engines.lean_decoder``,
  removed by #31), loaded from ``git show REV:…`` with that revision's decode loop, also
  with ``repeats=n``. Left out when the revision lacks it (``--lean-from ''``: never).

Printed: seconds per call of each, the prefill alone (new = 1), and the ratios
prompt_once / per_row, / once_sdpa and / lean side by side. Ratios only, never asserted.
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parent.parent


def _load_lean(revision: str, into: Path) -> ModuleType | None:
    """The decode loop of ``revision`` wired to that revision's lean decoder, or ``None``
    when the revision has no ``core/rft/engines/lean_decoder.py``."""
    files = {"decode_loop_old": "core/rft/engines/decode_loop.py",
             "lean_decoder": "core/rft/engines/lean_decoder.py",
             "decoder_ops": "core/rft/decoder_ops.py"}
    for name, path in files.items():
        shown = subprocess.run(["git", "-C", str(REPO), "show", f"{revision}:{path}"],
                               capture_output=True, text=True)
        if shown.returncode != 0:
            return None
        text = (shown.stdout
                .replace("from rft.engines.lean_decoder import", "from lean_decoder import")
                .replace("from rft.decoder_ops import", "from decoder_ops import"))
        (into / f"{name}.py").write_text(text)
    sys.path.insert(0, str(into))
    return importlib.import_module("decode_loop_old")


def _batch(prompts: int, width: int, vocab: int, seed: int):
    import torch

    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab, (prompts, width), generator=generator)  # (P, W)
    mask = torch.ones(prompts, width, dtype=torch.long)
    for row in range(0, prompts, 3):  # a third of the prompts are shorter: left padding
        mask[row, : width // 4] = 0
    ids[mask == 0] = 0
    return ids, mask


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--prompt-tokens", type=int, default=48)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--lean-from", default="7d279e1",
                        help="git revision whose lean decoder to compare with ('': none)")
    args = parser.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import torch
    from transformers import AutoModelForCausalLM

    from rft.engines.decode_loop import DecodeSettings, sample_tokens
    from rft.engines.gqa_attention import use_gqa_attention
    from rft.testing.tiny_model import build_tiny_model

    torch.set_num_threads(args.threads)
    tmp = tempfile.TemporaryDirectory()
    old = _load_lean(args.lean_from, Path(tmp.name)) if args.lean_from else None
    shapes = {"tiny (h64, 2 layers)": dict(hidden_size=64, num_layers=2),
              "h512, 4 layers": dict(hidden_size=512, num_layers=4, num_heads=8)}
    print(f"{args.prompts} prompts x n={args.n}, prompt {args.prompt_tokens} tokens, "
          f"{args.threads} thread(s), median of {args.rounds} rounds; lean decoder from "
          f"{args.lean_from if old is not None else '(not available)'}")
    header = (f"{'model':<22} {'new':>4} {'prompt_once s':>13} {'per_row s':>10} "
              f"{'once_sdpa s':>11} {'lean s':>8} {'once/per_row':>12} {'once/sdpa':>9} "
              f"{'once/lean':>10}")
    print(header)
    for label, shape in shapes.items():
        path = build_tiny_model(Path(tmp.name) / label.split()[0], seed=0, **shape)
        plain = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
        assert use_gqa_attention(model)
        ids, mask = _batch(args.prompts, args.prompt_tokens, model.config.vocab_size, seed=1)
        for new_tokens in (1, args.new_tokens):
            settings = DecodeSettings(max_new_tokens=new_tokens, min_new_tokens=0,
                                      temperature=1.0, top_k=0, top_p=1.0,
                                      stop_token_ids=[], pad_token_id=0)
            contestants: dict[str, Callable[[], object]] = {
                "prompt_once": lambda: sample_tokens(model, ids, mask, settings, repeats=args.n),
                "per_row": lambda: sample_tokens(model, ids, mask, settings, repeats=args.n,
                                                 share_prompts=False),
                "once_sdpa": lambda: sample_tokens(plain, ids, mask, settings, repeats=args.n),
            }
            if old is not None:
                old_settings = old.DecodeSettings(**vars(settings))
                contestants["lean"] = lambda: old.sample_tokens(plain, ids, mask, old_settings,
                                                                repeats=args.n)
            times: dict[str, list[float]] = {name: [] for name in contestants}
            for name, run in contestants.items():  # warm-up
                torch.manual_seed(0)
                run()
            names = list(contestants)
            for round_ in range(args.rounds):
                for name in names[round_ % len(names):] + names[:round_ % len(names)]:
                    torch.manual_seed(round_)
                    start = time.perf_counter()
                    contestants[name]()
                    times[name].append(time.perf_counter() - start)
            med = {name: statistics.median(values) for name, values in times.items()}
            lean = med.get("lean")
            print(f"{label:<22} {new_tokens:>4} {med['prompt_once']:>13.4f} "
                  f"{med['per_row']:>10.4f} {med['once_sdpa']:>11.4f} "
                  f"{lean if lean is not None else float('nan'):>8.4f} "
                  f"{med['prompt_once'] / med['per_row']:>12.3f} "
                  f"{med['prompt_once'] / med['once_sdpa']:>9.3f} "
                  f"{med['prompt_once'] / lean if lean else float('nan'):>10.3f}")
    tmp.cleanup()


if __name__ == "__main__":
    main()
