"""Log-probabilities of the ``vllm`` engine: when vLLM's processed log-probs are the
contract's ``log_softmax(z / T)`` (:mod:`rft.engines.vllm_engine`), the one-line warning
when they are kept although they are not, one position's log-prob from vLLM's prompt
log-probs, and the per-prompt sampling seeds."""

from __future__ import annotations

import math
from typing import Any

import torch

from rft.engines.engine import SamplingArgs


def _prompt_seed(seed: int, index: int, n: int) -> int:
    """Seed of prompt ``index`` of a call seeded ``seed``; vLLM seeds its ``n`` samples
    ``seed_i, seed_i + 1, …``, so prompts get disjoint ranges."""
    return (seed * 1_000_003 + index * n) % (2**63 - 1)


def _unit_temperature(temperature: float) -> bool:
    """Scoring at ``temperature`` needs the sampled token's raw log-prob only."""
    return math.isclose(temperature, 1.0, rel_tol=0.0, abs_tol=1e-12)


def _reshapes_distribution(sampling: SamplingArgs) -> bool:
    """Top-p < 1, top-k > 0 or a repetition penalty: the processed log-probs differ from the
    contract's at every position (``min_tokens`` alone changes the first few only, and is
    re-scored)."""
    return sampling.temperature > 0 and (
        sampling.top_p < 1.0 or sampling.top_k > 0 or sampling.repetition_penalty != 1.0)


def processed_logprobs_warning(sampling: SamplingArgs) -> str:
    """The one-line warning of a generation whose log-probs are not re-scored."""
    settings = [f"top_p {sampling.top_p:g}" if sampling.top_p < 1.0 else "",
                f"top_k {sampling.top_k}" if sampling.top_k > 0 else "",
                (f"repetition_penalty {sampling.repetition_penalty:g}"
                 if sampling.repetition_penalty != 1.0 else "")]
    return (f"vllm engine: rollout log-probs with {', '.join(x for x in settings if x)} at "
            f"temperature {sampling.logprob_temperature:g} are vLLM's processed ones, not "
            f"log_softmax(z / T): re-scoring would need full-vocabulary prompt log-probs "
            f"(vocabulary × length floats per response); the trainer scores the responses "
            f"itself (trainer_config.torch.use_rollout_logprobs: false, the default; "
            f"extra_engine_args.rescore_full_vocabulary: true re-scores)")


def _processed_logprobs_exact(sampling: SamplingArgs) -> bool:
    """vLLM's processed log-probs are ``log_softmax(z / T)`` only without logits
    processing beyond the temperature."""
    if sampling.temperature == 0:
        return sampling.repetition_penalty == 1.0 and sampling.min_tokens == 0
    return (sampling.top_k <= 0 and sampling.top_p >= 1.0
            and sampling.repetition_penalty == 1.0 and sampling.min_tokens == 0)


def _position_logprob(prompt_logprobs: Any, position: int, token: int, temperature: float,
                      raw: bool) -> float:
    """``log_softmax(z / T)[token]`` at ``position`` from vLLM's (raw) prompt log-probs:
    the token's entry when ``raw``, else rescaled from the full distribution."""
    start = prompt_logprobs.start_indices[position]
    end = prompt_logprobs.end_indices[position]
    ids = prompt_logprobs.token_ids[start:end]
    values = prompt_logprobs.logprobs[start:end]
    if raw:
        return float(values[ids.index(token)])
    # (V,) raw log-probs z − logsumexp(z) by token id (the sampled token is listed twice:
    # its own entry and the vocabulary's)
    full = torch.full((max(ids) + 1,), -math.inf, dtype=torch.float64)
    full[torch.as_tensor(ids)] = torch.as_tensor(values, dtype=torch.float64)
    return float(full[token] / temperature - torch.logsumexp(full / temperature, dim=0))
