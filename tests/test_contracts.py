"""The calling contracts of the loss path (:mod:`rft.contracts`): a plugin written only
against them, the ``needs_ref_log_prob`` declaration, the one-line error of a missing
advantage input, every registered implementation called as ``fn(inputs, args)``, and no
signature reading in the trainer's loss assembly."""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

import rft
from rft import hookimpl, hookspecs
from rft.config.validate import Selected, build_args
from rft.contracts import (AdvantageInputs, AggContext, EntropyInputs, KLInputs,
                           PolicyLossInputs, needs_ref_log_prob)
from rft.errors import RftError
from rft.plugins import PluginRegistry, args_type_of
from rft.trainer import loss as loss_module
from rft.config.plan import LossPlan
from rft.trainer.loss import LossInputs, actor_loss, compute_advantages

REPO = Path(__file__).resolve().parents[1]
B, T = 4, 5


def _batch(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(B, T, generator=g, dtype=torch.float64) * 2
    mask = torch.ones(B, T, dtype=torch.float64)
    mask[1, 3:] = 0.0
    return {"log_prob": (old + 0.1 * torch.randn(B, T, generator=g, dtype=torch.float64)
                         ).requires_grad_(),
            "old_log_prob": old,
            "ref_log_prob": old + 0.05 * torch.randn(B, T, generator=g, dtype=torch.float64),
            "advantages": torch.randn(B, T, generator=g, dtype=torch.float64),
            "entropy": torch.rand(B, T, generator=g, dtype=torch.float64),
            "response_mask": mask}


# --------------------------------------------------------------------------------------
# A policy loss written only against the contract, registered in-process
# --------------------------------------------------------------------------------------


@dataclass
class ScaledPGArgs:
    scale: float = 2.0
    """Multiplier of the loss."""


received: list[tuple[Any, Any]] = []


def scaled_pg(inputs: PolicyLossInputs, args: ScaledPGArgs):
    """``−scale · A · log π`` per token."""
    received.append((inputs, args))
    pg_loss = -args.scale * inputs.advantages * inputs.log_prob  # (B, T)
    return pg_loss, {"scale": args.scale}


scaled_pg.Args = ScaledPGArgs  # type: ignore[attr-defined]


def ref_pg(inputs: PolicyLossInputs, args: None):
    """Reads the reference log-probs: declares it."""
    received.append((inputs, args))
    seq = ((inputs.log_prob - inputs.ref_log_prob) * inputs.response_mask).sum(-1)  # (B,)
    return -seq.sum() / inputs.agg.global_batch_size, {}


ref_pg.needs_ref_log_prob = True  # type: ignore[attr-defined]


def needs_critic(inputs: AdvantageInputs, args: None):
    values = inputs.require("values", "needs_critic")
    return inputs.token_level_rewards - values, inputs.token_level_rewards


class ContractPlugin:
    @hookimpl
    def register_policy_loss_fns(self) -> dict[str, Any]:
        return {"test_scaled_pg": scaled_pg, "test_ref_pg": ref_pg}

    @hookimpl
    def register_advantage_fns(self) -> dict[str, Any]:
        return {"test_needs_critic": needs_critic}


@pytest.fixture(scope="module")
def registry() -> PluginRegistry:
    return PluginRegistry.create(extra_plugins=[ContractPlugin()], autoload=False)


def _selected(registry: PluginRegistry, kind: str, key: str, name: str,
              args: dict[str, Any] | None = None) -> Selected:
    """What config validation builds: the implementation and its ``Args`` instance."""
    implementation = registry.get(kind, name)
    problems: list[str] = []
    built = build_args(implementation, name, args or {}, f"{key}_args", problems)
    assert not problems
    return Selected(key, name, implementation, built)


def test_plugin_policy_loss_is_called_with_typed_inputs(registry) -> None:
    received.clear()
    selected = _selected(registry, "policy_loss_fn", "algorithm.policy_loss_fn",
                         "test_scaled_pg", {"scale": 3.0})
    t = _batch()
    agg = AggContext.for_mini_batch(t["response_mask"], "token-mean")
    out = actor_loss(LossPlan(policy_loss=selected),
                     LossInputs(t["log_prob"], t["response_mask"], t["old_log_prob"],
                                t["advantages"]), agg)
    ((inputs, args),) = received
    assert isinstance(inputs, PolicyLossInputs) and args == ScaledPGArgs(scale=3.0)
    assert inputs.log_prob is t["log_prob"] and inputs.old_log_prob is t["old_log_prob"]
    assert inputs.advantages is t["advantages"] and inputs.agg is agg
    assert inputs.response_mask is t["response_mask"]
    assert inputs.ref_log_prob is None and inputs.is_expert_mask is None
    mask = t["response_mask"]
    expected = (-3.0 * t["advantages"] * t["log_prob"] * mask).sum() / mask.sum()
    torch.testing.assert_close(out.loss, expected)
    assert out.averaged["actor/scale"] == 3.0


def test_args_defaults_come_from_the_args_dataclass(registry) -> None:
    received.clear()
    selected = _selected(registry, "policy_loss_fn", "algorithm.policy_loss_fn",
                         "test_scaled_pg")
    assert selected.args == ScaledPGArgs()
    t = _batch(1)
    actor_loss(LossPlan(policy_loss=selected), LossInputs(t["log_prob"], t["response_mask"]),
               AggContext.for_mini_batch(t["response_mask"], "token-mean"))
    ((inputs, args),) = received
    assert args.scale == 2.0
    assert torch.equal(inputs.old_log_prob, t["log_prob"].detach())  # SFT-like call
    assert torch.count_nonzero(inputs.advantages) == 0


def test_needs_ref_log_prob_declaration(registry) -> None:
    plain = _selected(registry, "policy_loss_fn", "algorithm.policy_loss_fn", "test_scaled_pg")
    asking = _selected(registry, "policy_loss_fn", "algorithm.policy_loss_fn", "test_ref_pg")
    assert not needs_ref_log_prob(scaled_pg) and needs_ref_log_prob(ref_pg)
    assert not LossPlan(policy_loss=plain).needs_ref
    assert LossPlan(policy_loss=asking).needs_ref and LossPlan(policy_loss=asking).policy_needs_ref

    received.clear()
    t = _batch(2)
    agg = AggContext.for_mini_batch(t["response_mask"], "token-mean")
    out = actor_loss(LossPlan(policy_loss=asking),
                     LossInputs(t["log_prob"], t["response_mask"],
                                ref_log_prob=t["ref_log_prob"]), agg)
    ((inputs, _),) = received
    assert inputs.ref_log_prob is t["ref_log_prob"] and out.loss.dim() == 0
    with pytest.raises(RftError, match=r"^algorithm.policy_loss_fn: 'test_ref_pg' needs "
                                       r"ref_log_prob but no reference log-probs"):
        actor_loss(LossPlan(policy_loss=asking), LossInputs(t["log_prob"], t["response_mask"]),
                   agg)


def test_needs_ref_log_prob_wants_true_itself() -> None:
    def fn(inputs, args):
        return inputs.log_prob, {}

    fn.needs_ref_log_prob = "yes"  # type: ignore[attr-defined]
    assert not needs_ref_log_prob(fn)
    assert not needs_ref_log_prob(object())


# --------------------------------------------------------------------------------------
# Missing advantage inputs
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["test_needs_critic", "gae"])
def test_values_without_a_critic_is_a_one_line_error(registry, name: str) -> None:
    if name == "gae":
        rft_plugin_ppo = pytest.importorskip("rft_plugin_ppo")
        selected = Selected("algorithm.advantage_fn", "gae", rft_plugin_ppo.gae_advantages,
                            rft_plugin_ppo.GAEArgs())
    else:
        selected = _selected(registry, "advantage_fn", "algorithm.advantage_fn", name)
    inputs = AdvantageInputs(torch.zeros(B, T), torch.ones(B, T), ["a", "a", "b", "b"])
    with pytest.raises(RftError) as caught:
        compute_advantages(selected, inputs)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"algorithm.advantage_fn: {name!r} needs values, which this run "
                              "does not provide")
    assert "use_critic" in message
    values = torch.full((B, T), 0.5)
    advantages, _ = compute_advantages(selected, AdvantageInputs(
        torch.zeros(B, T), torch.ones(B, T), ["a", "a", "b", "b"], values=values))
    assert advantages.shape == (B, T)


