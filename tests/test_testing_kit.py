"""rft's kit for plugin authors: the pytest plugin (loaded through its ``pytest11`` entry
point), the strategies and the contract checks, used the way a plugin author's own test
file uses them (pytester), and ``rft_run`` with an in-process plugin."""

from __future__ import annotations

import math
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rft import hookimpl
from rft.contracts import AdvantageInputs, AggContext, EntropyInputs, KLInputs, PolicyLossInputs
from rft.ops import LOSS_AGG_MODES
from rft.plugins import PluginRegistry
from rft.testing.algorithms import SETTINGS
from rft.testing.checks import (assert_equals_verl, check_advantage, check_entropy, check_kl,
                                check_policy_loss, check_reward, check_workflow)
from rft.testing.references import ClippedSurrogate
from rft.testing.runs import RunOutcome, apply_overrides
from rft.testing.strategies import (advantage_inputs, exact_match_reward, policy_loss_inputs,
                                    reward_cases, workflow_tasks)
from rft.workflow import Task, Workflow

pytest_plugins = ["pytester"]

AUTHOR_TESTS = textwrap.dedent('''
    """A plugin author's tests: one correct policy loss, three broken ones."""
    import torch
    from hypothesis import given, settings

    from rft.ops import masked_mean
    from rft.testing.checks import check_policy_loss
    from rft.testing.strategies import policy_loss_inputs

    FAST = settings(max_examples=30, deadline=None, derandomize=True)


    def clipped_pg(inputs, args):
        """Per token: max(-A * ratio, -A * clip(ratio, 0.8, 1.2))."""
        ratio = torch.exp((inputs.log_prob - inputs.old_log_prob).clamp(-20, 20))
        clipped = ratio.clamp(0.8, 1.2)
        return torch.maximum(-inputs.advantages * ratio, -inputs.advantages * clipped), {}


    def unmasked_pg(inputs, args):
        """Aggregates itself over every position, padding included."""
        return (-inputs.advantages * inputs.log_prob).mean(), {}


    def own_count_pg(inputs, args):
        """Divides by the micro-batch's own token count instead of inputs.agg's."""
        ratio = torch.exp((inputs.log_prob - inputs.old_log_prob).clamp(-20, 20))
        return masked_mean(-inputs.advantages * ratio, inputs.response_mask), {}


    def nan_on_policy_pg(inputs, args):
        """(ratio - 1) / log_ratio: 0/0 where the policy has not moved."""
        log_ratio = inputs.log_prob - inputs.old_log_prob
        return -inputs.advantages * (torch.exp(log_ratio) - 1) / log_ratio, {}


    @FAST
    @given(policy_loss_inputs())
    def test_clipped_pg(inputs):
        check_policy_loss(clipped_pg, None, inputs)


    @FAST
    @given(policy_loss_inputs())
    def test_unmasked_pg(inputs):
        check_policy_loss(unmasked_pg, None, inputs)


    @FAST
    @given(policy_loss_inputs())
    def test_own_count_pg(inputs):
        check_policy_loss(own_count_pg, None, inputs)


    @FAST
    @given(policy_loss_inputs())
    def test_nan_on_policy_pg(inputs):
        check_policy_loss(nan_on_policy_pg, None, inputs)


''')


