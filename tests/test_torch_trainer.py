"""The native ``torch`` trainer on a tiny random Qwen2 model (CPU, one thread).

``StandInPlugin`` below stands in for the algorithm plugins (rft-plugin-grpo, -ppo, -sft,
-dpo) and for an engine, a sample strategy and the trainer registration: it registers
``test_*`` names only, so it never collides with the real plugins. Its presets use the
advantage estimators of the grpo and ppo plugins.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from rft import hookimpl
from rft.algorithm import AlgorithmPreset
from rft_plugin_grpo import grpo_advantages
from rft_plugin_ppo import gae_advantages
from rft.config import build_stages
from rft.config.schema import OptimizerConfig
from rft.contracts import PolicyLossInputs
from rft.errors import RftError
from rft.experience import EID, Experience, pad_batch
from rft.plugins import PluginRegistry
from rft.trainer.optim import build_scheduler
from rft.trainer.torch_trainer import TorchTrainer

VOCAB = 64


def sft_nll(inputs: PolicyLossInputs, args: None):
    """Stand-in SFT loss: per-token negative log-likelihood."""
    return -inputs.log_prob, {}


@dataclass
class PairArgs:
    beta: float = 0.1
    """DPO temperature."""


def dpo_pair_loss(inputs: PolicyLossInputs, args: PairArgs):
    """Stand-in DPO loss through the sequence-level hook (rows 2k / 2k+1 = chosen / rejected)."""
    seq = ((inputs.log_prob - inputs.ref_log_prob) * inputs.response_mask).sum(-1)  # (B,)
    margin = args.beta * (seq[0::2] - seq[1::2])
    return -torch.nn.functional.logsigmoid(margin).sum() / (inputs.agg.global_batch_size / 2), {}


dpo_pair_loss.Args = PairArgs  # type: ignore[attr-defined]
dpo_pair_loss.needs_ref_log_prob = True  # type: ignore[attr-defined]


class StandInPlugin:
    """Stands in for the algorithm plugins and the engine / sampler / trainer names."""

    @hookimpl
    def register_algorithms(self) -> dict[str, Any]:
        common = {"sample_strategy": "test_sampler"}
        return {
            "test_grpo": AlgorithmPreset(advantage_fn="test_grpo_adv", repeat_times=2, **common),
            "test_ppo": AlgorithmPreset(advantage_fn="test_gae_adv", use_critic=True, **common),
            "test_sft": AlgorithmPreset(policy_loss_fn="test_sft_loss", train_only=True,
                                        experience_format="sft", **common),
            "test_dpo": AlgorithmPreset(policy_loss_fn="test_dpo_loss", train_only=True,
                                        use_reference=True, fixed_repeat_times=2,
                                        experience_format="dpo", **common),
        }

    @hookimpl
    def register_advantage_fns(self) -> dict[str, Any]:
        return {"test_grpo_adv": grpo_advantages, "test_gae_adv": gae_advantages}

    @hookimpl
    def register_policy_loss_fns(self) -> dict[str, Any]:
        return {"test_sft_loss": sft_nll, "test_dpo_loss": dpo_pair_loss}

    @hookimpl
    def register_sample_strategies(self) -> dict[str, Any]:
        return {"test_sampler": object()}

    @hookimpl
    def register_engines(self) -> dict[str, Any]:
        return {"test_engine": object()}

    @hookimpl
    def register_trainers(self) -> dict[str, Any]:
        return {"test_torch": TorchTrainer}


@pytest.fixture(scope="module")
def registry() -> PluginRegistry:
    # Built-ins only: the trainer tests do not depend on installed plugin distributions.
    return PluginRegistry.create(extra_plugins=[StandInPlugin()], autoload=False)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("tiny_qwen2")
    torch.manual_seed(1234)
    config = Qwen2Config(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, intermediate_size=64,
                         tie_word_embeddings=True)
    Qwen2ForCausalLM(config).save_pretrained(path)
    return path


def merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in update.items():
        out[key] = merge(out[key], value) if isinstance(value, dict) and key in out else value
    return out


def make_trainer(registry, model_dir, tmp_path, **sections: Any) -> TorchTrainer:
    plain = {
        "mode": "train", "checkpoint_root_dir": str(tmp_path / "ck"),
        "algorithm": {"algorithm_type": "test_grpo", "optimizer": {"lr": 1e-3}},
        "model": {"model_path": str(model_dir), "max_prompt_tokens": 8,
                  "max_response_tokens": 8},
        "buffer": {"batch_size": 3, "total_steps": 1, "trainer_input": {"experience_buffer": {
            "name": "exp", "storage_type": "sql", "path": str(tmp_path / "exp.db")}}},
        "explorer": {"rollout_model": {"engine_type": "test_engine"}},
        "synchronizer": {"sync_method": "checkpoint"},
        "trainer": {"trainer_type": "test_torch", "use_dynamic_bsz": False,
                    "trainer_config": {"torch": {"device": "cpu"}}},  # exact checks: CPU
        "monitor": {"monitor_type": "jsonl"},
    }
    stage = build_stages(merge(plain, sections), registry).stages[0]
    return TorchTrainer(stage.plan.trainer_plan())


def rollouts(n: int = 6, seed: int = 0, group: int = 2) -> list[Experience]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        prompt, response = 2 + i % 3, 2 + (i * 5) % 7
        tokens = torch.randint(0, VOCAB, (prompt + response,), generator=g)
        out.append(Experience(tokens=tokens, prompt_length=prompt, reward=float((i * 7) % 3 == 0),
                              logprobs=-torch.rand(response, generator=g),
                              eid=EID(batch=0, task=i // group, run=i % group)))
    return out


def test_pad_batch_layout() -> None:
    """Prompts right-aligned at column P, responses left-aligned after it, masks, rewards on
    the last response token (or token-level), log-probs only when every row has them."""
    g = torch.Generator().manual_seed(1)
    shapes = [(3, 4), (1, 0), (5, 2), (2, 6)]  # (prompt, response); one empty response
    experiences = []
    for i, (prompt, response) in enumerate(shapes):
        exp = Experience(tokens=torch.randint(1, VOCAB, (prompt + response,), generator=g),
                         prompt_length=prompt, reward=float(i + 1),
                         logprobs=-torch.rand(response, generator=g), eid=EID(task=i))
        experiences.append(exp)
    experiences[3].action_mask = torch.tensor([True, False, False, True, True, True])
    experiences[2].token_level_reward = torch.tensor([0.5, -0.5])
    batch = pad_batch(experiences, pad_token_id=0)
    P, R = 5, 6
    assert batch.prompt_width == P and batch.input_ids.shape == (4, P + R)
    for row, (exp, (prompt, response)) in enumerate(zip(experiences, shapes)):
        expected = torch.zeros(P + R, dtype=torch.long)
        expected[P - prompt: P + response] = exp.tokens
        assert torch.equal(batch.input_ids[row], expected)
        assert torch.equal(batch.attention_mask[row], (expected != 0).long())
        assert torch.equal(batch.response_mask[row, :response], exp.action_mask.float())
        assert batch.response_mask[row, response:].abs().sum() == 0
        assert torch.equal(batch.rollout_log_prob[row, :response], exp.logprobs)
        assert batch.rollout_log_prob[row, response:].abs().sum() == 0
        valid = batch.position_ids[row][batch.attention_mask[row] == 1]
        assert torch.equal(valid, torch.arange(prompt + response))
    assert batch.rewards.tolist() == [1.0, 0.0, 0.0, 4.0]
    assert batch.token_level_rewards[0].tolist() == [0, 0, 0, 1.0, 0, 0]
    assert batch.token_level_rewards[1].abs().sum() == 0  # no response: nowhere to put it
    assert batch.token_level_rewards[2].tolist() == [0.5, -0.5, 0, 0, 0, 0]
    assert batch.token_level_rewards[3].tolist() == [0, 0, 0, 0, 0, 4.0]
    for exp in experiences:  # a teacher's log-probs are padded the same way
        exp.teacher_logprobs = exp.logprobs * 2
    teacher = pad_batch(experiences, pad_token_id=0).teacher_log_prob  # (B, R)
    assert torch.equal(teacher, batch.rollout_log_prob * 2)
    experiences[1].logprobs = experiences[2].teacher_logprobs = None
    padded = pad_batch(experiences, pad_token_id=0)
    assert padded.rollout_log_prob is None and padded.teacher_log_prob is None


def params(trainer: TorchTrainer) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in trainer.actor.named_parameters()}


EXPECTED = {
    "actor/pg_loss", "actor/pg_clipfrac", "actor/pg_clipfrac_lower", "actor/ppo_kl",
    "actor/entropy_loss", "actor/grad_norm", "actor/lr", "critic/score/mean", "critic/score/max",
    "critic/score/min", "critic/rewards/mean", "critic/advantages/mean", "critic/advantages/max",
    "critic/advantages/min", "critic/returns/mean", "response_length/mean",
    "response_length/max", "response_length/min", "response_length/clip_ratio",
    "prompt_length/mean", "timing_s/update_actor", "timing_s/step",
}


def test_train_step_changes_parameters(registry, model_dir, tmp_path) -> None:
    trainer = make_trainer(registry, model_dir, tmp_path)
    assert trainer.ref is None and trainer.critic is None
    before = params(trainer)
    experiences = rollouts()
    metrics = trainer.train_step(experiences)
    assert EXPECTED <= set(metrics), EXPECTED - set(metrics)
    assert all(math.isfinite(v) for v in metrics.values()), metrics
    assert trainer.global_steps == 1
    after = params(trainer)
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert len(changed) == len(before), set(before) - set(changed)
    mean_reward = sum(e.reward for e in experiences) / len(experiences)
    assert metrics["critic/score/mean"] == pytest.approx(mean_reward)
    assert metrics["actor/ppo_kl"] == 0.0  # on-policy: the ratio is exactly 1


def test_kl_loss_uses_the_reference_model(registry, model_dir, tmp_path) -> None:
    trainer = make_trainer(registry, model_dir, tmp_path, algorithm={
        "kl_loss_fn": "low_var_kl", "kl_loss_fn_args": {"kl_coef": 0.1},
        "optimizer": {"lr": 1e-2}})
    assert trainer.ref is not None
    ref_before = {k: v.clone() for k, v in trainer.ref.state_dict().items()}
    first = trainer.train_step(rollouts(seed=1))
    second = trainer.train_step(rollouts(seed=1))
    assert first["actor/kl_loss"] == pytest.approx(0.0, abs=1e-12)  # actor == reference
    assert second["actor/kl_loss"] > 0.0 and second["actor/kl_coef"] == 0.1
    assert all(torch.equal(v, ref_before[k]) for k, v in trainer.ref.state_dict().items())


def held_parameters(trainer: TorchTrainer) -> int:
    """Parameter elements the trainer holds in memory: actor, reference model and critic,
    each storage counted once (a reference sharing the actor's tensors adds nothing)."""
    storages: dict[int, int] = {}
    for module in (trainer.actor, trainer.ref, trainer.critic):
        for p in module.parameters() if module is not None else ():
            storages[p.untyped_storage().data_ptr()] = p.numel()
    return sum(storages.values())


@pytest.mark.parametrize("algorithm, holds_ref", [
    ({}, True),  # GRPO's preset: k2 KL loss, kl_coef 0.001
    ({"kl_loss_fn": "none"}, False),  # Dr.GRPO / DAPO-style recipes
    ({"kl_loss_fn_args": {"kl_coef": 0.0}}, False),  # a KL term that adds exactly 0
    ({"kl_loss_fn": "none", "kl_penalty_fn": "k1",
      "kl_penalty_fn_args": {"kl_coef": 0.1}}, True),
    ({"kl_loss_fn": "none", "kl_penalty_fn": "k1",
      "kl_penalty_fn_args": {"kl_coef": 0.0}}, False),
], ids=["kl_loss", "no_kl", "kl_coef_0", "kl_penalty", "kl_penalty_coef_0"])
def test_grpo_holds_a_reference_model_only_for_an_active_kl_term(
        model_dir, tmp_path, algorithm: dict[str, Any], holds_ref: bool) -> None:
    """Issue #23: the real ``grpo`` preset (installed plugin) keeps a second copy of the
    weights, and runs it, only when a KL term with a non-zero coefficient needs it."""
    registry = PluginRegistry.create(extra_plugins=[StandInPlugin()])  # + the grpo plugin
    trainer = make_trainer(registry, model_dir, tmp_path,
                           algorithm={"algorithm_type": "grpo", **algorithm})
    assert trainer.preset.use_reference  # the flag alone no longer builds one
    actor = sum(p.numel() for p in trainer.actor.parameters())
    assert (trainer.ref is not None) == holds_ref
    assert held_parameters(trainer) == (2 if holds_ref else 1) * actor
    metrics = trainer.train_step(rollouts())
    assert ("timing_s/ref" in metrics) == holds_ref
    assert ("actor/kl_loss" in metrics) == ("kl_loss_fn" not in algorithm and holds_ref)
    assert ("actor/reward_kl_penalty" in metrics) == ("kl_penalty_fn" in algorithm and holds_ref)


def test_every_preset_flag_says_what_its_defaults_do(tmp_path) -> None:
    """``AlgorithmPreset.use_reference`` is descriptive: for every installed algorithm it
    equals whether its default loss needs a reference model (``LossPlan.needs_ref``)."""
    from rft.testing.algorithms import validated

    registry = PluginRegistry.create()
    names = registry.names("algorithm")
    assert {"grpo", "dapo", "dpo", "ppo"} <= set(names)
    wrong = {}
    for name in names:
        _, plan = validated({"algorithm_type": name}, str(tmp_path / name), registry)
        if plan.preset.use_reference != plan.loss.needs_ref:
            wrong[name] = (plan.preset.use_reference, plan.loss.needs_ref)
    assert not wrong, wrong


def test_kl_penalty_in_reward(registry, model_dir, tmp_path) -> None:
    trainer = make_trainer(registry, model_dir, tmp_path, algorithm={
        "kl_penalty_fn": "k1", "kl_penalty_fn_args": {"kl_coef": 0.2}})
    metrics = trainer.train_step(rollouts())
    assert metrics["actor/reward_kl_penalty_coeff"] == 0.2
    assert metrics["actor/reward_kl_penalty"] == pytest.approx(0.0, abs=1e-7)
    assert "timing_s/old_log_prob" in metrics and "timing_s/ref" in metrics


def _captured_gradients(trainer: TorchTrainer, experiences) -> list[torch.Tensor]:
    grads: list[torch.Tensor] = []
    params_ = list(trainer.actor.parameters())

    def capture(*args, **kwargs):
        grads.extend(p.grad.detach().clone() for p in params_)

    trainer.optimizer.step = capture  # type: ignore[method-assign]
    trainer.train_step(experiences)
    return grads


@pytest.mark.filterwarnings(r"ignore:Seems like `optimizer.step\(\)` has been overridden")
@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean",
                                  "seq-mean-token-sum-norm"])
