"""``algorithm.rollout_correction`` in the torch trainer and in validation.

The maths equals veRL's (``tests/test_rollout_correction_verl.py``); these tests prove the
wiring: the trainer's step computes the proximal ``old_log_prob``, corrects against the
engine's log-probs, multiplies the per-token policy loss by the weights as veRL's
``compute_policy_loss_vanilla(rollout_is_weights=…)`` does, drops rejected tokens, and
reports ``rollout_corr/…``; bad values are one line naming the key.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from omegaconf import OmegaConf
from verl.trainer.ppo import core_algos

from rft.builtin.policy_loss import PPOArgs, ppo_policy_loss
from rft.config.plan import LossPlan, Selected
from rft.contracts import AggContext
from rft.errors import RftError
from rft.experience import Experience, pad_batch
from rft.testing.algorithms import SETTINGS, Batch, batches, close
from rft.trainer.loss import LossInputs, policy_loss_term
from rft.trainer.rollout_correction import correct, spec_of
from rft.trainer.torch_trainer import TorchTrainer
from test_torch_trainer import make_trainer, model_dir, registry, rollouts  # noqa: F401

torch.set_num_threads(1)


# --------------------------------------------------------------------------------------
# The weighted policy loss equals veRL's
# --------------------------------------------------------------------------------------


@SETTINGS
@given(batches(min_tokens=1), st.sampled_from(["token-mean", "seq-mean-token-sum",
                                               "seq-mean-token-mean"]))
def test_weighted_policy_loss_equals_verl(batch: Batch, mode: str) -> None:
    """``agg(pg_loss · w)``: value and gradient equal veRL's vanilla loss with
    ``rollout_is_weights``."""
    old = batch.logps()
    log_prob = batch.drifted(old, 0.2).requires_grad_()
    advantages = batch.randn()
    weights = torch.rand(batch.B, batch.T, generator=batch.gen, dtype=torch.float64) * 2
    plan = LossPlan(policy_loss=Selected("algorithm.policy_loss_fn", "ppo", ppo_policy_loss,
                                         PPOArgs()), loss_agg_mode=mode)
    info = {"batch_num_tokens": batch.mask.sum().item(), "global_batch_size": batch.B,
            "dp_size": 1}
    agg = AggContext(mode, **info)
    ours, _ = policy_loss_term(plan, LossInputs(log_prob, batch.mask, old, advantages,
                                                rollout_is_weights=weights), agg)
    config = OmegaConf.create({"clip_ratio": 0.2, "clip_ratio_low": None,
                               "clip_ratio_high": None, "clip_ratio_c": 3.0,
                               "global_batch_info": info})
    theirs, _ = core_algos.compute_policy_loss_vanilla(
        old, log_prob, advantages, batch.mask, loss_agg_mode=mode, config=config,
        rollout_is_weights=weights)
    if batch.mask.sum() == 0:
        return
    close(ours, theirs)
    (g_ours,) = torch.autograd.grad(ours, log_prob, retain_graph=True)
    (g_theirs,) = torch.autograd.grad(theirs, log_prob)
    close(g_ours, g_theirs)


def test_weights_need_a_per_token_policy_loss() -> None:
    """A policy loss returning an aggregated (0-dim) loss cannot be weighted per token: one
    line naming the key, rather than an uncorrected step."""
    def sequence_loss(inputs: object, args: object) -> torch.Tensor:
        return torch.tensor(0.5, requires_grad=True)

    plan = LossPlan(policy_loss=Selected("algorithm.policy_loss_fn", "seq", sequence_loss, None))
    x = torch.zeros(2, 3)
    with pytest.raises(RftError, match=r"^algorithm\.rollout_correction\.rollout_is: 'seq' "
                                       r"\(algorithm\.policy_loss_fn\) returns an aggregated "
                                       r"loss; importance weights need a per-token policy loss$"):
        policy_loss_term(plan, LossInputs(x, x + 1, x, x, rollout_is_weights=x + 1),
                         AggContext())


# --------------------------------------------------------------------------------------
# In the trainer's step
# --------------------------------------------------------------------------------------


def engine_logprobs_as_trainer(trainer: TorchTrainer, experiences: list[Experience],
                               shift: dict[int, float] | None = None) -> list[Experience]:
    """``experiences`` whose engine log-probs are the trainer's own (on-policy), row ``i``
    shifted by ``shift[i]``."""
    tensors = trainer._tensor_batch(pad_batch(experiences, 0))
    old = trainer._infer_logprobs(trainer.actor, tensors)  # (B, R)
    for i, exp in enumerate(experiences):
        exp.logprobs = old[i, : exp.response_length].clone() + (shift or {}).get(i, 0.0)
    return experiences


def grads_of_step(trainer: TorchTrainer, experiences: list[Experience]
                  ) -> tuple[list[torch.Tensor], dict[str, float]]:
    grads: list[torch.Tensor] = []
    params = list(trainer.actor.parameters())

    def capture(*args: object, **kwargs: object) -> None:
        grads.extend(p.grad.detach().clone() for p in params)

    trainer.optimizer.step = capture  # type: ignore[method-assign]
    metrics = trainer.train_step(experiences)
    return grads, metrics


CORRECTION = {"rollout_is": "token", "rollout_is_threshold": 2.0,
              "rollout_rs": "seq_mean_k3", "rollout_rs_threshold": 5.0}


@pytest.mark.filterwarnings(r"ignore:Seems like `optimizer.step\(\)` has been overridden")
def test_on_policy_tokens_are_left_as_they_are(registry, model_dir, tmp_path) -> None:
    """Engine log-probs equal to the trainer's: ``ρ = 1``, nothing rejected, the gradient
    of the step without correction."""
    plain = make_trainer(registry, model_dir, tmp_path, trainer={"grad_clip": 1e9})
    corrected = make_trainer(registry, model_dir, tmp_path, trainer={"grad_clip": 1e9},
                             algorithm={"rollout_correction": CORRECTION})
    experiences = engine_logprobs_as_trainer(plain, rollouts(seed=3))
    base, _ = grads_of_step(plain, experiences)
    got, metrics = grads_of_step(corrected, experiences)
    assert metrics["rollout_corr/rollout_is_mean"] == pytest.approx(1.0, abs=1e-5)
    assert metrics["rollout_corr/rollout_rs_masked_fraction"] == 0.0
    for a, b in zip(got, base, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)


@pytest.mark.filterwarnings(r"ignore:Seems like `optimizer.step\(\)` has been overridden")
def test_off_policy_rows_are_weighted_and_rejected(registry, model_dir, tmp_path) -> None:
    """Row 0 sampled by a much older policy (log μ − 3 per token) is rejected by
    ``seq_mean_k3``; row 1 (log μ + 0.5) gets weight ``e^{-0.5}``: the step's metrics are
    :func:`correct` of the trainer's own log-probs, and the gradient changes."""
    plain = make_trainer(registry, model_dir, tmp_path, trainer={"grad_clip": 1e9})
    corrected = make_trainer(registry, model_dir, tmp_path, trainer={"grad_clip": 1e9},
                             algorithm={"rollout_correction": CORRECTION})
    experiences = engine_logprobs_as_trainer(plain, rollouts(seed=3), {0: -3.0, 1: 0.5})
    tensors = plain._tensor_batch(pad_batch(experiences, 0))
    old = plain._infer_logprobs(plain.actor, tensors)
    batch = pad_batch(experiences, 0)
    assert batch.rollout_log_prob is not None
    expected = correct(old, batch.rollout_log_prob, batch.response_mask, corrected.correction)
    assert expected.response_mask[0].sum() == 0 and expected.response_mask[1:].sum() > 0
    base, _ = grads_of_step(plain, experiences)
    got, metrics = grads_of_step(corrected, experiences)
    for key, value in expected.metrics.items():
        assert metrics[key] == pytest.approx(value, rel=1e-5, abs=1e-6), key
    assert metrics["rollout_corr/rollout_rs_seq_masked_fraction"] == pytest.approx(1 / 6)
    assert any(not torch.allclose(a, b, atol=1e-6) for a, b in zip(got, base, strict=True))


