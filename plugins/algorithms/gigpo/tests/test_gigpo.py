"""rft-plugin-gigpo: the trainer-side function keeps the advantage contract and equals
veRL's GRPO with ``fnorm: std`` (one-step episodes); the explorer operator over episodes
with anchor states by hand, and equal to the trainer-side function on one-step episodes;
the batch layout's guard; the preset after validation; a tiny run with a two-step
workflow."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from rft.contracts import AdvantageInputs
from rft.errors import RftError
from rft.experience import Experience
from rft.plugins import PluginRegistry
from rft.testing.algorithms import SETTINGS, close, validated
from rft.testing.checks import assert_equals_verl, check_advantage
from rft.testing.strategies import advantage_inputs
from rft_plugin_gigpo import PRESET, GiGPO, GiGPOArgs, discounted_returns, gigpo_advantages
from rft_plugin_multi_step_grpo.testing import (TwoStepWorkflow, assert_operator_is_trainer_side,
                                                episode_step, workflow_plugin)

torch.set_num_threads(1)

EPS = 1e-6


@SETTINGS
@given(advantage_inputs(), st.sampled_from(["std", "none"]))
def test_trainer_side_keeps_the_advantage_contract(inputs: AdvantageInputs, fnorm: str) -> None:
    """Finite, no gradient, zero at masked positions, invariant to a constant added to a
    group's rewards (and to scaling them with ``fnorm: std``)."""
    check_advantage(gigpo_advantages, GiGPOArgs(fnorm=fnorm), inputs, shift_invariant=True,
                    scale_invariant=fnorm == "std")


@SETTINGS
@given(advantage_inputs())
def test_trainer_side_with_std_equals_verl_grpo(inputs: AdvantageInputs) -> None:
    assert_equals_verl(gigpo_advantages, GiGPOArgs(fnorm="std"),
                       "compute_grpo_outcome_advantage", inputs, epsilon=EPS)


@SETTINGS
@given(advantage_inputs())
def test_trainer_side_without_std_is_dr_grpo_over_one_plus_eps(inputs: AdvantageInputs) -> None:
    """``fnorm: none`` divides the centred return by ``1 + ε`` (Trinity-RFT's form):
    veRL's Dr.GRPO advantage scaled by ``1 / (1 + ε)``."""
    core_algos = pytest.importorskip("verl.trainer.ppo.core_algos")
    ours, _ = gigpo_advantages(inputs, GiGPOArgs(fnorm="none"))
    index = inputs.index.tolist() if isinstance(inputs.index, torch.Tensor) else inputs.index
    theirs, _ = core_algos.compute_grpo_outcome_advantage(
        inputs.token_level_rewards.clone(), inputs.response_mask.clone(),
        index=np.array(list(index), dtype=object), epsilon=EPS, norm_adv_by_std_in_grpo=False)
    close(ours, theirs / (1 + EPS))


def _step(task: int, episode: str, step: int, *, reward: float | None = None,
          state: str | None = None, step_reward: float | None = None) -> Experience:
    info = {"env_state_hash": state, "step_reward": step_reward}
    return episode_step(task, episode, step, reward=reward, batch=3,
                        **{k: v for k, v in info.items() if v is not None})


def _advantage(experiences: list[Experience], episode: str, step: int) -> float:
    (exp,) = [e for e in experiences if e.info["episode"] == episode and e.eid.step == step]
    assert torch.equal(exp.advantages, torch.full((3,), exp.advantages[0].item()))
    assert torch.equal(exp.returns, exp.advantages)
    return exp.advantages[0].item()


def test_operator_by_hand() -> None:
    """Episodes a, b of one task, two steps each, terminal rewards 1 and 0, γ = 0.5: the
    returns R are a: (0.5, 1), b: (0, 0). A^E = ±0.5 / (1 + ε). Both first steps start
    from state s0: A^S = ±0.25 / (1 + ε); the second steps' states differ (A^S = 0)."""
    experiences = [_step(0, "a", 1, reward=1.0, state="a1"), _step(0, "a", 0, state="s0"),
                   _step(0, "b", 0, state="s0"), _step(0, "b", 1, reward=0.0, state="b1")]
    out, metrics = GiGPO(GiGPOArgs(gamma=0.5)).process(experiences)
    assert out == experiences
    d = 1 + EPS
    assert _advantage(out, "a", 0) == pytest.approx((0.5 + 0.25) / d)
    assert _advantage(out, "a", 1) == pytest.approx(0.5 / d)
    assert _advantage(out, "b", 0) == pytest.approx((-0.5 - 0.25) / d)
    assert _advantage(out, "b", 1) == pytest.approx(-0.5 / d)
    assert metrics["anchor_groups_total"] == 3 and metrics["anchor_groups_size_gt1"] == 1
    assert metrics["anchor_group_hit_ratio"] == pytest.approx(1 / 3)
    assert metrics["episode_reward_mean"] == pytest.approx(0.5)