MATHS_TESTS = textwrap.dedent('''
    """A plugin author's clipped surrogate, right and with two maths slips that keep the
    structural contract, checked against the kit's reference (veRL is not importable)."""
    import pytest
    import torch
    from hypothesis import given, settings

    from rft.testing.checks import assert_equals_verl, check_policy_loss
    from rft.testing.references import ClippedSurrogate
    from rft.testing.strategies import policy_loss_inputs

    FAST = settings(max_examples=30, deadline=None, derandomize=True)
    REFERENCE = ClippedSurrogate(clip_range=0.2)


    def _ratio(inputs):
        return torch.exp((inputs.log_prob - inputs.old_log_prob).clamp(-20, 20))


    def clipped_pg(inputs, args):
        ratio = _ratio(inputs)
        return torch.maximum(-inputs.advantages * ratio,
                             -inputs.advantages * ratio.clamp(0.8, 1.2)), {}


    def wrong_sign_pg(inputs, args):
        """The clipped branch has the advantage's sign flipped."""
        ratio = _ratio(inputs)
        return torch.maximum(-inputs.advantages * ratio,
                             inputs.advantages * ratio.clamp(0.8, 1.2)), {}


    def min_for_max_pg(inputs, args):
        """min where PPO takes max (the optimistic bound)."""
        ratio = _ratio(inputs)
        return torch.minimum(-inputs.advantages * ratio,
                             -inputs.advantages * ratio.clamp(0.8, 1.2)), {}


    def test_verl_is_absent():
        with pytest.raises(ImportError):
            import verl  # noqa: F401


    @FAST
    @given(policy_loss_inputs())
    def test_comparing_with_verl_skips(inputs):
        assert_equals_verl(clipped_pg, None, "vanilla", inputs)


    @FAST
    @given(policy_loss_inputs())
    def test_clipped_pg(inputs):
        check_policy_loss(clipped_pg, None, inputs, reference=REFERENCE)


    @FAST
    @given(policy_loss_inputs())
    def test_wrong_sign_pg(inputs):
        check_policy_loss(wrong_sign_pg, None, inputs, reference=REFERENCE)


    @FAST
    @given(policy_loss_inputs())
    def test_min_for_max_pg(inputs):
        check_policy_loss(min_for_max_pg, None, inputs, reference=REFERENCE)
''')

NO_VERL = textwrap.dedent('''
    """veRL is not importable in this session (how the kit sees an environment without it)."""
    import sys

    sys.modules["verl"] = None
''')