def test_correction_without_engine_logprobs_is_one_line(registry, model_dir, tmp_path) -> None:
    trainer = make_trainer(registry, model_dir, tmp_path,
                           algorithm={"rollout_correction": {"rollout_is": "sequence"}})
    experiences = rollouts()
    for exp in experiences:
        exp.logprobs = None
    with pytest.raises(RftError, match=r"^algorithm\.rollout_correction: the experiences carry "
                                       r"no engine log-probs"):
        trainer.train_step(experiences)


def test_default_config_corrects_nothing(registry, model_dir, tmp_path) -> None:
    trainer = make_trainer(registry, model_dir, tmp_path)
    assert not trainer.correction.active
    metrics = trainer.train_step(rollouts())
    assert not any(k.startswith("rollout_corr/") for k in metrics)


# --------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("section,line", [
    ({"rollout_is": "token", "rollout_is_threshold": "2_1"},
     "algorithm.rollout_correction.rollout_is_threshold: lower bound must be positive and "
     "<= the upper bound, got '2_1'"),
    ({"rollout_is": "token", "rollout_is_threshold": -1},
     "algorithm.rollout_correction.rollout_is_threshold: upper bound must be positive, got -1.0"),
    ({"rollout_rs": "token_k4", "rollout_rs_threshold": 1.0},
     "algorithm.rollout_correction.rollout_rs: rollout_rs: unknown option 'token_k4'"),
    ({"rollout_rs": "token_k2"},
     "algorithm.rollout_correction.rollout_rs_threshold: rollout_rs_threshold must be set "
     "when rollout_rs is"),
    ({"rollout_rs": "token_k2,seq_sum_k1", "rollout_rs_threshold": "1,2,3"},
     "algorithm.rollout_correction.rollout_rs_threshold: rollout_rs_threshold gives 3 "
     "thresholds for 2 rollout_rs options"),
    ({"bypass_mode": True, "rollout_is": "token"},
     "algorithm.rollout_correction.bypass_mode: with rollout_is / rollout_rs is not "
     "implemented"),
    ({"rollout_is": "token", "use_rollout_logprobs": True},
     "algorithm.rollout_correction: trainer.trainer_config.torch.use_rollout_logprobs makes "
     "old_log_prob the engine's log-probs"),
    ({"loss_type": "reinforce"},
     "algorithm.rollout_correction.loss_type: reinforce (veRL's bypass REINFORCE loss) is "
     "not implemented"),
])
def test_bad_values_are_one_line_naming_the_key(registry, model_dir, tmp_path, section,
                                                line) -> None:
    section = dict(section)
    torch_tree = {"device": "cpu", "use_rollout_logprobs": section.pop("use_rollout_logprobs",
                                                                       False)}
    with pytest.raises(RftError) as info:
        make_trainer(registry, model_dir, tmp_path, algorithm={"rollout_correction": section},
                     trainer={"trainer_config": {"torch": torch_tree}})
    lines = [x for x in str(info.value).splitlines() if "rollout_correction" in x]
    assert len(lines) == 1 and line in lines[0], str(info.value)


def test_verl_keys_are_read_into_the_section(registry, model_dir, tmp_path) -> None:
    """veRL's ``algorithm.rollout_correction`` in ``trainer.trainer_config`` is read into
    rft's fields while they are unset (Trinity-RFT's reconciling)."""
    trainer = make_trainer(registry, model_dir, tmp_path, trainer={"trainer_config": {
        "torch": {"device": "cpu"},
        "algorithm": {"rollout_correction": {"rollout_is": "sequence",
                                             "rollout_is_threshold": "0.5_5.0",
                                             "rollout_rs": "seq_mean_k1",
                                             "rollout_rs_threshold": 2.0}}}})
    rc = trainer.plan.algorithm.rollout_correction
    assert (rc.rollout_is, rc.rollout_is_threshold, rc.rollout_rs, rc.rollout_rs_threshold) \
        == ("sequence", "0.5_5.0", "seq_mean_k1", 2.0)
    assert spec_of(rc).active