def test_require_names_who_asks_and_what_provides() -> None:
    inputs = AdvantageInputs(torch.zeros(2, 3), torch.ones(2, 3), [0, 1])
    with pytest.raises(RftError, match=r"^my_estimator needs reward_baselines, .*"
                                       r"Experience.info\['reward_baseline'\]"):
        inputs.require("reward_baselines", "my_estimator")
    assert inputs.require("response_mask", "my_estimator") is inputs.response_mask


# --------------------------------------------------------------------------------------
# Every registered implementation follows its contract
# --------------------------------------------------------------------------------------


def _full_registry() -> PluginRegistry:
    return PluginRegistry.create()


def _args(fn: Any) -> Any:
    args_type = args_type_of(fn)
    return args_type() if args_type is not None else None


KINDS = ("advantage_fn", "policy_loss_fn", "kl_fn", "entropy_loss_fn")


@pytest.mark.parametrize("kind", KINDS)
def test_registered_functions_take_inputs_and_args_only(kind: str) -> None:
    """``fn(inputs, args)``: two parameters and no keyword defaults (defaults live in
    ``Args``)."""
    registry = _full_registry()
    for name in registry.names(kind):
        fn = registry.get(kind, name)
        params = list(inspect.signature(fn).parameters.values())
        assert [p.default for p in params] == [inspect.Parameter.empty] * 2, (kind, name)


