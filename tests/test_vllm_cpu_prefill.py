"""vLLM on the CPU with more prompt tokens than a step's budget (#35 fully async: the
explorer's concurrent calls join one engine step).

vLLM's CPU sampler cannot rewind the generator of a seeded request whose prefill was split
across steps (``RuntimeError: CPU Generator does not use offset``, raised in the middle of
an engine step). So without CUDA the ``vllm`` engine turns chunked prefill off: a prefill
that does not fit the step's budget waits for the next step. Where the engine fails anyway
(here: chunked prefill forced back on through ``extra_engine_args``), every call in flight
fails at once with one fatal line instead of waiting for steps that never come.
"""

from __future__ import annotations

import os
import threading

import pytest
import torch

from rft.engines.call_batching import direct_call
from rft.engines.engine import SamplingArgs
from rft.errors import EngineFailedError

PROMPT = list(range(5, 105))  # 100 tokens: three of them overflow a 256-token step


def _engine(model_dir, **extra):
    from rft.engines.partial_rollout import enable_partial_rollouts
    from rft.engines.vllm_engine import VLLMEngine

    engine = VLLMEngine(str(model_dir), dtype="float32", max_model_len=256, seed=7,
                        llm_kwargs={"kv_cache_memory_bytes": 32 << 20, "max_num_seqs": 8,
                                    "max_num_batched_tokens": 256, **extra})
    enable_partial_rollouts(engine, sync_timeout=60)
    return engine


def _two_calls(engine) -> dict[str, object]:
    """Two concurrent seeded calls of three 100-token prompts each (one call's prompts
    alone overflow the 256-token step); each call's completions or its exception, by
    name."""
    results: dict[str, object] = {}

    def call(name: str, seed: int) -> None:
        try:
            results[name] = direct_call(engine, "generate", [PROMPT, PROMPT[::-1], PROMPT[1:] + [7]],
                                        SamplingArgs(max_tokens=4, temperature=1.0,
                                                     ignore_eos=True, seed=seed), 1)
        except Exception as exc:  # noqa: BLE001 - recorded for the assertions
            results[name] = exc

    threads = [threading.Thread(target=call, args=(name, seed))
               for name, seed in (("a", 3), ("b", 4))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not any(thread.is_alive() for thread in threads), "a call never returned"
    return results


@pytest.mark.slow
def test_prompts_over_the_step_budget_wait_instead_of_failing_the_cpu_sampler(
        tmp_path_factory) -> None:
    from rft.testing.tiny_model import build_tiny_model

    torch.set_num_threads(1)
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    model_dir = build_tiny_model(tmp_path_factory.mktemp("tiny_qwen2_hd32"), seed=0,
                                 hidden_size=64, num_heads=2, num_kv_heads=1)
    engine = _engine(model_dir)
    try:
        assert engine.llm_kwargs["enable_chunked_prefill"] is False  # no CUDA here
        results = _two_calls(engine)
    finally:
        engine.close()
    for name in ("a", "b"):
        groups = results[name]
        assert isinstance(groups, list), groups
        assert [len(c.token_ids) for g in groups for c in g] == [4, 4, 4]

    engine = _engine(model_dir, enable_chunked_prefill=True)  # vLLM's CPU failure, forced
    try:
        results = _two_calls(engine)
        for name in ("a", "b"):
            error = results[name]
            assert isinstance(error, EngineFailedError), error
            assert error.fatal and "CPU Generator does not use offset" in str(error)
            assert "\n" not in str(error)
        with pytest.raises(EngineFailedError):  # a later call fails at once
            direct_call(engine, "generate", [PROMPT[:10]],
                        SamplingArgs(max_tokens=2, temperature=1.0, seed=5), 1)
    finally:
        engine.close()
