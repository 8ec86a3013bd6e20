"""``rft new-plugin KIND NAME``: the skeleton of a plugin distribution that passes its own
tests right after it is written.

    rft-plugin-<name>/
      pyproject.toml          entry point ``[project.entry-points.rft]``, a bounded
                              dependency on the core, ``test`` extra with rft's kit
      README.md
      rft_plugin_<name>/__init__.py   the hook and a working implementation of KIND
      tests/test_<name>.py    property tests with ``rft.testing`` and a tiny run

Kinds: ``policy_loss``, ``advantage``, ``reward``, ``workflow``.
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rft.errors import RftError

CORE_DISTRIBUTION = "rft-framework"
"""The core's distribution name (what a plugin depends on)."""

NEXT_COMMANDS = "pip install -e '.[test]' && pytest"
"""What to run in the new distribution's folder: install it (its entry point, rft and the
``testing`` extra of rft) and run its tests. ``rft new-plugin`` prints it."""


def next_line(root: str | Path) -> str:
    """``next: cd ROOT && pip install -e '.[test]' && pytest`` and a newline: what
    ``rft new-plugin`` prints on stderr after the folder's path."""
    return f"next: cd {root} && {NEXT_COMMANDS}\n"


def core_requirement(version: str) -> str:
    """``rft-framework>=M.N,<M.N+1`` for a core of version ``M.N.x`` (a plugin is built
    against one minor version of the core)."""
    major, minor = (int(part) for part in re.findall(r"\d+", version)[:2])
    return f"{CORE_DISTRIBUTION}>={major}.{minor},<{major}.{minor + 1}"


@dataclass(frozen=True)
class Names:
    """The names derived from the plugin's ``NAME``."""

    name: str
    """The registered name (what a YAML selects), e.g. ``my_loss``."""
    distribution: str
    """``rft-plugin-my-loss``."""
    module: str
    """``rft_plugin_my_loss``."""
    camel: str
    """``MyLoss`` (class names)."""

    @classmethod
    def of(cls, name: str) -> Names:
        if not re.fullmatch(r"[a-z][a-z0-9_]*", name) or keyword.iskeyword(name):
            raise RftError(f"new-plugin: NAME must be a lower-case Python identifier "
                           f"(letters, digits, _), got {name!r}")
        return cls(name, "rft-plugin-" + name.replace("_", "-"), "rft_plugin_" + name,
                   "".join(part.capitalize() for part in name.split("_")))


# --------------------------------------------------------------------------------------
# Templates: {name}, {camel}, {module}, {distribution}, {requirement}
# --------------------------------------------------------------------------------------

POLICY_LOSS = '''"""{distribution}: the ``{name}`` policy loss for rft.

Select it with ``algorithm.policy_loss_fn: {name}`` (arguments in
``algorithm.policy_loss_fn_args``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from rft import PolicyLossInputs, hookimpl


@dataclass
class {camel}Args:
    """Arguments of ``{name}`` (``algorithm.policy_loss_fn_args``)."""

    clip_range: float = 0.2
    """Clip range ``ε`` of the importance ratio."""


def {name}(inputs: PolicyLossInputs, args: {camel}Args
           ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clipped surrogate, per token::

        r = exp(clamp(log_prob − old_log_prob, −20, 20))
        pg_loss = max(−A · r, −A · clip(r, 1 − ε, 1 + ε))

    ``(B, T)``; the trainer aggregates it with ``inputs.agg`` over ``response_mask``.
    """
    log_ratio = (inputs.log_prob - inputs.old_log_prob).clamp(-20.0, 20.0)  # (B, T)
    ratio = torch.exp(log_ratio)  # (B, T)
    unclipped = -inputs.advantages * ratio  # (B, T)
    clipped = -inputs.advantages * ratio.clamp(1 - args.clip_range, 1 + args.clip_range)
    pg_loss = torch.maximum(unclipped, clipped)  # (B, T)
    mask = inputs.response_mask  # (B, T)
    clipfrac = ((clipped > unclipped).float() * mask).sum() / mask.sum().clamp(min=1)
    return pg_loss, {{"pg_clipfrac": clipfrac.detach()}}


# Args on a function: the dataclass of its *_args (rft.hookspecs)
{name}.Args = {camel}Args  # type: ignore[attr-defined]


@hookimpl
def register_policy_loss_fns() -> dict[str, Any]:
    return {{"{name}": {name}}}
'''

POLICY_LOSS_TEST = '''"""{distribution}: the contract of ``{name}`` (property tests with rft's kit) and a tiny
training run that selects it by name (the installed distribution's entry point registers
it: ``pip install -e '.[test]'`` first)."""

from hypothesis import given, settings

from rft.testing.checks import check_policy_loss
from rft.testing.references import ClippedSurrogate
from rft.testing.strategies import policy_loss_inputs
from {module} import {camel}Args, {name}


@settings(max_examples=50, deadline=None, derandomize=True)
@given(policy_loss_inputs())
def test_{name}_keeps_the_policy_loss_contract(inputs):
    # reference=: the clipped-surrogate maths too (values, the clip region's zero gradient,
    # the gradient's sign); drop it, or name another family, when the loss is not PPO's
    args = {camel}Args()
    check_policy_loss({name}, args, inputs, reference=ClippedSurrogate(clip_range=args.clip_range))


def test_{name}_trains_by_name(rft_run):
    outcome = rft_run({{"algorithm.policy_loss_fn": "{name}"}}, steps=2)
    assert len(outcome.metrics) == 2
    assert all("actor/pg_clipfrac" in step for step in outcome.metrics)
'''