def test_every_registered_function_runs_on_its_inputs() -> None:
    registry = _full_registry()
    t = _batch(3)
    mask = t["response_mask"]
    agg = AggContext.for_mini_batch(mask, "token-mean")
    rewards = torch.zeros(B, T, dtype=torch.float64)
    rewards[:, -1] = torch.tensor([1.0, 0.0, 1.0, 1.0], dtype=torch.float64)
    adv_inputs = AdvantageInputs(rewards, mask, ["a", "a", "b", "b"],
                                 values=torch.rand(B, T, dtype=torch.float64),
                                 reward_baselines=torch.full((B,), 0.5, dtype=torch.float64),
                                 rollout_log_prob=t["old_log_prob"].detach(),
                                 teacher_log_prob=t["ref_log_prob"], entropy=t["entropy"],
                                 old_log_prob=t["old_log_prob"].detach(),
                                 expected_entropy_signal=t["entropy"] * 0.1)
    for name in registry.names("advantage_fn"):
        fn = registry.get("advantage_fn", name)
        result = fn(adv_inputs, _args(fn))
        assert len(result) in (2, 3), name  # a third tensor: the kept response mask
        assert all(tensor.shape == (B, T) for tensor in result), name
    policy_inputs = PolicyLossInputs(t["log_prob"], t["old_log_prob"], t["advantages"], mask,
                                     agg, ref_log_prob=t["ref_log_prob"],
                                     teacher_log_prob=t["ref_log_prob"], global_step=1)
    for name in registry.names("policy_loss_fn"):
        fn = registry.get("policy_loss_fn", name)
        pg_loss, metrics = fn(policy_inputs, _args(fn))
        assert pg_loss.shape in ((B, T), ()), name
        assert isinstance(metrics, dict), name
    kl_inputs = KLInputs(t["log_prob"], t["ref_log_prob"])
    for name in registry.names("kl_fn"):
        fn = registry.get("kl_fn", name)
        assert fn(kl_inputs, _args(fn)).shape == (B, T), name
    entropy_inputs = EntropyInputs(t["entropy"], mask, agg)
    for name in registry.names("entropy_loss_fn"):
        fn = registry.get("entropy_loss_fn", name)
        assert fn(entropy_inputs, _args(fn)).dim() == 0, name


# --------------------------------------------------------------------------------------
# The loss assembly reads no signatures; the names are exported
# --------------------------------------------------------------------------------------


def test_loss_assembly_does_not_import_inspect() -> None:
    source = Path(loss_module.__file__).read_text()
    imported: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert "inspect" not in imported
    assert "signature(" not in source and "__code__" not in source


def test_contract_names_are_on_the_public_front() -> None:
    names = ("AdvantageInputs", "PolicyLossInputs", "KLInputs", "EntropyInputs", "AggContext",
             "AdvantageFn", "PolicyLossFn", "KLFn", "EntropyLossFn", "needs_ref_log_prob")
    for name in names:
        assert getattr(rft, name) is getattr(hookspecs, name) is getattr(
            sys.modules["rft.contracts"], name)
    assert loss_module.AggContext is AggContext


def test_importing_rft_does_not_import_torch() -> None:
    code = "import sys, rft; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=REPO).stdout.strip()
    assert out == "False"
