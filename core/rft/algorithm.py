"""Algorithm presets: what ``algorithm.algorithm_type`` selects.

An algorithm plugin registers one :class:`AlgorithmPreset` per name through
``register_algorithms``. Validation copies every preset default into the ``algorithm``
section where the user left the field unset (``None``); a value the user wrote wins.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from rft.experience import Experience


class BatchLayout(Protocol):
    """How the rows of a training batch belong together (an algorithm's batch layout).

    The trainer calls :meth:`arrange` on every batch it gets, then splits it into
    mini-batches and micro-batches of whole *units*: ``unit_size`` consecutive rows that
    are never separated (a preference pair is 2 rows: chosen, rejected).
    """

    @property
    def unit_size(self) -> int:
        """Rows per unit."""

    def arrange(self, experiences: Sequence[Experience]) -> list[Experience]:
        """The batch in training order, each unit's rows consecutive.

        :raises rft.errors.RftError: rows that do not form whole units (one line naming
            the culprit).
        """


@dataclass(frozen=True)
class SingleRows:
    """The default layout: every row is a unit of its own, in the order given."""

    unit_size: int = 1
    """Rows per unit."""

    def arrange(self, experiences: Sequence[Experience]) -> list[Experience]:
        """``experiences`` unchanged."""
        return list(experiences)


@dataclass(frozen=True)
class AlgorithmPreset:
    """Defaults and flags of one algorithm."""

    advantage_fn: str | None = None
    """Default advantage function name; ``None`` when the algorithm uses none (SFT, DPO)."""
    policy_loss_fn: str = "ppo"
    """Default policy loss function name."""
    kl_loss_fn: str = "none"
    """Default KL estimator used as a loss term (``none``: no KL loss)."""
    kl_penalty_fn: str = "none"
    """Default KL estimator subtracted from token-level rewards (``none``: no penalty)."""
    entropy_loss_fn: str = "none"
    """Default entropy loss function name."""
    sample_strategy: str = "default"
    """Default sample strategy name."""
    repeat_times: int = 1
    """Default rollouts per task."""
    min_repeat_times: int = 1
    """Smallest ``repeat_times`` the algorithm works with (group baselines need 2)."""
    fixed_repeat_times: int | None = None
    """When set, ``repeat_times`` is forced to this value (DPO: a chosen and a rejected)."""
    use_critic: bool = False
    """The trainer keeps a value model (PPO)."""
    use_reference: bool = False
    """The algorithm's defaults use a reference model: a KL term with a non-zero
    coefficient, or a policy loss reading ``ref_log_prob`` (DPO). Descriptive: the trainer
    holds a reference model exactly when the run's loss needs one
    (:attr:`rft.config.plan.LossPlan.needs_ref`), so ``kl_loss_fn: none`` (or
    ``kl_coef: 0``) without a KL penalty trains without it, whatever this flag says."""
    advantage_in_explorer: bool = False
    """Advantages are computed by an experience operator in the explorer, not the trainer."""
    explorer_operator: str | None = None
    """An experience operator (registered name) that computes the algorithm's advantages
    in the explorer over whole multi-step episodes: derivation appends it to
    ``data_processor.experience_pipeline.operators`` when that list names no operator of
    that name (its args: ``algorithm.advantage_fn_args`` when ``advantage_fn`` has the same
    name), as Trinity-RFT runs such algorithms without listing it. ``None``: none."""
    reward_baseline: Literal["none", "greedy"] = "none"
    """Baseline the explorer attaches to each training rollout as ``info["reward_baseline"]``:
    ``greedy`` is the reward of one greedy (temperature 0) response to the same task
    (ReMax); ``none``: no baseline."""
    train_only: bool = False
    """The algorithm learns from a fixed dataset: no explorer (SFT, DPO)."""
    experience_format: Literal["rollout", "sft", "dpo"] = "rollout"
    """What one training example looks like: a rollout (rewards → advantages before the
    update), a prompt/response, a preference pair (both learn from the dataset as it is)."""
    batch_layout: BatchLayout = SingleRows()
    """How the rows of a training batch belong together (:class:`BatchLayout`); the
    trainer keeps each unit whole."""
    default_args: dict[str, dict[str, Any]] | None = None
    """Default ``*_args`` per algorithm field, e.g. ``{"advantage_fn_args": {"epsilon": 1e-6}}``."""


def rl_preset(advantage_fn: str, *, group: bool = True, **changes: Any) -> AlgorithmPreset:
    """The common online-RL preset, with ``changes`` applied.

    Clipped surrogate policy loss ``ppo``, ``k2`` KL loss against a reference model, no
    KL penalty, the ``default`` entropy term and sample strategy; group baselines
    (``group=True``) need at least two rollouts per task (``repeat_times = 2``).
    """
    repeats = 2 if group else 1
    base: dict[str, Any] = {
        "advantage_fn": advantage_fn, "policy_loss_fn": "ppo", "kl_loss_fn": "k2",
        "kl_penalty_fn": "none", "entropy_loss_fn": "default", "sample_strategy": "default",
        "repeat_times": repeats, "min_repeat_times": repeats, "use_reference": True,
    }
    return AlgorithmPreset(**{**base, **changes})
