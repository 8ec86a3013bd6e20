"""The ``hf`` inference engine on the tiny model: determinism, n samples, logprobs equal
teacher forcing, token limits, prompt truncation, weight updates, chat template."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

from rft.errors import RftError  # noqa: E402
from rft.engines import Completion, InferenceEngine, SamplingArgs  # noqa: E402
from rft.engines.hf_engine import HFEngine, HFEngineArgs  # noqa: E402
from rft.testing.engines import (  # noqa: E402
    assert_seeded_generation_reproduces, assert_stop_tokens_and_min_tokens)

ATOL = 1e-5


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def engine(tiny_model_dir: Path) -> HFEngine:  # noqa: F811
    return HFEngine(str(tiny_model_dir), seed=7)


@pytest.fixture(scope="module")
def prompts(engine: HFEngine) -> list[list[int]]:
    return [engine.apply_chat_template([{"role": "user", "content": "What is 12 + 30?"}]),
            engine.tokenizer.encode("Question: Tom has 3 apples.", add_special_tokens=False),
            [5, 6, 7]]


def _flat(results: list[list[Completion]]) -> list[Completion]:
    return [c for group in results for c in group]


def _assert_logprobs_match(engine: HFEngine, results: list[list[Completion]],
                           temperature: float) -> None:
    completions = _flat(results)
    recomputed = engine.compute_logprobs([c.tokens for c in completions],
                                         [len(c.prompt_token_ids) for c in completions],
                                         temperature=temperature)
    for c, logps in zip(completions, recomputed):
        assert c.logprobs is not None and c.logprobs.dtype == torch.float32
        assert c.logprobs.shape == logps.shape == (len(c.token_ids),)
        torch.testing.assert_close(c.logprobs, logps, atol=ATOL, rtol=0)


def test_is_an_inference_engine_and_registered() -> None:
    import rft.builtin.engines as engines_module
    from rft.plugins import PluginRegistry, args_type_of, create_plugin_manager

    manager = create_plugin_manager(autoload=False)
    if not manager.is_registered(engines_module):
        manager.register(engines_module, name="rft.builtin.engines")
    registry = PluginRegistry(manager)
    assert registry.get("engine", "hf") is HFEngine
    assert issubclass(HFEngine, InferenceEngine)
    assert args_type_of(HFEngine) is HFEngineArgs


def test_generation_is_deterministic_for_a_seed(engine: HFEngine, prompts) -> None:
    assert_seeded_generation_reproduces(engine, prompts, n=2)


def test_engine_seed_sequence_reproduces_across_engines(
        tiny_model_dir: Path, prompts) -> None:  # noqa: F811
    sampling = SamplingArgs(max_tokens=6)
    runs = []
    for _ in range(2):
        fresh = HFEngine(str(tiny_model_dir), seed=11)
        runs.append([[c.token_ids for c in _flat(fresh.generate(prompts, sampling))]
                     for _ in range(2)])
    assert runs[0] == runs[1]
    assert runs[0][0] != runs[0][1]  # successive calls use successive seeds


def test_global_rng_is_untouched(engine: HFEngine, prompts) -> None:
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    engine.generate(prompts, SamplingArgs(max_tokens=4, seed=5))
    assert torch.equal(torch.rand(3), expected)


def test_n_samples_per_prompt(engine: HFEngine, prompts) -> None:
    results = engine.generate(prompts, SamplingArgs(max_tokens=10, seed=3), n=4)
    assert len(results) == len(prompts)
    for prompt, group in zip(prompts, results):
        assert len(group) == 4
        assert all(c.prompt_token_ids == prompt for c in group)
        assert len({tuple(c.token_ids) for c in group}) > 1  # samples differ
        for c in group:
            assert c.model_version == 0 and not c.prompt_truncated
            assert c.text == engine.tokenizer.decode(c.token_ids, skip_special_tokens=True)


@pytest.mark.parametrize("sampling", [
    SamplingArgs(max_tokens=16, seed=1),
    SamplingArgs(max_tokens=16, seed=2, temperature=0.7),
    SamplingArgs(max_tokens=16, seed=3, temperature=1.3, top_k=20, top_p=0.9),
    SamplingArgs(max_tokens=16, seed=4, temperature=0.9, repetition_penalty=1.2),
], ids=["T1", "T0.7", "T1.3-topk-topp", "rep-penalty"])
def test_generate_logprobs_equal_compute_logprobs(engine: HFEngine, prompts, sampling) -> None:
    results = engine.generate(prompts, sampling, n=2)
    _assert_logprobs_match(engine, results, sampling.logprob_temperature)


def test_greedy_is_seed_independent_and_uses_raw_logprobs(engine: HFEngine, prompts) -> None:
    a = engine.generate(prompts, SamplingArgs(temperature=0, max_tokens=8, seed=1), n=2)
    b = engine.generate(prompts, SamplingArgs(temperature=0, max_tokens=8, seed=2))
    assert [g[0].token_ids for g in a] == [g[1].token_ids for g in a] == [g[0].token_ids for g in b]
    _assert_logprobs_match(engine, a, temperature=1.0)
    # greedy picks the arg-max: its log-prob is the largest at every step
    seq = a[0][0]
    logits = engine.model(torch.tensor([seq.tokens])).logits[0]  # (L, V)
    P = len(seq.prompt_token_ids)
    assert logits[P - 1:-1].argmax(-1).tolist() == seq.token_ids


def test_logprobs_flag_off(engine: HFEngine, prompts) -> None:
    results = engine.generate(prompts, SamplingArgs(max_tokens=4, seed=1, logprobs=False))
    assert all(c.logprobs is None for c in _flat(results))


def test_max_tokens_respected(engine: HFEngine, prompts) -> None:
    results = engine.generate(prompts, SamplingArgs(max_tokens=5, seed=9), n=3)
    for c in _flat(results):
        assert 1 <= len(c.token_ids) <= 5
        if c.finish_reason == "length":
            assert len(c.token_ids) == 5


def test_stop_tokens_and_min_tokens(engine: HFEngine, prompts) -> None:
    assert_stop_tokens_and_min_tokens(engine, prompts)


def test_eos_ends_generation(engine: HFEngine, prompts) -> None:
    tokenizer = engine.tokenizer
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert im_end in engine.eos_token_ids and tokenizer.pad_token_id in engine.eos_token_ids
    # Make <|im_end|> the likeliest next token: with tied embeddings its logit is
    # h · E[im_end], so point its embedding row along the (mean) final hidden state.
    saved = engine.model.get_input_embeddings().weight.detach().clone()
    try:
        row = saved.clone()
        hidden = _mean_final_hidden(engine, prompts)  # (H,)
        row[im_end] = 50.0 * hidden / hidden.norm()
        engine.update_weights([("model.embed_tokens.weight", row)], version=1)
        results = engine.generate(prompts, SamplingArgs(max_tokens=10, seed=1), n=2)
        for c in _flat(results):
            assert c.finish_reason == "stop" and c.token_ids[-1] == im_end
            assert "<|im_end|>" not in c.text
        _assert_logprobs_match(engine, results, 1.0)
        # ignore_eos: the same likely EOS no longer ends a response; the budget does.
        ignored = engine.generate(prompts, SamplingArgs(max_tokens=10, seed=1, ignore_eos=True),
                                  n=2)
        for c in _flat(ignored):
            assert c.finish_reason == "length" and len(c.token_ids) == 10
            assert im_end in c.token_ids
        _assert_logprobs_match(engine, ignored, 1.0)
    finally:
        engine.update_weights([("model.embed_tokens.weight", saved)], version=0)


def _mean_final_hidden(engine: HFEngine, prompts) -> torch.Tensor:
    with torch.no_grad():
        states = [engine.model.model(torch.tensor([p])).last_hidden_state[0, -1]
                  for p in prompts]  # (H,) each
    return torch.stack(states).mean(0)


def test_stop_strings(engine: HFEngine, prompts) -> None:
    base = engine.generate(prompts[:1], SamplingArgs(max_tokens=12, seed=21))[0][0]
    assert len(base.text) > 3
    stop = base.text[2:4]
    cut = engine.generate(prompts[:1], SamplingArgs(max_tokens=12, seed=21, stop=(stop,)))[0][0]
    assert cut.finish_reason == "stop" and cut.stop_reason == stop
    assert cut.token_ids == base.token_ids[:len(cut.token_ids)]
    assert stop not in cut.text and base.text.startswith(cut.text)


def test_a_stop_string_late_in_a_long_response(engine: HFEngine, prompts) -> None:
    """The decode loop looks for stop strings in each row's last tokens only; a stop string
    40 tokens in is still found, at its first occurrence."""
    sampling = SamplingArgs(max_tokens=48, seed=21, ignore_eos=True)
    base = engine.generate(prompts[:1], sampling)[0][0]
    assert len(base.token_ids) == 48
    stop = base.text[-6:-2].strip() or base.text[-3:]
    cut = engine.generate(prompts[:1], dataclasses.replace(sampling, stop=(stop,)))[0][0]
    assert cut.finish_reason == "stop" and cut.stop_reason == stop
    assert cut.text == base.text[: base.text.index(stop)]
    assert cut.token_ids == base.token_ids[: len(cut.token_ids)]
    # the in-loop check (last tokens only) fires at the step a full decode would
    check = engine._stop_string_check(dataclasses.replace(sampling, stop=(stop,)))
    ids = torch.tensor([base.token_ids])
    windowed = [bool(check(ids[:, :t])[0]) for t in range(1, 49)]
    full = [stop in engine.tokenizer.decode(base.token_ids[:t], skip_special_tokens=True)
            for t in range(1, 49)]
    assert windowed.index(True) == full.index(True) == len(cut.token_ids) - 1


def test_prompt_truncation(tiny_model_dir: Path) -> None:  # noqa: F811
    long_prompt = list(range(3, 23))  # 20 tokens
    truncating = HFEngine(str(tiny_model_dir), max_prompt_tokens=8, enable_prompt_truncation=True)
    results = truncating.generate([long_prompt, [3, 4]], SamplingArgs(max_tokens=4, seed=0))
    assert results[0][0].prompt_token_ids == long_prompt[-8:] and results[0][0].prompt_truncated
    assert results[1][0].prompt_token_ids == [3, 4] and not results[1][0].prompt_truncated
    _assert_logprobs_match(truncating, results, 1.0)

    refusing = HFEngine(str(tiny_model_dir), max_prompt_tokens=8, enable_prompt_truncation=False)
    with pytest.raises(RftError, match=r"prompt 1 has 20 tokens, more than the limit of 8") as info:
        refusing.generate([[3, 4], long_prompt], SamplingArgs(max_tokens=4))
    assert "\n" not in str(info.value)


def test_max_model_len_bounds_new_tokens(tiny_model_dir: Path) -> None:  # noqa: F811
    engine = HFEngine(str(tiny_model_dir), max_model_len=12, max_response_tokens=10)
    assert engine.prompt_limit() == 11
    results = engine.generate([[3, 4, 5], list(range(3, 11))], SamplingArgs(seed=0), n=2)
    for group, prompt_len in zip(results, (3, 8)):
        for c in group:
            assert len(c.prompt_token_ids) + len(c.token_ids) <= 12
            assert len(c.token_ids) <= 10
    assert any(len(c.token_ids) == 4 and c.finish_reason == "length" for c in results[1])
    _assert_logprobs_match(engine, results, 1.0)


def test_batched_equals_chunked_scoring(
        tiny_model_dir: Path, engine: HFEngine, prompts) -> None:  # noqa: F811
    results = _flat(engine.generate(prompts, SamplingArgs(max_tokens=8, seed=2), n=2))
    chunked = HFEngine(str(tiny_model_dir), max_batch_size=1)
    seqs, lens = [c.tokens for c in results], [len(c.prompt_token_ids) for c in results]
    for a, b in zip(engine.compute_logprobs(seqs, lens), chunked.compute_logprobs(seqs, lens)):
        torch.testing.assert_close(a, b, atol=ATOL, rtol=0)
    # chunked generation is deterministic and consistent too
    out = chunked.generate(prompts, SamplingArgs(max_tokens=8, seed=2), n=2)
    again = chunked.generate(prompts, SamplingArgs(max_tokens=8, seed=2), n=2)
    assert [c.token_ids for c in _flat(out)] == [c.token_ids for c in _flat(again)]
    _assert_logprobs_match(chunked, out, 1.0)


def test_update_weights_changes_outputs_and_version(
        tiny_model_dir: Path, prompts) -> None:  # noqa: F811
    engine = HFEngine(str(tiny_model_dir))
    sampling = SamplingArgs(temperature=0, max_tokens=8)
    before = [c.token_ids for c in _flat(engine.generate(prompts, sampling))]
    before_logps = engine.compute_logprobs([prompts[0] + [5, 6]], [len(prompts[0])])[0]
    generator = torch.Generator().manual_seed(0)
    new_weights = [(name, tensor + 0.05 * torch.randn(tensor.shape, generator=generator))
                   for name, tensor in engine.model.state_dict().items()
                   if name != "lm_head.weight"]
    engine.update_weights(iter(new_weights), version=3)
    assert engine.model_version == 3
    model = engine.model
    assert model.lm_head.weight is model.model.embed_tokens.weight  # still tied
    torch.testing.assert_close(model.model.embed_tokens.weight,
                               dict(new_weights)["model.embed_tokens.weight"])
    after = engine.generate(prompts, sampling)
    assert [c.token_ids for c in _flat(after)] != before
    assert all(c.model_version == 3 for c in _flat(after))
    after_logps = engine.compute_logprobs([prompts[0] + [5, 6]], [len(prompts[0])])[0]
    assert not torch.allclose(before_logps, after_logps)
    sampled = engine.generate(prompts, SamplingArgs(max_tokens=6, seed=1))
    _assert_logprobs_match(engine, sampled, 1.0)

    # the output-embedding name updates the tied embedding too (DDP prefix stripped)
    head = torch.zeros_like(model.lm_head.weight)
    engine.update_weights([("module.lm_head.weight", head)], version=4)
    assert engine.model_version == 4 and torch.equal(model.model.embed_tokens.weight, head)

    with pytest.raises(RftError, match="no parameter 'model.nope'"):
        engine.update_weights([("model.nope", torch.zeros(1))], version=5)
    with pytest.raises(RftError, match="has shape"):
        engine.update_weights([("model.norm.weight", torch.zeros(3))], version=5)
    assert engine.model_version == 4


def test_chat_applies_template(engine: HFEngine) -> None:
    messages = [{"role": "system", "content": "Answer briefly."},
                {"role": "user", "content": "What is 6 * 7?"}]
    results = engine.chat([messages, messages[1:]], SamplingArgs(max_tokens=5, seed=1), n=2)
    expected = engine.tokenizer.encode(
        "<|im_start|>system\nAnswer briefly.<|im_end|>\n<|im_start|>user\nWhat is 6 * 7?"
        "<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)
    assert [c.prompt_token_ids for c in results[0]] == [expected, expected]
    second_turn = expected.index(1, 1)  # the user turn's <|im_start|>
    assert results[1][0].prompt_token_ids == expected[second_turn:]
    assert engine.tokenizer.decode(expected).endswith("<|im_end|>\n<|im_start|>assistant\n")


def test_each_distinct_prompt_is_prefilled_once(engine: HFEngine, prompts) -> None:
    """A call holding the same prompt twice, n samples each: one prefill of the distinct
    prompts (the decode steps run every sample row), and every sample's log-probs still
    equal teacher forcing."""
    batches: list[int] = []
    hook = engine.model.register_forward_pre_hook(
        lambda module, args, kwargs: batches.append(kwargs["input_ids"].shape[0]),
        with_kwargs=True)
    try:
        results = engine.generate([prompts[0], prompts[2], prompts[0]],
                                  SamplingArgs(max_tokens=4, seed=3), n=3)
    finally:
        hook.remove()
    assert batches[0] == 2 and set(batches[1:]) == {9}
    assert [len(group) for group in results] == [3, 3, 3]
    assert all(c.prompt_token_ids == prompts[0] for c in results[0] + results[2])
    _assert_logprobs_match(engine, results, temperature=1.0)


def test_bad_arguments_are_one_line_errors(engine: HFEngine) -> None:
    for sampling, pattern in [(SamplingArgs(temperature=-1), "temperature"),
                              (SamplingArgs(top_p=0), "top_p"),
                              (SamplingArgs(max_tokens=0), "max_tokens"),
                              (SamplingArgs(max_tokens=2, min_tokens=3), "min_tokens")]:
        with pytest.raises(RftError, match=pattern):
            engine.generate([[3, 4]], sampling)
    with pytest.raises(RftError, match="prompt 0 is empty"):
        engine.generate([[]], SamplingArgs(max_tokens=2))
    with pytest.raises(RftError, match="prompt length"):
        engine.compute_logprobs([[3, 4]], [0])


@pytest.mark.parametrize("sampling, n", [
    (SamplingArgs(), 4),
    (SamplingArgs(temperature=0.7, top_k=20), 3),
    (SamplingArgs(top_p=0.8, min_tokens=5), 3),
    (SamplingArgs(temperature=1.3, top_k=50, top_p=0.9), 2),
    (SamplingArgs(temperature=0), 1),
    (SamplingArgs(stop_token_ids=tuple(range(3, 400))), 3),  # rows stop early, at different steps
    (SamplingArgs(stop_token_ids=tuple(range(3, 400)), min_tokens=4), 3),
], ids=["plain", "temp-topk", "topp-min", "all-filters", "greedy", "early-stops", "stops-min"])
@pytest.mark.parametrize("shared", [True, False], ids=["prompt-once", "repeated-rows"])
def test_decode_loop_draws_exactly_what_generate_draws(engine: HFEngine, prompts, sampling,
                                                       n, shared) -> None:
    """The engine's own KV-cache loop, drawing with ``torch.multinomial`` as ``generate``
    does, against ``transformers``' ``generate`` with the engine's generation config: the
    same seed gives the same tokens (bit for bit), the same number of steps and the same
    raw logits — with each prompt prefilled once and its cache expanded over its ``n``
    rows (≤ 1e-6: fewer rows in a matrix product), and with the ``n`` rows prefilled one
    by one (bit for bit)."""
    from rft.engines.decode_loop import DecodeSettings, covers, draw_multinomial, sample_tokens

    assert engine.model.config._attn_implementation == "rft_sdpa_gqa"  # what the engine runs
    assert covers(sampling)
    rows = [p for p in prompts for _ in range(n)]
    input_ids, attention_mask = engine._left_pad(rows)
    distinct_ids, distinct_mask = engine._left_pad(prompts)
    config = engine._generation_config(sampling, 1, 12)
    with torch.random.fork_rng():
        torch.manual_seed(5)
        reference = engine.model.generate(input_ids=input_ids, attention_mask=attention_mask,
                                          generation_config=config)
        torch.manual_seed(5)
        ours = sample_tokens(engine.model, *((distinct_ids, distinct_mask) if shared
                                             else (input_ids, attention_mask)), DecodeSettings(
            max_new_tokens=12, min_new_tokens=sampling.min_tokens,
            temperature=sampling.temperature, top_k=max(sampling.top_k, 0), top_p=sampling.top_p,
            stop_token_ids=list(config.eos_token_id), pad_token_id=engine.pad_token_id),
            draw=draw_multinomial, repeats=n if shared else 1)
    assert torch.equal(ours.tokens, reference.sequences[:, input_ids.shape[1]:])
    assert len(ours.logits) == len(reference.logits)
    for a, b in zip(ours.logits, reference.logits, strict=True):
        # one prefill per prompt is a matrix product over fewer rows: on some CPUs another
        # kernel, ~1e-7 apart; the repeated rows are generate's own shapes, bit for bit
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6 if shared else 0.0)


def test_settings_the_decode_loop_does_not_cover_go_through_generate() -> None:
    from rft.engines.decode_loop import covers

    assert not covers(SamplingArgs(repetition_penalty=1.2))
    assert covers(SamplingArgs(stop=("x",)))  # stop strings end rows inside the loop


def test_chat_template_renders_once_per_conversation(engine: HFEngine, monkeypatch) -> None:
    from rft.engines import engine as engine_module

    calls: list[int] = []
    render = type(engine)._render_chat

    def counting(self, messages, add_generation_prompt, tools):
        calls.append(1)
        return render(self, messages, add_generation_prompt, tools)

    monkeypatch.setattr(type(engine), "_render_chat", counting)
    monkeypatch.setattr(engine_module, "CHAT_CACHE_SIZE", 2)
    engine._chat_cache.clear()
    first = [{"role": "user", "content": "cache me"}]
    ids = engine.apply_chat_template(first)
    ids.append(-1)  # callers get their own list
    assert engine.apply_chat_template(first) == render(engine, first, True, None) \
        and len(calls) == 1
    assert engine.apply_chat_template(first, add_generation_prompt=False) != ids[:-1]
    engine.apply_chat_template([{"role": "user", "content": "another"}])  # evicts the oldest
    assert len(engine._chat_cache) == 2 and len(calls) == 3
    engine.apply_chat_template(first)
    assert len(calls) == 4
    tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    assert engine.apply_chat_template(first, tools=tools) != engine.apply_chat_template(first)
    assert len(calls) == 5  # the tools are part of the key


def test_max_model_len_below_prompt_plus_response_caps_the_response(
        tmp_path: Path, tiny_model_dir: Path) -> None:  # noqa: F811
    """A config whose ``max_model_len`` is below ``max_prompt_tokens +
    max_response_tokens`` (Trinity-RFT up to 0.3.0 accepted it) validates with a warning,
    and its engine cuts a long prompt's response to fit ``max_model_len``."""
    from rft.config import load_config
    from rft.engines.engine_factory import build_engine, default_sampling
    from rft.plugins import PluginRegistry

    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"question": "1+1", "answer": "2"}\n')
    path = tmp_path / "short_model_len.yaml"
    path.write_text(f"""\
project: model-len
name: test
mode: both
checkpoint_root_dir: {tmp_path / 'ck'}
algorithm:
  algorithm_type: grpo
  repeat_times: 2
model:
  model_path: {tiny_model_dir}
  max_prompt_tokens: 16
  max_response_tokens: 16
  max_model_len: 20
cluster:
  node_num: 1
  gpu_per_node: 0
buffer:
  batch_size: 2
  explorer_input:
    taskset:
      name: tasks
      storage_type: file
      path: {tasks}
      format:
        prompt_key: question
        response_key: answer
    default_workflow_type: math_workflow
explorer:
  rollout_model:
    engine_type: hf
""")
    loaded = load_config(path, registry=PluginRegistry.create())
    assert ("model.max_model_len: 20 is less than max_prompt_tokens + max_response_tokens = "
            "16 + 16: a response is cut at max_model_len minus its prompt's length (as in "
            "Trinity-RFT up to 0.3.0; later versions refuse this)" in loaded.warnings)
    config = loaded.stages[0].config
    engine = build_engine(config, HFEngine)
    sampling = dataclasses.replace(default_sampling(config), seed=0, ignore_eos=True)
    long_prompt, short_prompt = list(range(3, 17)), [3, 4]  # 14 and 2 tokens
    (long,), (short,) = engine.generate([long_prompt, short_prompt], sampling)
    assert long.prompt_token_ids == long_prompt and not long.prompt_truncated
    assert len(long.token_ids) == 20 - 14 and long.finish_reason == "length"
    assert len(short.token_ids) == 16  # max_response_tokens: fits in 20
