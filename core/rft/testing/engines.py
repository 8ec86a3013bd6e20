"""Checks shared by the tests of inference engines (``hf``, ``vllm``, plugins' own).

    from rft.testing.engines import assert_seeded_generation_reproduces
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from rft.engines.engine import Completion, InferenceEngine, SamplingArgs


def flat(results: Sequence[Sequence[Completion]]) -> list[Completion]:
    """The completions of a ``generate`` result, prompt-major."""
    return [c for group in results for c in group]


def assert_seeded_generation_reproduces(engine: InferenceEngine, prompts: list[list[int]],
                                        n: int) -> list[list[Completion]]:
    """A seed fixes the tokens and log-probs of ``generate``; another seed changes them.
    Returns the first result for further checks."""
    sampling = SamplingArgs(max_tokens=12, seed=123)
    first = engine.generate(prompts, sampling, n=n)
    again = engine.generate(prompts, sampling, n=n)
    other = engine.generate(prompts, SamplingArgs(max_tokens=12, seed=124), n=n)
    assert [c.token_ids for c in flat(first)] == [c.token_ids for c in flat(again)]
    assert [c.token_ids for c in flat(first)] != [c.token_ids for c in flat(other)]
    for a, b in zip(flat(first), flat(again), strict=True):
        assert a.logprobs is not None and b.logprobs is not None
        assert torch.equal(a.logprobs, b.logprobs)
    return first


def assert_stop_tokens_and_min_tokens(engine: InferenceEngine, prompts: list[list[int]]
                                      ) -> list[list[Completion]]:
    """Extra stop token ids end a response (``stop_reason`` names the id); ``min_tokens``
    masks them below the minimum. Half the vocabulary stops. Returns the ``min_tokens``
    result for further checks."""
    stop = tuple(range(3, len(engine.tokenizer) // 2))
    free = engine.generate(prompts, SamplingArgs(max_tokens=20, seed=5, stop_token_ids=stop), n=3)
    assert any(len(c.token_ids) < 5 for c in flat(free))
    for c in flat(free):
        if c.finish_reason == "stop":
            assert c.token_ids[-1] in stop and c.stop_reason == c.token_ids[-1]
            assert not any(t in stop for t in c.token_ids[:-1])
    held = engine.generate(prompts, SamplingArgs(max_tokens=20, min_tokens=5, seed=5,
                                                 stop_token_ids=stop), n=3)
    for c in flat(held):
        assert len(c.token_ids) >= 5
        assert not any(t in stop for t in c.token_ids[:4])  # stop ids masked below min
        assert c.finish_reason == "length" or c.token_ids[-1] in stop
    return held