def test_plugin_module_imports_nothing_heavy() -> None:
    """pytest loads the plugin in every session where rft is installed, hypothesis or
    not: importing it must not import torch, hypothesis or transformers."""
    code = ("import sys, rft.testing.pytest_plugin; "
            "print(sorted(m for m in ('torch', 'hypothesis', 'transformers') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_checks_pass_the_correct_loss_and_name_what_the_broken_ones_break(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_my_losses=AUTHOR_TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=1, failed=3)
    result.stdout.fnmatch_lines([
        ("*AssertionError: check_policy_loss(unmasked_pg): gradient w.r.t. log_prob is "
         "non-zero at masked positions*"),
        ("*AssertionError: check_policy_loss(own_count_pg): micro-batch losses do not add up "
         "to the mini-batch loss*"),
        "*AssertionError: check_policy_loss(nan_on_policy_pg): pg_loss is not finite*",
    ], consecutive=False)


def test_the_reference_catches_maths_slips_without_verl(pytester: pytest.Pytester) -> None:
    """A sign flipped on the clipped branch, and min for max, keep every structural
    property (masking, aggregation, zero advantages); with the family named, the check
    fails them, veRL not importable, and passes the correct loss."""
    pytester.makeconftest(NO_VERL)
    pytester.makepyfile(test_my_surrogate=MATHS_TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q", "-rs")
    result.assert_outcomes(passed=2, failed=2, skipped=1)
    result.stdout.fnmatch_lines([
        ("*AssertionError: check_policy_loss(wrong_sign_pg): gradient w.r.t. log_prob does "
         "not oppose the advantage where the clipped surrogate (ε_low=0.2, ε_high=0.2) is the "
         "unclipped −A·ratio*"),
        ("*AssertionError: check_policy_loss(min_for_max_pg): gradient w.r.t. log_prob does "
         "not oppose the advantage where the clipped surrogate*"),
        "*SKIPPED*veRL is not installed*",
    ], consecutive=False)


def test_fixtures_come_from_the_entry_point(pytester: pytest.Pytester) -> None:
    """A project without any conftest gets the ``rft_`` fixtures."""
    pytester.makepyfile(test_fixtures='''
        import json

        def test_taskset(rft_tiny_taskset):
            rows = [json.loads(line) for line in rft_tiny_taskset.read_text().splitlines()]
            assert rows[3] == {"question": "3+1=", "answer": "4"} and len(rows) == 8
    ''')
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=1)
    listed = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--fixtures")
    listed.stdout.fnmatch_lines(["*rft_tiny_model*", "*rft_tiny_taskset*", "*rft_model*",
                                 "*rft_run*"], consecutive=False)


def test_overrides_merge_nested_and_dotted_keys() -> None:
    config = {"algorithm": {"algorithm_type": "grpo", "repeat_times": 2}, "buffer": {"x": 1}}
    merged = apply_overrides(config, {"algorithm.policy_loss_fn": "mine",
                                      "algorithm": {"repeat_times": 4},
                                      "trainer.save_interval": 1, "buffer": 3})
    assert merged == {"algorithm": {"algorithm_type": "grpo", "repeat_times": 4,
                                    "policy_loss_fn": "mine"},
                      "buffer": 3, "trainer": {"save_interval": 1}}
    assert config["algorithm"] == {"algorithm_type": "grpo", "repeat_times": 2}  # a copy


class CountingLossPlugin:
    """An in-process plugin: a policy loss that counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    @hookimpl
    def register_policy_loss_fns(self) -> dict[str, object]:
        def counting_pg(inputs: PolicyLossInputs, args: None):
            self.calls += 1
            assert isinstance(inputs.agg, AggContext)
            return -inputs.advantages * torch.exp(inputs.log_prob - inputs.old_log_prob), {
                "counted": float(self.calls)}

        return {"counting_pg": counting_pg}


def test_rft_run_with_an_in_process_policy_loss(rft_run) -> None:
    plugin = CountingLossPlugin()
    outcome = rft_run({"algorithm.policy_loss_fn": "counting_pg"}, plugins=[plugin])
    assert isinstance(outcome, RunOutcome)
    assert plugin.calls >= 2
    assert len(outcome.metrics) == 2
    for step in outcome.metrics:
        assert "actor/counted" in step and "actor/pg_loss" in step
        assert "rollout/reward/mean" in step
    assert len(outcome.rewards()) == 2
    assert (outcome.job_dir / "monitor" / "trainer.jsonl").exists()


# --------------------------------------------------------------------------------------
# The strategies draw what they promise
# --------------------------------------------------------------------------------------


@SETTINGS
@given(policy_loss_inputs())
def test_policy_loss_inputs_are_realistic(inputs: PolicyLossInputs) -> None:
    log_ratio = inputs.log_prob.detach() - inputs.old_log_prob  # (B, T)
    assert inputs.log_prob.requires_grad and inputs.log_prob.is_leaf
    assert inputs.log_prob.dtype == torch.float64
    assert log_ratio.abs().max() <= 20.0 + 1e-12
    assert (inputs.log_prob <= 0).all() and (inputs.old_log_prob <= 0).all()
    assert inputs.agg.mode in LOSS_AGG_MODES
    assert set(inputs.response_mask.unique().tolist()) <= {0.0, 1.0}


def test_policy_loss_inputs_reach_the_edge_cases() -> None:
    """Every agg mode, empty rows, holes, on-policy batches and |log ratio| near 20 are
    all drawn within the default number of examples."""
    seen: set[str] = set()

    @SETTINGS
    @given(policy_loss_inputs())
    def record(inputs: PolicyLossInputs) -> None:
        mask = inputs.response_mask
        seen.add(inputs.agg.mode)
        lengths = mask.sum(-1)
        if (lengths == 0).any():
            seen.add("empty row")
        if (mask[:, 1:] > mask[:, :-1]).any():
            seen.add("hole")
        elif len(set(lengths.tolist())) > 1:
            seen.add("ragged right padding")
        log_ratio = (inputs.log_prob.detach() - inputs.old_log_prob).abs()
        if log_ratio.max() == 0:
            seen.add("on-policy")
        if log_ratio.max() > 15:
            seen.add("extreme ratio")

    record()
    assert seen >= {*LOSS_AGG_MODES, "empty row", "hole", "ragged right padding", "on-policy",
                    "extreme ratio"}


@SETTINGS
@given(advantage_inputs(values=True, reward_baselines=True))
def test_advantage_inputs_have_groups_of_every_size(inputs: AdvantageInputs) -> None:
    rows = inputs.token_level_rewards.shape[0]
    assert inputs.values.shape == inputs.response_mask.shape
    assert (inputs.values[inputs.response_mask == 0] == 0).all()  # a critic's, masked
    assert inputs.reward_baselines.shape == (rows,)
    assert len(inputs.index) == rows


@settings(SETTINGS, max_examples=10)
@given(workflow_tasks(greedy_baseline=None))
def test_workflow_tasks_keep_their_raw_row(task: Task) -> None:
    assert task.prompt == task.raw["question"] and task.truth == task.raw["answer"]
    assert task.reward_fn is exact_match_reward and task.repeat_times >= 1


# --------------------------------------------------------------------------------------
# Each check names what a broken function breaks
# --------------------------------------------------------------------------------------


def _batch(rows: int = 4, width: int = 5) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    values = torch.randn(rows, width, generator=gen, dtype=torch.float64)  # (B, T)
    lengths = torch.tensor([5, 3, 0, 2])[:rows]
    mask = (torch.arange(width) < lengths[:, None]).to(torch.float64)  # (B, T)
    return values, mask


def test_check_advantage_names_a_leak_a_gradient_and_a_broken_invariance() -> None:
    rewards, mask = _batch()
    inputs = AdvantageInputs(rewards, mask, ["a", "a", "b", "b"], values=rewards * mask)

    def unmasked(inputs: AdvantageInputs, args: None):
        with torch.no_grad():
            scores = inputs.token_level_rewards.sum(-1, keepdim=True)  # (B, 1)
            return scores.expand_as(inputs.response_mask).clone(), scores.expand_as(
                inputs.response_mask).clone()

    def with_grad(inputs: AdvantageInputs, args: None):  # returns flow from the critic
        returns = inputs.token_level_rewards.flip(-1).cumsum(-1).flip(-1)  # (B, T)
        advantages = (returns - inputs.values) * inputs.response_mask  # (B, T)
        return advantages, returns * inputs.response_mask

    def raw_scores(inputs: AdvantageInputs, args: None):
        with torch.no_grad():
            advantages = inputs.token_level_rewards.sum(-1, keepdim=True) * inputs.response_mask
        return advantages, advantages

    with pytest.raises(AssertionError, match=r"^check_advantage\(.*unmasked\): advantages are "
                                             r"non-zero at masked positions"):
        check_advantage(unmasked, None, inputs)
    with pytest.raises(AssertionError, match="advantages must carry no gradient"):
        check_advantage(with_grad, None, inputs)
    with pytest.raises(AssertionError, match="adding a constant to the rewards of a group"):
        check_advantage(raw_scores, None, inputs, shift_invariant=True)
    with pytest.raises(AssertionError, match="scaling every reward by 3"):
        check_advantage(raw_scores, None, inputs, scale_invariant=True)
    check_advantage(raw_scores, None, inputs)  # the contract itself holds


def test_check_kl_and_check_entropy_name_the_property() -> None:
    log_prob, mask = _batch()
    log_prob = -log_prob.abs()
    inputs = KLInputs(log_prob, torch.where(mask.bool(), log_prob, log_prob + 0.5))
    with pytest.raises(AssertionError, match=r"^check_kl\(.*\): kl must be 0 where log_prob "
                                             r"== ref_log_prob"):
        check_kl(lambda i, a: i.log_prob - i.ref_log_prob + 1e-3, None, inputs)
    with pytest.raises(AssertionError, match="kl must be non-negative"):
        check_kl(lambda i, a: i.log_prob - i.ref_log_prob, None, inputs, nonnegative=True)
    with pytest.raises(AssertionError, match=r"kl must be per token \(B, T\)"):
        check_kl(lambda i, a: (i.log_prob - i.ref_log_prob).sum(-1), None, inputs)
    entropy = EntropyInputs(log_prob.abs(), mask, AggContext("seq-mean-token-mean"))
    with pytest.raises(AssertionError, match=r"^check_entropy\(.*\): gradient w.r.t. entropy "
                                             r"is non-zero at masked positions"):
        check_entropy(lambda i, a: i.entropy.mean(), None, entropy)
    with pytest.raises(AssertionError, match="must return a 0-dim tensor"):
        check_entropy(lambda i, a: i.entropy * i.response_mask, None, entropy)


def test_check_policy_loss_parameters_leave_properties_out() -> None:
    log_prob, mask = _batch()
    inputs = PolicyLossInputs(-log_prob.abs(), -log_prob.abs(), torch.zeros_like(mask), mask,
                              AggContext())

    def nll(inputs: PolicyLossInputs, args: None):
        return -inputs.log_prob, {}

    with pytest.raises(AssertionError, match="zero advantages must give a zero loss"):
        check_policy_loss(nll, None, inputs)
    check_policy_loss(nll, None, inputs, zero_advantage_zero_loss=False)

    def odd_metric(inputs: PolicyLossInputs, args: None):
        return -inputs.advantages * inputs.log_prob, {"per_row": inputs.log_prob.sum(-1)}

    with pytest.raises(AssertionError, match="metric 'per_row' must be a 0-dim tensor or a "
                                             r"number \(got Tensor of shape \(4,\)\)"):
        check_policy_loss(odd_metric, None, inputs)


@settings(SETTINGS, max_examples=20)
@given(st.lists(reward_cases(), min_size=1, max_size=3))
def test_check_reward_on_the_accuracy_reward(cases: list[tuple[str, object]]) -> None:
    accuracy = PluginRegistry.create().get("reward_fn", "accuracy_reward")
    parts = check_reward(accuracy, None, cases)
    assert all(set(p) == {"accuracy"} for p in parts)


def test_check_reward_names_a_non_finite_part() -> None:
    def ratio(response: str, truth: str) -> dict[str, float]:
        return {"ratio": len(response) / len(truth) if truth else math.inf}

    check_reward(ratio, None, ("12", "3"))
    with pytest.raises(AssertionError, match=r"^check_reward\(.*ratio\): part 'ratio' is not "
                                             "finite"):
        check_reward(ratio, None, [("12", "3"), ("x", "")])


@settings(SETTINGS, max_examples=5)
@given(workflow_tasks(greedy_baseline=None))
def test_check_workflow_on_the_simple_workflow(rft_model, task: Task) -> None:
    cls = PluginRegistry.create().get("workflow", "simple_workflow")
    experiences = check_workflow(cls, None, task, rft_model)
    assert len(experiences) == task.repeat_times


def test_check_workflow_names_an_unscored_experience(rft_model) -> None:
    class Unscored(Workflow):
        def run(self):
            return self.model.chat(self.task.chat_messages(), n=2, max_tokens=4)

    task = Task(raw={"question": "1+1=", "answer": "2"}, index=0, taskset="t", prompt="1+1=",
                truth="2", reward_fn=exact_match_reward)
    with pytest.raises(AssertionError, match=r"^check_workflow\(.*Unscored\): experience 0 is "
                                             "not scored"):
        check_workflow(Unscored, None, task, rft_model)


# --------------------------------------------------------------------------------------
# assert_equals_verl
# --------------------------------------------------------------------------------------


def test_assert_equals_verl_finds_a_difference_and_skips_without_verl(monkeypatch) -> None:
    pytest.importorskip("verl.trainer.ppo.core_algos")
    from rft_plugin_grpo import GRPONoStdArgs, grpo_no_std_advantages

    rewards, mask = _batch()
    inputs = AdvantageInputs(rewards, mask, ["a", "a", "b", "b"])
    with pytest.raises(AssertionError, match=r"^assert_equals_verl\[compute_grpo_outcome_"
                                             r"advantage\]\(grpo_no_std_advantages\): "
                                             "advantages differs from veRL's"):
        assert_equals_verl(grpo_no_std_advantages, GRPONoStdArgs(),
                           "compute_grpo_outcome_advantage", inputs)
    assert_equals_verl(grpo_no_std_advantages, GRPONoStdArgs(),
                       "compute_grpo_outcome_advantage", inputs, norm_adv_by_std_in_grpo=False)
    monkeypatch.setitem(sys.modules, "verl.trainer.ppo", None)
    with pytest.raises(pytest.skip.Exception, match="veRL is not installed"):
        assert_equals_verl(grpo_no_std_advantages, GRPONoStdArgs(),
                           "compute_grpo_outcome_advantage", inputs)


# --------------------------------------------------------------------------------------
# The reference formulas
# --------------------------------------------------------------------------------------


def _flat_and_moving(reference: ClippedSurrogate, log_ratio: float, advantage: float
                     ) -> tuple[bool, bool]:
    one = torch.zeros(1, 1, dtype=torch.float64)
    inputs = PolicyLossInputs(one + log_ratio, one, one + advantage, one + 1, AggContext())
    regions = reference.regions(inputs)
    return bool(regions.flat.item()), bool(regions.moving.item())


def test_clipped_surrogate_regions_by_hand() -> None:
    """ε_low 0.1, ε_high 0.28, c 3: flat where the clip (or the dual clip, or the ±20
    clamp) binds, moving where −A·ratio is the active term, neither at A = 0."""
    reference = ClippedSurrogate(clip_range_low=0.1, clip_range_high=0.28, clip_ratio_c=3.0)
    assert _flat_and_moving(reference, math.log(1.5), 1.0) == (True, False)   # above 1 + ε_h
    assert _flat_and_moving(reference, math.log(1.2), 1.0) == (False, True)   # inside
    assert _flat_and_moving(reference, math.log(0.5), 1.0) == (False, True)   # below, A > 0
    assert _flat_and_moving(reference, math.log(0.5), -1.0) == (True, False)  # below 1 − ε_l
    assert _flat_and_moving(reference, math.log(2.0), -1.0) == (False, True)  # above, A < 0
    assert _flat_and_moving(reference, math.log(4.0), -1.0) == (True, False)  # dual clip
    assert _flat_and_moving(reference, 25.0, -1.0) == (True, False)           # ±20 clamp
    assert _flat_and_moving(reference, 0.0, 0.0) == (False, False)
    with pytest.raises(ValueError, match="clip_ratio_c must be > 1"):
        ClippedSurrogate(clip_ratio_c=1.0)


@settings(SETTINGS, max_examples=25)
@given(policy_loss_inputs(), st.sampled_from([(0.2, None, None, None), (0.2, 0.1, 0.28, 3.0),
                                              (0.3, None, None, 1.5)]))
def test_clipped_surrogate_reference_equals_verl(inputs: PolicyLossInputs, clips: tuple) -> None:
    """The reference is veRL 0.9.1's ``vanilla`` loss: value, gradient and the three
    metrics (without a dual clip: veRL's with a bound never reached, c = 1e10)."""
    pytest.importorskip("verl.trainer.ppo.core_algos")
    clip, low, high, c = clips
    reference = ClippedSurrogate(clip, low, high, clip_ratio_c=c)
    config = {"clip_ratio": clip, "clip_ratio_low": low, "clip_ratio_high": high,
              "clip_ratio_c": c if c is not None else 1e10}
    assert_equals_verl(reference, None, "vanilla", inputs, config=config)


# --------------------------------------------------------------------------------------
# The clipped_pg example of docs/plugins.md, as written
# --------------------------------------------------------------------------------------

DOCS = Path(__file__).resolve().parents[1] / "docs"


def _python_block(page: str, marker: str) -> str:
    """The ```python block of ``docs/<page>`` containing ``marker``."""
    blocks = re.findall(r"```python\n(.*?)```", (DOCS / page).read_text(), re.S)
    found = [block for block in blocks if marker in block]
    assert len(found) == 1, f"{page}: {len(found)} python blocks contain {marker!r}"
    return found[0]


@pytest.fixture
def docs_clipped_pg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    """The example plugin of docs/plugins.md installed from its text (importable as
    ``rft_plugin_clipped_pg``), and the namespace of its documented test."""
    package = tmp_path / "rft_plugin_clipped_pg"
    package.mkdir()
    (package / "__init__.py").write_text(
        _python_block("plugins.md", '"""rft-plugin-clipped-pg: a clipped policy gradient."""'))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "rft_plugin_clipped_pg", raising=False)
    namespace: dict = {}
    exec(_python_block("plugins.md", "def test_on_policy_loss_is_minus_the_advantage"),
         namespace)
    return namespace


def test_docs_clipped_pg_passes_its_own_test(docs_clipped_pg: dict) -> None:
    docs_clipped_pg["test_on_policy_loss_is_minus_the_advantage"]()


def test_docs_clipped_pg_keeps_the_contract_and_the_reference(docs_clipped_pg: dict) -> None:
    """The property test of docs/testing-plugins.md, run as written on the example."""
    namespace: dict = {}
    exec(_python_block("testing-plugins.md", "def test_clipped_pg_keeps_the_contract"),
         namespace)
    namespace["test_clipped_pg_keeps_the_contract"]()


def test_docs_clipped_pg_equals_verl(docs_clipped_pg: dict) -> None:
    """The example as written equals veRL's ``vanilla`` (its dual clip out of reach): loss,
    gradient and ``pg_clipfrac`` (the version that counted ``clipped != ratio`` failed on
    it)."""
    pytest.importorskip("verl.trainer.ppo.core_algos")
    from rft_plugin_clipped_pg import ClippedPGArgs, clipped_pg

    @settings(SETTINGS, max_examples=25)
    @given(policy_loss_inputs())
    def equals_verl(inputs: PolicyLossInputs) -> None:
        assert_equals_verl(clipped_pg, ClippedPGArgs(), "vanilla", inputs,
                           config={"clip_ratio": 0.2, "clip_ratio_c": 1e10})

    equals_verl()


def test_a_clip_fraction_over_sum_of_mask_matches_verls_definition_on_one_token():
    """veRL's masked mean divides by ``Σ m + 1e-8``; a loss that divides by ``Σ m`` (as the
    ``rft new-plugin policy_loss`` template does) differs by 1e-8 relative on one token.
    Hypothesis found this input (one token, clipped) failing the float64 tolerance."""

    def clip_count_pg(inputs: PolicyLossInputs, args: object) -> tuple[torch.Tensor, dict]:
        ratio = torch.exp((inputs.log_prob - inputs.old_log_prob).clamp(-20, 20))
        unclipped = -inputs.advantages * ratio
        clipped = -inputs.advantages * ratio.clamp(0.8, 1.2)
        mask = inputs.response_mask
        clipfrac = ((clipped > unclipped).float() * mask).sum() / mask.sum().clamp(min=1)
        return torch.maximum(unclipped, clipped), {"pg_clipfrac": clipfrac.detach()}

    inputs = PolicyLossInputs(
        log_prob=torch.tensor([[-0.4418]], dtype=torch.float64, requires_grad=True),
        old_log_prob=torch.tensor([[-1.1631]], dtype=torch.float64),
        advantages=torch.tensor([[0.5636]], dtype=torch.float64),
        response_mask=torch.tensor([[1.0]], dtype=torch.float64),
        agg=AggContext(mode="token-mean"))
    check_policy_loss(clip_count_pg, None, inputs, reference=ClippedSurrogate(clip_range=0.2))

    def wrong_clip_count_pg(inputs: PolicyLossInputs, args: object) -> tuple[torch.Tensor, dict]:
        loss, _ = clip_count_pg(inputs, args)
        return loss, {"pg_clipfrac": torch.tensor(0.5, dtype=torch.float64)}

    with pytest.raises(AssertionError, match="metric 'pg_clipfrac' differs"):
        check_policy_loss(wrong_clip_count_pg, None, inputs,
                          reference=ClippedSurrogate(clip_range=0.2))
