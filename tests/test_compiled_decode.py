"""The ``hf`` engine's ``compile_decode`` (:mod:`rft.engines.compiled_step`), for real with
torch.compile / inductor on the CPU: the compiled decode steps give the eager engine's
tokens and teacher-forced log-probs, read weights and LoRA adapters synced in place,
and fall back to eager decoding with one warning line when compiling fails. Also: the
``hf`` engine takes ``extra_engine_args`` from the config. One compile here takes ~20–30 s
(two with the adapter), hence ``slow``."""

from __future__ import annotations

import inspect
import logging
import os
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
import yaml  # noqa: E402

from rft.adapter import AdapterWeights  # noqa: E402
from rft.engines import Completion, SamplingArgs  # noqa: E402
from rft.engines.compiled_step import CompiledStep  # noqa: E402
from rft.engines.hf_engine import HFEngine  # noqa: E402
from rft.errors import ConfigError, RftError  # noqa: E402

pytestmark = pytest.mark.slow

ATOL = 1e-5
GREEDY = SamplingArgs(temperature=0, max_tokens=10)


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def engines(tiny_model_dir: Path) -> tuple[HFEngine, HFEngine]:  # noqa: F811
    """``(compiled, eager)``: the same checkpoint and seed, ``compile_decode`` on / off."""
    return (HFEngine(str(tiny_model_dir), seed=7, compile_decode=True),
            HFEngine(str(tiny_model_dir), seed=7))


@pytest.fixture(scope="module")
def prompts(engines: tuple[HFEngine, HFEngine]) -> list[list[int]]:
    engine = engines[1]
    return [engine.apply_chat_template([{"role": "user", "content": "What is 12 + 30?"}]),
            engine.tokenizer.encode("Question: Tom has 3 apples.", add_special_tokens=False),
            [5, 6, 7]]


def _flat(results: list[list[Completion]]) -> list[Completion]:
    return [c for group in results for c in group]


def _tokens(engine: HFEngine, prompts: list[list[int]], sampling: SamplingArgs,
            n: int = 1) -> list[list[int]]:
    return [c.token_ids for c in _flat(engine.generate(prompts, sampling, n))]


def _assert_teacher_forced(engine: HFEngine, results: list[list[Completion]],
                           reference: HFEngine) -> None:
    """Each completion's log-probs equal ``reference``'s eager teacher forcing."""
    completions = _flat(results)
    recomputed = reference.compute_logprobs([c.tokens for c in completions],
                                            [len(c.prompt_token_ids) for c in completions])
    for c, logps in zip(completions, recomputed, strict=True):
        assert c.logprobs is not None
        torch.testing.assert_close(c.logprobs, logps, atol=ATOL, rtol=0)


def _compiled_calls(engine: HFEngine) -> int:
    assert isinstance(engine.step_forward, CompiledStep)
    return engine.step_forward.compiled_calls


def _graphs_compiled() -> int:
    """Frames dynamo has compiled in this process so far."""
    from torch._dynamo.utils import counters

    return int(counters["frames"]["ok"])


def test_compiled_steps_give_the_eager_engines_tokens_and_log_probs(engines, prompts) -> None:
    compiled, eager = engines
    assert eager.step_forward is None
    step = compiled.step_forward
    assert isinstance(step, CompiledStep)
    before, unguarded = _compiled_calls(compiled), step.unguarded_calls
    prefills = step.compiled_prefills
    assert _tokens(compiled, prompts, GREEDY) == _tokens(eager, prompts, GREEDY)
    assert _compiled_calls(compiled) == before + GREEDY.max_tokens - 1  # every decode step
    assert step.compiled_prefills == prefills + 1  # the call's prompts: the prompt graph
    # dynamo's guards checked on the call's first decode step only (torch >= 2.6)
    assert step.unguarded_calls == unguarded + GREEDY.max_tokens - 2
    assert step.compiled_draws == 0  # greedy: the loop picks the tokens
    graphs = _graphs_compiled()
    assert graphs >= 1
    # sampling: each step after the first draws in its graph (one more graph), from the
    # uniform numbers the eager loop draws, so the tokens are the eager engine's
    sampling = SamplingArgs(max_tokens=12, seed=3)
    sampled = compiled.generate(prompts, sampling, n=4)
    assert _graphs_compiled() == graphs + 1
    assert step.compiled_draws == sampling.max_tokens - 1
    assert step.unguarded_calls == unguarded + GREEDY.max_tokens + sampling.max_tokens - 4
    assert step.compiled_prefills == prefills + 2
    assert [len(group) for group in sampled] == [4, 4, 4]
    assert [c.token_ids for c in _flat(sampled)] == _tokens(eager, prompts, sampling, n=4)
    _assert_teacher_forced(compiled, sampled, eager)
    # another row count and cache length: the same decode graphs (rows and cache length
    # marked dynamic); a call of one prompt compiles the prompt graph once more (a size of
    # 1 is specialised), and one prompt of another length then compiles nothing
    graphs = _graphs_compiled()
    _assert_teacher_forced(compiled, compiled.generate(prompts[:1], SamplingArgs(
        max_tokens=20, seed=4), n=3), eager)
    assert _graphs_compiled() == graphs + 1
    assert len(prompts[2]) != len(prompts[0])
    _assert_teacher_forced(compiled, compiled.generate(prompts[2:], SamplingArgs(
        max_tokens=6, seed=5), n=5), eager)
    assert _graphs_compiled() == graphs + 1
    assert step.compiled_prefills == prefills + 4
    assert step.failure is None