def test_operator_with_step_rewards_std_and_omega() -> None:
    """Dense ``info["step_reward"]`` replaces the terminal reward; ``fnorm: std`` divides
    by the unbiased std; ``ω`` weighs the step level."""
    experiences = [_step(0, "a", 0, step_reward=1.0, state="s"), _step(0, "a", 1, step_reward=1.0),
                   _step(0, "b", 0, step_reward=0.0, state="s"), _step(0, "b", 1, step_reward=3.0),
                   _step(0, "c", 0, step_reward=1.0, state="s")]
    out, _ = GiGPO(GiGPOArgs(omega=0.5, fnorm="std")).process(experiences)
    episode = torch.tensor([2.0, 3.0, 1.0], dtype=torch.float64)  # returns of a, b, c
    a_e = ((episode - episode.mean()) / (episode.std() + EPS)).tolist()
    first = torch.tensor([2.0, 3.0, 1.0], dtype=torch.float64)  # R_0 of a, b, c (γ = 1)
    a_s = ((first - first.mean()) / (first.std() + EPS)).tolist()
    assert _advantage(out, "a", 0) == pytest.approx(a_e[0] + 0.5 * a_s[0])
    assert _advantage(out, "a", 1) == pytest.approx(a_e[0])
    assert _advantage(out, "b", 0) == pytest.approx(a_e[1] + 0.5 * a_s[1])
    assert _advantage(out, "c", 0) == pytest.approx(a_e[2] + 0.5 * a_s[2])


def test_discounted_returns() -> None:
    assert discounted_returns([1.0, 0.0, 2.0], 0.5) == pytest.approx([1.5, 1.0, 2.0])
    assert discounted_returns([], 0.9) == []


@SETTINGS
@given(st.lists(st.tuples(st.integers(0, 3), st.sampled_from([0.0, 0.5, 1.0, -2.0])),
                min_size=1, max_size=12), st.sampled_from(["std", "none"]))
def test_operator_on_one_step_episodes_is_the_trainer_side_function(rows: list, fnorm: str
                                                                    ) -> None:
    args = GiGPOArgs(fnorm=fnorm)
    assert_operator_is_trainer_side(GiGPO(args), gigpo_advantages, args, rows)


def test_layout_refuses_anchor_states_without_advantages() -> None:
    layout = PRESET.batch_layout
    plain = Experience(tokens=torch.arange(4), prompt_length=2, reward=1.0)
    anchored = Experience(tokens=torch.arange(4), prompt_length=2, reward=1.0,
                          info={"env_state_hash": "s0"})
    assert layout.arrange([plain]) == [plain]
    with pytest.raises(RftError, match=r"experience 1 .*env_state_hash.*name: gigpo"):
        layout.arrange([plain, anchored])


def test_args_are_checked() -> None:
    with pytest.raises(ValueError, match="fnorm"):
        GiGPOArgs(fnorm="mad")  # type: ignore[arg-type]


def test_registered_by_this_distribution() -> None:
    registry = PluginRegistry.create()
    for kind in ("algorithm", "advantage_fn", "experience_operator"):
        assert registry.registration(kind, "gigpo").distribution == "rft-plugin-gigpo"


def test_preset_fills_defaults(tmp_path) -> None:
    algorithm, plan = validated({"algorithm_type": "gigpo"}, str(tmp_path))
    assert (algorithm.advantage_fn, algorithm.policy_loss_fn, algorithm.kl_loss_fn,
            algorithm.kl_penalty_fn, algorithm.entropy_loss_fn, algorithm.sample_strategy,
            algorithm.repeat_times) == ("gigpo", "ppo", "k2", "none", "default", "default", 8)
    assert plan.loss.advantage.args == GiGPOArgs()
    policy = plan.loss.policy_loss.args
    assert (policy.clip_range, policy.clip_range_low, policy.clip_range_high) == (0.2, None, None)
    assert plan.preset.use_reference


class TwoStepStateWorkflow(TwoStepWorkflow):
    """Two-step episodes whose first step starts from the task's state ``t<index>``
    (shared by the task's episodes: an anchor state); the reward on the last step."""

    def finish(self, first: Experience, second: Experience) -> None:
        self.score(second, self.response_text(second))
        first.reward = 0.0
        first.info["env_state_hash"] = f"t{self.task.index}"


def test_a_tiny_run_with_anchor_states(rft_run) -> None:
    outcome = rft_run({
        "algorithm.algorithm_type": "gigpo", "algorithm.repeat_times": 2,
        "buffer.train_batch_size": 8,
        "buffer.explorer_input.taskset.default_workflow_type": "two_step_state_test_workflow",
        "data_processor.experience_pipeline.operators": [{"name": "gigpo"}],
    }, plugins=[workflow_plugin("two_step_state_test_workflow", TwoStepStateWorkflow)])
    assert len(outcome.metrics) == 2
    for step in outcome.metrics:
        assert step["pipeline/gigpo/anchor_groups_size_gt1"] == 2.0  # one state per task
        assert step["pipeline/gigpo/experience_count"] == 8.0
        assert "actor/pg_loss" in step
        assert all(math.isfinite(v) for v in step.values() if isinstance(v, float))