ADVANTAGE = '''"""{distribution}: the ``{name}`` advantage function for rft.

Select it with ``algorithm.advantage_fn: {name}`` (arguments in
``algorithm.advantage_fn_args``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from rft import AdvantageInputs, hookimpl
from rft.group_ops import group_ids, group_stats, outcome_scores


@dataclass
class {camel}Args:
    """Arguments of ``{name}`` (``algorithm.advantage_fn_args``)."""

    epsilon: float = 1e-6
    """Added to the group's standard deviation before dividing."""


def {name}(inputs: AdvantageInputs, args: {camel}Args) -> tuple[torch.Tensor, torch.Tensor]:
    """Group-normalised outcome advantage: with ``r_i = Σ_t token_level_rewards_it`` and
    ``μ_g``, ``σ_g`` the mean and standard deviation of ``r`` over rollout ``i``'s group::

        A_it = (r_i − μ_g) / (σ_g + ε) · response_mask_it      (0 for a group of one)

    ``returns`` is the same tensor; both ``(B, T)``, without gradient.
    """
    with torch.no_grad():
        scores = outcome_scores(inputs.token_level_rewards)  # (B,)
        counts, mean, std = group_stats(scores, group_ids(inputs.index, scores.device))
        normalised = torch.where(counts > 1, (scores - mean) / (std + args.epsilon),
                                 torch.zeros_like(scores))  # (B,)
        advantages = normalised.unsqueeze(-1) * inputs.response_mask  # (B, T)
    return advantages, advantages


# Args on a function: the dataclass of its *_args (rft.hookspecs)
{name}.Args = {camel}Args  # type: ignore[attr-defined]


@hookimpl
def register_advantage_fns() -> dict[str, Any]:
    return {{"{name}": {name}}}
'''

ADVANTAGE_TEST = '''"""{distribution}: the contract of ``{name}`` (property tests with rft's kit) and a tiny
training run that selects it by name (the installed distribution's entry point registers
it: ``pip install -e '.[test]'`` first)."""

from hypothesis import given, settings

from rft.testing.checks import check_advantage
from rft.testing.strategies import advantage_inputs
from {module} import {camel}Args, {name}


@settings(max_examples=50, deadline=None, derandomize=True)
@given(advantage_inputs())
def test_{name}_keeps_the_advantage_contract(inputs):
    check_advantage({name}, {camel}Args(), inputs, shift_invariant=True)


def test_{name}_trains_by_name(rft_run):
    outcome = rft_run({{"algorithm.advantage_fn": "{name}"}}, steps=2)
    assert len(outcome.metrics) == 2
'''

REWARD = '''"""{distribution}: the ``{name}`` reward function for rft.

Select it with ``default_reward_fn_type: {name}`` on a taskset (arguments in the
taskset's ``reward_fn_args``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rft import hookimpl


@dataclass
class {camel}Args:
    """Arguments of ``{name}`` (a taskset's ``reward_fn_args``)."""

    scale: float = 1.0
    """Reward of an exact answer."""


def {name}(response: str, truth: Any, args: {camel}Args) -> dict[str, float]:
    """``accuracy = scale`` when the response, stripped, equals the ground truth, else 0."""
    return {{"accuracy": args.scale * float(response.strip() == str(truth).strip())}}


# Args on a function: the dataclass of its *_args (rft.hookspecs)
{name}.Args = {camel}Args  # type: ignore[attr-defined]


@hookimpl
def register_reward_fns() -> dict[str, Any]:
    return {{"{name}": {name}}}
'''

REWARD_TEST = '''"""{distribution}: the contract of ``{name}`` (property tests with rft's kit) and a tiny
training run that selects it by name (the installed distribution's entry point registers
it: ``pip install -e '.[test]'`` first)."""

from hypothesis import given, settings

from rft.testing.checks import check_reward
from rft.testing.strategies import reward_cases
from {module} import {camel}Args, {name}


@settings(max_examples=100, deadline=None, derandomize=True)
@given(reward_cases())
def test_{name}_keeps_the_reward_contract(case):
    check_reward({name}, {camel}Args(), case)


def test_{name}_exact_answer():
    assert {name}(" 4 ", "4", {camel}Args(scale=2.0)) == {{"accuracy": 2.0}}


def test_{name}_trains_by_name(rft_run):
    taskset = "buffer.explorer_input.taskset"
    outcome = rft_run({{f"{{taskset}}.default_reward_fn_type": "{name}"}}, steps=2)
    assert len(outcome.rewards()) == 2
'''