def test_steps_draw_in_their_graph_only_for_the_settings_it_serves(engines, prompts) -> None:
    """The graph that draws serves ``T > 0`` without top-k / top-p, a minimum length
    included (its stop tokens held back); a top-p step runs the plain compiled forward and
    the loop's own filters and draw."""
    compiled, eager = engines
    step = compiled.step_forward
    assert isinstance(step, CompiledStep)
    stop = compiled.stop_token_ids(GREEDY)
    held = SamplingArgs(max_tokens=8, min_tokens=8, temperature=1.5, seed=8)
    draws, calls = step.compiled_draws, step.compiled_calls
    results = compiled.generate(prompts, held, n=2)
    assert step.compiled_draws == draws + held.max_tokens - 1
    completions = _flat(results)
    assert all(len(c.token_ids) == 8 and not set(c.token_ids) & set(stop) for c in completions)
    assert [c.token_ids for c in completions] == _tokens(eager, prompts, held, n=2)
    nucleus = SamplingArgs(max_tokens=8, top_p=0.9, seed=9)
    draws, calls = step.compiled_draws, step.compiled_calls
    assert _tokens(compiled, prompts, nucleus, n=2) == _tokens(eager, prompts, nucleus, n=2)
    assert step.compiled_draws == draws and step.compiled_calls > calls


def test_weights_and_adapters_synced_in_place_reach_the_compiled_steps(
        engines, prompts, tmp_path: Path, tiny_model_dir: Path) -> None:  # noqa: F811
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    compiled, eager = engines
    before = _tokens(compiled, prompts, GREEDY)
    generator = torch.Generator().manual_seed(0)
    new_weights = [(name, tensor + 0.05 * torch.randn(tensor.shape, generator=generator))
                   for name, tensor in eager.model.state_dict().items()
                   if name != "lm_head.weight"]
    for engine in engines:
        engine.update_weights(iter(new_weights), version=1)
    after = _tokens(compiled, prompts, GREEDY)
    assert after != before and after == _tokens(eager, prompts, GREEDY)
    _assert_teacher_forced(compiled, compiled.generate(prompts, SamplingArgs(
        max_tokens=12, seed=5), n=2), eager)

    # a LoRA adapter: inserted at the first sync (the graph compiles again), then copied
    torch.manual_seed(0)
    peft_model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32),
        LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    for name, parameter in peft_model.named_parameters():
        if "lora_B" in name:
            parameter.data.normal_(0, 0.5)
    peft_model.save_pretrained(tmp_path / "adapter")
    adapter = AdapterWeights.load(str(tmp_path / "adapter"))
    for engine in engines:
        engine.update_adapter(adapter, version=2)
    served = _tokens(compiled, prompts, GREEDY)
    assert served != after and served == _tokens(eager, prompts, GREEDY)
    _assert_teacher_forced(compiled, compiled.generate(prompts, SamplingArgs(
        max_tokens=12, seed=6), n=2), eager)
    assert compiled.step_forward is not None and compiled.step_forward.failure is None