def test_micro_batch_plans_give_the_same_gradient(registry, model_dir, tmp_path, mode) -> None:
    algorithm = {"loss_agg_mode": mode}
    plans = {
        "whole": {"use_dynamic_bsz": False},
        "fixed": {"use_dynamic_bsz": False, "trainer_config": {
            "actor_rollout_ref": {"actor": {"ppo_micro_batch_size_per_gpu": 2}}}},
        "tokens": {"use_dynamic_bsz": True, "max_token_len_per_gpu": 16},
    }
    experiences = rollouts(seed=2)
    grads = {}
    for name, trainer_section in plans.items():
        trainer = make_trainer(registry, model_dir, tmp_path, algorithm=algorithm,
                               trainer={**trainer_section, "grad_clip": 1e9})
        grads[name] = _captured_gradients(trainer, experiences)
    padded = trainer._tensor_batch(pad_batch(experiences, 0))  # the "tokens" plan splits
    assert len(trainer._micro_batches(padded, list(range(len(experiences))))) > 2
    for name in ("fixed", "tokens"):
        for a, b in zip(grads[name], grads["whole"]):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-6)


def test_lr_schedules_follow_the_formulas(registry, model_dir, tmp_path) -> None:
    def lrs(config: OptimizerConfig, total: int) -> list[float]:
        opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=config.lr)
        scheduler = build_scheduler(opt, config, total)
        values = []
        for _ in range(total + 1):
            values.append(scheduler.get_last_lr()[0])
            opt.step()
            scheduler.step()
        return values

    cosine = OptimizerConfig(lr=2.0, lr_warmup_steps=3, lr_scheduler_type="cosine",
                             min_lr_ratio=0.1)
    got = lrs(cosine, 10)
    for s, value in enumerate(got):
        if s < 3:
            expected = 2.0 * s / 3
        else:
            p = (s - 3) / 7
            expected = 2.0 * max(0.1, 0.45 * math.cos(math.pi * p) + 0.55)
        assert value == pytest.approx(expected, abs=1e-12), s
    constant = OptimizerConfig(lr=1.0, lr_warmup_steps=-1, lr_warmup_steps_ratio=0.25)
    assert lrs(constant, 8) == pytest.approx([0.0, 0.5, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    try:
        from verl.utils.torch_functional import get_cosine_schedule_with_warmup
    except ImportError:
        pass
    else:
        opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=2.0)
        theirs = get_cosine_schedule_with_warmup(opt, 3, 10, min_lr_ratio=0.1)
        verl_values = []
        for _ in range(11):
            verl_values.append(theirs.get_last_lr()[0])
            opt.step()
            theirs.step()
        assert got == pytest.approx(verl_values, abs=1e-12)
    # In the trainer: actor/lr is the LR after this step's scheduler advance (veRL 0.9.1).
    trainer = make_trainer(registry, model_dir, tmp_path, algorithm={
        "optimizer": {"lr": 1e-3, "lr_warmup_steps": 4}})
    assert trainer.train_step(rollouts())["actor/lr"] == pytest.approx(1e-3 / 4)


def test_bad_experiences_are_named(registry, model_dir, tmp_path) -> None:
    trainer = make_trainer(registry, model_dir, tmp_path)
    bad = rollouts()
    bad[1].logprobs = torch.zeros(bad[1].response_length + 2)
    with pytest.raises(RftError, match=r"^experience 1 \(eid 0/0/1/\): logprobs has shape "
                                       r"\(\d+,\) but the response has \d+ tokens$"):
        trainer.train_step(bad)
    bad = rollouts()
    bad[4].reward = float("nan")
    with pytest.raises(RftError, match=r"^experience 4 \(eid 0/2/0/\): reward is nan$"):
        trainer.train_step(bad)
    bad = rollouts()
    bad[2].tokens[-1] = VOCAB + 5
    with pytest.raises(RftError, match=r"experience 2 .*token id 69 is outside"):
        trainer.train_step(bad)
    bad = rollouts()
    bad[5].tokens[0] = -1
    with pytest.raises(RftError, match=r"^experience 5 .*token id -1 is outside"):
        trainer.train_step(bad)
    bad = rollouts()
    bad[3].logprobs = torch.zeros(bad[3].response_length)
    bad[3].logprobs[-1] = float("inf")
    with pytest.raises(RftError, match=r"^experience 3 \(eid [0-9/]+\): logprobs contains NaN "
                                       r"or inf$"):
        trainer.train_step(bad)
    with pytest.raises(RftError, match="no experiences"):
        trainer.train_step([])
    assert trainer.global_steps == 0


def test_state_dict_round_trip_and_named_weights(registry, model_dir, tmp_path) -> None:
    trainer = make_trainer(registry, model_dir, tmp_path)
    trainer.train_step(rollouts())
    state = trainer.state_dict()
    other = make_trainer(registry, model_dir, tmp_path)
    other.load_state_dict(state)
    assert other.global_steps == 1
    assert other.scheduler.state_dict() == trainer.scheduler.state_dict()
    for (name, a), (_, b) in zip(trainer.named_weights(), other.named_weights()):
        assert torch.equal(a, b), name
    # both continue identically
    m1, m2 = trainer.train_step(rollouts(seed=3)), other.train_step(rollouts(seed=3))
    assert m1["actor/pg_loss"] == m2["actor/pg_loss"]
    names = [name for name, _ in trainer.named_weights()]
    assert "model.embed_tokens.weight" in names and "lm_head.weight" not in names  # tied once


def test_sft_preset_plugs_its_loss_through_the_same_path(registry, model_dir, tmp_path) -> None:
    trainer = make_trainer(registry, model_dir, tmp_path, algorithm={
        "algorithm_type": "test_sft", "optimizer": {"lr": 1e-2}})
    data = [Experience(tokens=e.tokens, prompt_length=e.prompt_length) for e in rollouts()]
    losses = [trainer.train_step(data)["actor/pg_loss"] for _ in range(5)]
    assert losses[0] == pytest.approx(math.log(VOCAB), rel=0.05)  # random init: uniform
    assert losses[-1] < losses[0]


def test_dpo_pairs_through_the_sequence_level_hook(registry, model_dir, tmp_path) -> None:
    trainer = make_trainer(registry, model_dir, tmp_path, algorithm={
        "algorithm_type": "test_dpo", "optimizer": {"lr": 1e-2}},
        trainer={"trainer_config": {"actor_rollout_ref": {"actor": {
            "ppo_micro_batch_size_per_gpu": 3}}}})  # rounded to whole pairs
    assert trainer.ref is not None
    base = rollouts(4)
    pairs = [Experience(tokens=e.tokens, prompt_length=e.prompt_length,
                        eid=EID(batch=0, task=i // 2, suffix="rejected" if i % 2 == 0 else "chosen"))
             for i, e in enumerate(base)]  # rejected first: the trainer reorders
    first = trainer.train_step(pairs)["actor/pg_loss"]
    assert first == pytest.approx(math.log(2), abs=1e-6)  # policy == reference
    assert trainer.train_step(pairs)["actor/pg_loss"] < first


def test_ppo_with_critic(registry, model_dir, tmp_path) -> None:
    trainer = make_trainer(registry, model_dir, tmp_path, algorithm={
        "algorithm_type": "test_ppo"}, trainer={"trainer_config": {"critic": {
            "cliprange_value": 0.2, "optim": {"lr": 1e-2}}}})
    assert trainer.critic is not None and trainer.options.cliprange_value == 0.2
    critic_before = {k: v.clone() for k, v in trainer.critic.state_dict().items()}
    metrics = trainer.train_step(rollouts())
    for key in ("critic/vf_loss", "critic/vf_clipfrac", "critic/values/mean", "critic/grad_norm",
                "critic/lr", "timing_s/values", "timing_s/update_critic"):
        assert key in metrics and math.isfinite(metrics[key]), key
    assert metrics["critic/lr"] == 1e-2
    changed = [k for k, v in trainer.critic.state_dict().items() if not torch.equal(v, critic_before[k])]
    assert "score.weight" in changed


def test_memory_controls_in_one_process_give_the_same_step(registry, model_dir, tmp_path,
                                                          monkeypatch) -> None:
    """Gradient checkpointing and chunked entropies change memory, not the step (exactly).
    Checkpointing runs the model's own forward, so the plain trainer does too here (the
    shared-prompt forward agrees with it to rounding: tests/test_prefix_packing.py)."""
    from rft.trainer import models

    monkeypatch.setattr(models, "uses_shared_prompts", lambda *args: False)
    plain = make_trainer(registry, model_dir, tmp_path)
    controlled = make_trainer(registry, model_dir, tmp_path, trainer={"trainer_config": {
        "torch": {"entropy_chunk_size": 3},
        "actor_rollout_ref": {"model": {"enable_gradient_checkpointing": True},
                              "actor": {"entropy_from_logits_with_chunking": True}}}})
    assert controlled.actor.is_gradient_checkpointing and controlled.options.entropy_chunk_size == 3
    first, second = plain.train_step(rollouts()), controlled.train_step(rollouts())
    assert first["actor/entropy_loss"] == second["actor/entropy_loss"]
    before, after = params(plain), params(controlled)
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_token_budget_is_derived_from_the_model_length(registry, model_dir, tmp_path) -> None:
    trainer = make_trainer(registry, model_dir, tmp_path, trainer={"use_dynamic_bsz": True})
    # max(⌈2 · (8 + 8)⌉, min(6 rows · 16, 16384)): the whole mini-batch
    assert trainer.plan.trainer.max_token_len_per_gpu == 96
    assert trainer.options.max_token_len == 96 and trainer.plan.trainer.ranks == 1


def test_the_critic_head_is_the_same_in_every_build(registry, model_dir, tmp_path) -> None:
    """The value head is initialised from a fixed seed (every rank of a sharded trainer
    builds the same one), whatever the global random state."""
    ppo = {"algorithm": {"algorithm_type": "test_ppo"}}
    torch.manual_seed(1)
    first = make_trainer(registry, model_dir, tmp_path, **ppo)
    torch.manual_seed(2)
    second = make_trainer(registry, model_dir, tmp_path, **ppo)
    assert torch.equal(first.critic.score.weight, second.critic.score.weight)


class InputRecorder:
    """A policy loss and an advantage fn that record what the trainer hands them (the
    teacher's log-probs, the sampling log-probs, the step) and otherwise act as the
    clipped surrogate on GRPO advantages."""

    def __init__(self) -> None:
        self.losses: list[tuple[int | None, torch.Tensor | None, torch.Tensor]] = []
        self.advantages: list[tuple[torch.Tensor | None, torch.Tensor | None]] = []

    def loss(self, inputs: PolicyLossInputs, args: None):
        self.losses.append((inputs.global_step, inputs.teacher_log_prob, inputs.response_mask))
        return -inputs.log_prob * inputs.advantages, {}

    def advantage(self, inputs, args: None):
        self.advantages.append((inputs.teacher_log_prob, inputs.rollout_log_prob))
        return grpo_advantages(inputs, grpo_advantages.Args())

    @hookimpl
    def register_algorithms(self) -> dict[str, Any]:
        return {"test_record": AlgorithmPreset(advantage_fn="test_record_adv",
                                               policy_loss_fn="test_record_loss",
                                               repeat_times=2, sample_strategy="test_sampler")}

    @hookimpl
    def register_advantage_fns(self) -> dict[str, Any]:
        return {"test_record_adv": self.advantage}

    @hookimpl
    def register_policy_loss_fns(self) -> dict[str, Any]:
        return {"test_record_loss": self.loss}


def test_teacher_log_probs_and_the_step_reach_the_functions(model_dir, tmp_path) -> None:
    """``Experience.teacher_logprobs`` arrive padded as ``teacher_log_prob`` in the advantage
    fn (with ``rollout_log_prob``) and, micro-batch by micro-batch, in the policy loss;
    ``global_step`` counts the steps from 1 and goes on from a restored state."""
    recorder = InputRecorder()
    registry = PluginRegistry.create(extra_plugins=[StandInPlugin(), recorder], autoload=False)
    trainer = make_trainer(registry, model_dir, tmp_path, algorithm={
        "algorithm_type": "test_record"}, trainer={"trainer_config": {
            "actor_rollout_ref": {"actor": {"ppo_micro_batch_size_per_gpu": 2}}}})
    experiences = rollouts()
    for i, exp in enumerate(experiences):
        exp.teacher_logprobs = exp.logprobs - 0.5 * i
    batch = pad_batch(experiences, 0)
    for _ in range(2):
        trainer.train_step(experiences)
    teacher, rollout = recorder.advantages[0]
    assert torch.equal(teacher, batch.teacher_log_prob)
    assert torch.equal(rollout, batch.rollout_log_prob)
    steps = [step for step, _, _ in recorder.losses]
    assert steps == [1] * (len(steps) // 2) + [2] * (len(steps) // 2) and len(steps) == 6
    rows = [(t * m).sum(-1) for _, t, m in recorder.losses[:3]]  # step 1's micro-batches
    expected = [(e.teacher_logprobs * e.action_mask).sum() for e in experiences]
    torch.testing.assert_close(torch.cat(rows), torch.stack(expected))

    state = trainer.state_dict()
    resumed = make_trainer(registry, model_dir, tmp_path / "again", algorithm={
        "algorithm_type": "test_record"})
    resumed.load_state_dict(state)
    resumed.train_step(experiences)
    assert recorder.losses[-1][0] == 3

    for exp in experiences[1:]:  # not every row has a teacher: neither function gets one
        exp.teacher_logprobs = None
    trainer.train_step(experiences)
    assert recorder.advantages[-1][0] is None and recorder.losses[-1][1] is None


def test_shared_prompt_forward_gives_the_step_of_the_models_forward(
        registry, model_dir, tmp_path, monkeypatch) -> None:
    """A GRPO batch (each prompt twice) with a KL loss: the actor and reference forwards run
    each shared prefix once (:mod:`rft.trainer.packed_forward`), and the step — metrics and
    updated parameters — is the one through the model's own forward (``trainer.
    prefix_sharing: off``, which packs nothing), to float32 rounding."""
    from rft.trainer import models

    g = torch.Generator().manual_seed(3)
    experiences = []
    for task in range(3):
        prompt = torch.randint(0, VOCAB, (2 + task,), generator=g)
        for run in range(2):
            response = torch.randint(0, VOCAB, (3 + 2 * run + task,), generator=g)
            experiences.append(Experience(
                tokens=torch.cat([prompt, response]), prompt_length=len(prompt),
                reward=float(run), eid=EID(batch=0, task=task, run=run)))
    calls = []
    shared = models.shared_node_logits

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(type(args[1]).__name__)
        return shared(*args, **kwargs)

    grads: list[dict[str, torch.Tensor]] = []  # the accumulated gradient of every step
    step = TorchTrainer._step

    def recorded(self: TorchTrainer, model: Any, *args: Any) -> float:
        grads.append({k: p.grad.clone() for k, p in model.named_parameters()})
        return step(self, model, *args)

    monkeypatch.setattr(TorchTrainer, "_step", recorded)
    kl = {"kl_loss_fn": "low_var_kl", "kl_loss_fn_args": {"kl_coef": 0.1},
          "optimizer": {"lr": 1e-2}}
    monkeypatch.setattr(models, "shared_node_logits", counted)
    lean = make_trainer(registry, model_dir, tmp_path, algorithm=kl)
    lean_metrics = [lean.train_step(experiences) for _ in range(2)]
    # reference and actor forwards of both steps, as prompt groups (cascade attention)
    assert calls == ["PromptGroups"] * 4
    # the rows' layout is built once: the reference forward builds it, the actor's forward
    # and the second step (the same rows) find it again
    assert (lean.layouts.builds, lean.layouts.hits) == (1, 3)
    plain = make_trainer(registry, model_dir, tmp_path, algorithm=kl,
                         trainer={"prefix_sharing": "off"})  # the model's plain forward
    initial = params(plain)
    plain_metrics = [plain.train_step(experiences) for _ in range(2)]
    assert len(calls) == 4
    assert lean_metrics[1]["actor/kl_loss"] > 0
    for ours, theirs in zip(lean_metrics, plain_metrics, strict=True):
        for key, value in theirs.items():
            if not key.startswith("timing_s/"):
                assert ours[key] == pytest.approx(value, rel=1e-4, abs=1e-6), key
    assert len(grads) == 4
    # the same weights, float32 sums in other orders; then from weights that differ by that
    for ours, theirs, bound in zip(grads[:2], grads[2:], (1e-5, 1e-3), strict=True):
        for name, grad in theirs.items():
            scale = grad.abs().max().item()
            assert scale > 0 and (ours[name] - grad).abs().max().item() <= bound * scale, name
    after, reference = params(lean), params(plain)
    for name, tensor in reference.items():  # Adam magnifies the rounding of tiny gradients
        update = (tensor - initial[name]).abs().max().item()
        assert update > 0 and (after[name] - tensor).abs().max().item() <= 1e-2 * update, name


class EntropySignalRecorder:
    """An advantage fn declaring ``needs_expected_entropy_signal``: it records what the
    trainer hands over, runs ``clipv`` on it and drops every token from the update."""

    def __init__(self) -> None:
        self.inputs: list[Any] = []
        self.clipv_kept: list[torch.Tensor] = []

    def advantage(self, inputs, args: None):
        from rft_plugin_grpo import ClipVArgs, clipv_advantages

        self.inputs.append(inputs)
        advantages, returns, kept = clipv_advantages(inputs, ClipVArgs(mu=0.0, max_frac=1.0))
        self.clipv_kept.append(kept)
        return advantages, returns, torch.zeros_like(inputs.response_mask)

    @hookimpl
    def register_algorithms(self) -> dict[str, Any]:
        return {"test_signal": AlgorithmPreset(advantage_fn="test_signal_adv", repeat_times=2,
                                               sample_strategy="test_sampler")}

    @hookimpl
    def register_advantage_fns(self) -> dict[str, Any]:
        self.advantage.__func__.needs_expected_entropy_signal = True  # type: ignore[attr-defined]
        return {"test_signal_adv": self.advantage}


def test_the_expected_entropy_signal_reaches_the_advantage_fn(model_dir, tmp_path) -> None:
    """For a fn declaring ``needs_expected_entropy_signal`` the trainer hands over, per
    response token of the policy before the update, ``N = Σ p² (log p + H)`` (Trinity-RFT's
    ``necs``), ``H`` and the sampled token's ``log p``, all of ``softmax(logits / T)`` —
    checked against the model's own forward in float64, row by row — and trains on the mask the fn returns (none: the
    loss and the gradient are 0). ``clipv`` runs on those inputs and drops tokens."""
    recorder = EntropySignalRecorder()
    registry = PluginRegistry.create(extra_plugins=[StandInPlugin(), recorder], autoload=False)
    trainer = make_trainer(registry, model_dir, tmp_path, algorithm={
        "algorithm_type": "test_signal"}, model={"temperature": 0.7})
    assert trainer.options.temperature == 0.7
    experiences = rollouts()
    metrics = trainer.train_step(experiences)
    assert metrics["actor/pg_loss"] == 0.0 and metrics["actor/grad_norm"] == 0.0
    (inputs,) = recorder.inputs
    batch = pad_batch(experiences, 0)
    assert torch.equal(inputs.response_mask, batch.response_mask)
    model = Qwen2ForCausalLM.from_pretrained(model_dir).double().eval()
    for row, exp in enumerate(experiences):
        width = len(exp.tokens) - exp.prompt_length
        with torch.no_grad():
            logits = model(exp.tokens[None]).logits[0, exp.prompt_length - 1: -1] / 0.7
        log_p = torch.log_softmax(logits, dim=-1)  # (R, V)
        p = log_p.exp()
        entropy = -(p * log_p).sum(-1)  # (R,)
        expected = (p ** 2 * (log_p + entropy[:, None])).sum(-1)  # (R,)
        sampled = log_p.gather(-1, exp.tokens[exp.prompt_length:, None]).squeeze(-1)  # (R,)
        for got, want in ((inputs.expected_entropy_signal, expected),
                          (inputs.entropy, entropy), (inputs.old_log_prob, sampled)):
            torch.testing.assert_close(got[row, :width].double(), want, atol=1e-5, rtol=1e-4)
    assert inputs.expected_entropy_signal.abs().max() > 0
    (kept,) = recorder.clipv_kept
    assert 0 < kept.sum() < batch.response_mask.sum()