WORKFLOW = '''"""{distribution}: the ``{name}`` workflow for rft.

Select it with ``default_workflow_type: {name}`` on a taskset (arguments in the
taskset's ``workflow_args``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rft import hookimpl
from rft.experience import Experience
from rft.workflow import Workflow


@dataclass
class {camel}Args:
    """Arguments of ``{name}`` (a taskset's ``workflow_args``)."""

    system_prompt: str | None = None
    """A system message put before the task's messages."""


class {camel}(Workflow):
    """Ask the task once (``repeat_times`` samples) and score every response with the
    taskset's reward function."""

    Args = {camel}Args

    def run(self) -> list[Experience]:
        args = self.args or {camel}Args()
        messages = self.task.chat_messages()
        if args.system_prompt:
            messages.insert(0, {{"role": "system", "content": args.system_prompt}})
        experiences = self.model.chat(messages, n=self.task.repeat_times, **self.task.sampling)
        for experience in experiences:
            self.score(experience, self.response_text(experience))
        return experiences


@hookimpl
def register_workflows() -> dict[str, Any]:
    return {{"{name}": {camel}}}
'''

WORKFLOW_TEST = '''"""{distribution}: the contract of ``{name}`` (rft's kit) and a tiny training run that
selects it by name (the installed distribution's entry point registers it:
``pip install -e '.[test]'`` first)."""

from hypothesis import given, settings

from rft.testing.checks import check_workflow
from rft.testing.strategies import workflow_tasks
from {module} import {camel}, {camel}Args


@settings(max_examples=5, deadline=None, derandomize=True)
@given(workflow_tasks())
def test_{name}_keeps_the_workflow_contract(rft_model, task):
    check_workflow({camel}, {camel}Args(system_prompt="Answer."), task, rft_model)


def test_{name}_trains_by_name(rft_run):
    taskset = "buffer.explorer_input.taskset"
    outcome = rft_run({{f"{{taskset}}.default_workflow_type": "{name}"}}, steps=2)
    assert len(outcome.rewards()) == 2
'''

PYPROJECT = '''[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "{distribution}"
version = "0.1.0"
description = "{kind_label} {name} for rft"
readme = "README.md"
requires-python = ">=3.11"
dependencies = ["{requirement}"]

[project.optional-dependencies]
test = ["{core}[testing]"]

[project.entry-points.rft]
{name} = "{module}"

[tool.setuptools]
packages = ["{module}"]
'''

README = '''# {distribution}

The {kind_label} `{name}` for [rft](https://pypi.org/project/rft-framework/), registered
through the `rft` entry-point group.

```bash
pip install -e ".[test]"      # the plugin, rft and rft's test kit
pytest                        # property tests of the contract, a tiny run
rft plugins                   # lists {distribution} and the name it registers
```

Select it in a config with {selector}.
'''


@dataclass(frozen=True)
class Kind:
    """One kind of plugin the scaffold writes."""

    label: str
    module: str
    test: str
    selector: str


KINDS: dict[str, Kind] = {
    "policy_loss": Kind("policy loss", POLICY_LOSS, POLICY_LOSS_TEST,
                        "`algorithm.policy_loss_fn: {name}`"),
    "advantage": Kind("advantage function", ADVANTAGE, ADVANTAGE_TEST,
                      "`algorithm.advantage_fn: {name}`"),
    "reward": Kind("reward function", REWARD, REWARD_TEST,
                   "`default_reward_fn_type: {name}` on a taskset"),
    "workflow": Kind("workflow", WORKFLOW, WORKFLOW_TEST,
                     "`default_workflow_type: {name}` on a taskset"),
}
"""What ``rft new-plugin`` can write, by ``KIND``."""


def scaffold(kind: str, name: str, parent: str | Path, core_version: str) -> Path:
    """Write the distribution of a ``kind`` plugin called ``name`` under ``parent``;
    return its folder.

    :raises RftError: an unknown kind, a bad name, or a folder that already exists.
    """
    if kind not in KINDS:
        raise RftError(f"new-plugin: unknown kind {kind!r}; choose one of "
                       + ", ".join(sorted(KINDS)))
    names = Names.of(name)
    spec = KINDS[kind]
    root = Path(parent) / names.distribution
    if root.exists():
        raise RftError(f"new-plugin: {root} already exists")
    fill: Callable[[str], str] = lambda text: text.format(  # noqa: E731
        name=names.name, camel=names.camel, module=names.module,
        distribution=names.distribution, requirement=core_requirement(core_version),
        core=CORE_DISTRIBUTION, kind_label=spec.label,
        selector=spec.selector.format(name=names.name))
    files = {
        "pyproject.toml": fill(PYPROJECT),
        "README.md": fill(README),
        f"{names.module}/__init__.py": fill(spec.module),
        f"tests/test_{names.name}.py": fill(spec.test),
    }
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


__all__ = ["KINDS", "NEXT_COMMANDS", "Names", "core_requirement", "next_line", "scaffold"]