def test_two_compiled_engines_keep_graphs_of_their_own(prompts,
                                                      tiny_model_dir: Path) -> None:  # noqa: F811
    """Every HF model's forward is one decorator's code, on which dynamo keeps its graphs and
    its recompile limit; each :class:`CompiledStep` compiles apart (``isolate_recompiles``),
    so with a limit of one graph two more engines still compile their own (sharing the
    limit, both would decode eagerly, silently)."""
    if "isolate_recompiles" not in inspect.signature(torch.compile).parameters:
        pytest.skip(f"torch {torch.__version__} has no isolate_recompiles")
    eager = HFEngine(str(tiny_model_dir), seed=7)  # the fixture's engines hold an adapter
    with torch._dynamo.config.patch(recompile_limit=1):
        more = [HFEngine(str(tiny_model_dir), seed=7, compile_decode=True) for _ in range(2)]
        graphs = _graphs_compiled()
        for engine in more:
            assert _tokens(engine, prompts, GREEDY) == _tokens(eager, prompts, GREEDY)
    assert _graphs_compiled() == graphs + 4  # each engine: its prompt graph, its step graph
    assert all(_compiled_calls(engine) == GREEDY.max_tokens - 1 for engine in more)
    assert all(isinstance(engine.step_forward, CompiledStep)
               and engine.step_forward.compiled_prefills == 1 for engine in more)


def test_a_failed_compile_is_one_warning_line_and_decoding_goes_on_eagerly(
        prompts, tmp_path: Path, caplog) -> None:
    import torch._inductor.config as inductor_config

    from rft.testing.tiny_model import build_tiny_model

    # a model of its own (hidden 48), so that no kernel built by another test serves it
    model = build_tiny_model(tmp_path / "hidden48", hidden_size=48, num_heads=4,
                             num_kv_heads=2)
    eager = HFEngine(str(model), seed=7)
    broken = HFEngine(str(model), seed=7, compile_decode=True)
    # a real failure: inductor finds no C++ compiler (its graph cache off, so it must build)
    with inductor_config.patch({"cpp.cxx": ("/nonexistent/g++",), "fx_graph_cache": False}), \
            caplog.at_level(logging.WARNING, logger="rft.engines.compiled_step"):
        got = _tokens(broken, prompts, GREEDY)
        again = _tokens(broken, prompts, GREEDY)
    assert got == again == _tokens(eager, prompts, GREEDY)
    assert broken.step_forward is not None and broken.step_forward.compiled_calls == 0
    failure = broken.step_forward.failure
    assert failure is not None and "\n" not in failure and "nonexistent" in failure
    warnings = [r.getMessage() for r in caplog.records if r.name == "rft.engines.compiled_step"]
    assert len(warnings) == 1 and "compile_decode" in warnings[0] and failure in warnings[0]


def _config(tmp_path: Path, model: Path, extra_engine_args: dict) -> Path:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"question": "1+1", "answer": "2"}\n')
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({
        "project": "p", "name": "n", "mode": "explore",
        "checkpoint_root_dir": str(tmp_path / "ck"),
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 2},
        "model": {"model_path": str(model), "max_prompt_tokens": 16,
                  "max_response_tokens": 8},
        "cluster": {"node_num": 1, "gpu_per_node": 0},
        "buffer": {"batch_size": 1, "explorer_input": {"taskset": {
            "name": "tasks", "storage_type": "file", "path": str(tasks),
            "format": {"prompt_key": "question", "response_key": "answer"}},
            "default_workflow_type": "math_workflow"}},
        "explorer": {"rollout_model": {"engine_type": "hf",
                                       "extra_engine_args": extra_engine_args}}}))
    return path


def test_the_hf_engine_takes_its_extra_engine_args_from_the_config(
        tmp_path: Path, tiny_model_dir: Path) -> None:  # noqa: F811
    from rft.config import load_config
    from rft.engines.engine_factory import build_engine

    stage = load_config(_config(tmp_path, tiny_model_dir, {
        "max_batch_size": 2, "compile_decode": True, "attn_implementation": "eager"})).stages[0]
    engine = build_engine(stage.config, stage.plan.rollout_model.engine.implementation)
    assert isinstance(engine, HFEngine) and engine.max_batch_size == 2
    assert isinstance(engine.step_forward, CompiledStep)
    assert engine.model.config._attn_implementation == "eager"
    plain = build_engine(load_config(_config(tmp_path, tiny_model_dir, {})).stages[0].config,
                         HFEngine)
    assert plain.max_batch_size is None and plain.step_forward is None
    with pytest.raises((ConfigError, RftError),
                       match=r"explorer.rollout_model.extra_engine_args.compile_decode"):
        load_config(_config(tmp_path, tiny_model_dir, {"compile_decode": "often"}))
