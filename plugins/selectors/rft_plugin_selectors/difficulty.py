"""Selectors that use task difficulty: a fixed easy-to-hard curriculum, and an adaptive
one that keeps choosing tasks whose estimated pass rate is near a target.

Both read ``task_selector.feature_keys`` (numeric row fields) and take
``task_selector.kwargs`` under Trinity-RFT's names as well as rft's own.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, fields
from typing import Any, Literal

import numpy as np

from rft.buffer.selector import TaskSelector
from rft.builtin.selectors import SequentialSelector


def difficulty_of(row: dict[str, Any], keys: list[str], where: str) -> float:
    """Mean of the row's numeric ``keys`` (higher = harder)."""
    return sum(feature_values(row, keys, where)) / len(keys)


def feature_values(row: dict[str, Any], keys: list[str], where: str) -> list[float]:
    """The row's numeric ``keys``, in order; a one-line error names a missing or
    non-numeric one."""
    values = []
    for key in keys:
        value = row.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{where}: feature {key!r} is {value!r}, expected a number")
        values.append(float(value))
    return values


# ---- offline_easy2hard ----------------------------------------------------------------

@dataclass
class EasyToHardArgs:
    """Arguments of ``offline_easy2hard`` (``task_selector.kwargs``; Trinity-RFT's selector
    takes none)."""

    higher_is_easier: bool = True
    """Trinity-RFT's reading: higher feature values mean easier tasks (e.g. a reference
    model's pass rate), so the highest come first. ``false``: higher means harder (e.g. a
    difficulty level, a length); the lowest come first."""


class OfflineEasyToHardSelector(SequentialSelector):
    """Tasks sorted once by their ``feature_keys`` values — compared as tuples, the first
    key first — easy first, then taken in order, epoch after epoch.

    Ties: with ``higher_is_easier`` the later row comes first (as Trinity-RFT's reversed
    sort), else the earlier one.
    """

    Args = EasyToHardArgs

    def __init__(self, dataset_size: int, seed: int = 42, args: EasyToHardArgs | None = None,
                 **features: Any) -> None:
        super().__init__(dataset_size, seed, args or EasyToHardArgs(), **features)
        if not self.rows or not self.feature_keys:
            raise ValueError("offline_easy2hard needs task_selector.feature_keys naming a "
                             "numeric difficulty field of the taskset")
        keys = [tuple(feature_values(dict(row), self.feature_keys, f"row {i}")) + (i,)
                for i, row in enumerate(self.rows)]
        self._order = [key[-1] for key in sorted(keys, reverse=self.args.higher_is_easier)]

    def order(self, epoch: int) -> list[int]:
        return self._order


# ---- difficulty_based -------------------------------------------------------------------

_RFT_ARGS = {"target_pass_rate": 0.5, "temperature": 0.1, "prior_weight": 1.0}
"""rft's own arguments of ``difficulty_based`` and their defaults."""
_TRINITY_ARGS = {"target_reward": 1.0, "tau": 1.0, "do_sample": False, "m": 16,
                 "lamb": 0.2, "rho": 0.2, "adaptive_rho": False}
"""Trinity-RFT's arguments of ``difficulty_based`` and their defaults."""


@dataclass
class DifficultyArgs:
    """Arguments of ``difficulty_based`` (``task_selector.kwargs``).

    Two estimators share the name. rft's *prior mean* (``target_pass_rate``,
    ``temperature``, ``prior_weight``) and Trinity-RFT's *Beta interpolation* (``m``,
    ``lamb``, ``rho``, ``adaptive_rho``, ``target_reward``, ``tau``, ``do_sample``).
    ``estimator: auto`` picks Trinity-RFT's when any of its arguments is given, or when
    none of rft's is and there are exactly two ``feature_keys`` (Trinity-RFT's requirement);
    mixing both sets is an error. Unset arguments take their estimator's defaults.
    """

    estimator: Literal["auto", "prior_mean", "beta_interpolation"] = "auto"
    """Which estimator (see above)."""
    target_pass_rate: float | None = None
    """rft: tasks whose estimated pass rate is closest to this are preferred (0.5)."""
    temperature: float | None = None
    """rft: softness of the preference, ``weight ∝ exp(−|p − target| / temperature)`` (0.1)."""
    prior_weight: float | None = None
    """rft: pseudo-observations given to the prior estimate of each task (1)."""
    target_reward: float | None = None
    """Trinity-RFT: the pass rate to aim at (1.0)."""
    tau: float | None = None
    """Trinity-RFT: temperature of ``softmax(−|p − target| / tau)``; ``0``: the closest
    tasks, greedily (1.0)."""
    do_sample: bool | None = None
    """Trinity-RFT: draw each pass rate from its Beta posterior instead of its mean (false)."""
    m: int | None = None
    """Trinity-RFT: rollouts per task an observed mean reward counts for (16)."""
    lamb: float | None = None
    """Trinity-RFT: forgetting rate of the Beta counts per update (0.2)."""
    rho: float | None = None
    """Trinity-RFT: weight of the interpolated pseudo-counts (0.2)."""
    adaptive_rho: bool | None = None
    """Trinity-RFT: halve ``rho`` when the interpolation's mean error on the observed tasks
    reaches 0.25 (false)."""

    def __post_init__(self) -> None:
        ours = [name for name in _RFT_ARGS if getattr(self, name) is not None]
        theirs = [name for name in _TRINITY_ARGS if getattr(self, name) is not None]
        if ours and theirs:
            raise ValueError(f"difficulty_based: {', '.join(ours)} (rft's estimator) and "
                             f"{', '.join(theirs)} (Trinity-RFT's) cannot be combined")
        if self.estimator == "prior_mean" and theirs:
            raise ValueError(f"difficulty_based: estimator prior_mean does not take "
                             f"{', '.join(theirs)}")
        if self.estimator == "beta_interpolation" and ours:
            raise ValueError(f"difficulty_based: estimator beta_interpolation does not take "
                             f"{', '.join(ours)}")
        if self.tau is not None and self.tau < 0:
            raise ValueError(f"tau must be >= 0, got {self.tau}")
        if self.temperature is not None and self.temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}")

    def given(self) -> set[str]:
        """The argument names that were set."""
        return {f.name for f in fields(self) if f.name != "estimator"
                and getattr(self, f.name) is not None}

    def value(self, name: str) -> Any:
        """The argument, or its estimator's default."""
        own = getattr(self, name)
        return own if own is not None else {**_RFT_ARGS, **_TRINITY_ARGS}[name]


class DifficultyBasedSelector(TaskSelector):
    """Adaptive curriculum: each batch favours tasks whose estimated pass rate is near a
    target; the explorer's mean reward per explored task updates the estimates.

    *Prior mean* (rft): ``p_i = (prior_weight · p0_i + Σ rewards_i) / (prior_weight + n_i)``
    with ``p0_i`` from the feature keys (their mean is a difficulty, higher = harder,
    scaled to [0, 1] and flipped) or 0.5; distinct tasks drawn with weights
    ``exp(−|p_i − target_pass_rate| / temperature)``.

    *Beta interpolation* (Trinity-RFT): two feature keys are two reference pass rates
    ``(a_i, b_i)`` of each task; each task has Beta counts ``(α_i, β_i)``, starting at 1.
    An update with mean rewards ``r`` on tasks ``S`` estimates the policy's capability
    ``c`` between the references (``(mean r − mean a_S) / (mean b_S − mean a_S)``,
    exponentially smoothed with 0.9) and interpolates every task's pass rate
    ``p̃_i = clip(a_i + c (b_i − a_i), 0, 1)`` (the observed rate on ``S``); then
    ``α ← (1 − lamb) α + lamb + (1 − rho) m r + rho m p̃`` and likewise ``β`` with
    ``1 − r`` and ``1 − p̃`` (``r`` = 0 off ``S``). Batches take the pass rate ``α/(α+β)``
    (or a Beta draw with ``do_sample``) and draw distinct tasks from
    ``softmax(−|p − target_reward| / tau)``, or the closest ones with ``tau: 0``.

    Both are deterministic for a seed and resume exactly from :meth:`state_dict`.
    """

    Args = DifficultyArgs

    def __init__(self, dataset_size: int, seed: int = 42, args: DifficultyArgs | None = None,
                 **features: Any) -> None:
        super().__init__(dataset_size, seed, args or DifficultyArgs(), **features)
        self.batches = 0
        self.consumed = 0
        self.beta = self._uses_beta()
        if self.beta:
            self._init_beta()
        else:
            self._init_prior()

    def _uses_beta(self) -> bool:
        if self.args.estimator != "auto":
            return self.args.estimator == "beta_interpolation"
        given = self.args.given()
        if given & set(_TRINITY_ARGS):
            return True
        return not (given & set(_RFT_ARGS)) and len(self.feature_keys) == 2

    # ---- rft's prior mean ---------------------------------------------------------------

    def _init_prior(self) -> None:
        if self.rows and self.feature_keys:
            raw = [difficulty_of(dict(r), self.feature_keys, f"row {i}")
                   for i, r in enumerate(self.rows)]
            low, high = min(raw), max(raw)
            span = (high - low) or 1.0
            self.prior = [1.0 - (d - low) / span for d in raw]
        else:
            self.prior = [0.5] * self.dataset_size
        self.reward_sum = [0.0] * self.dataset_size
        self.count = [0] * self.dataset_size

    def pass_rate(self, index: int) -> float:
        """The estimated pass rate of task ``index`` (the Beta mean in Trinity-RFT's mode)."""
        if self.beta:
            return float(self.alphas[index] / (self.alphas[index] + self.betas[index]))
        w = self.args.value("prior_weight")
        return (w * self.prior[index] + self.reward_sum[index]) / (w + self.count[index])

    def _prior_batch(self, batch_size: int) -> list[int]:
        rng = random.Random(f"{self.seed}:{self.batches}")
        target, temperature = self.args.value("target_pass_rate"), self.args.value("temperature")
        weights = [math.exp(-abs(self.pass_rate(i) - target) / temperature)
                   for i in range(self.dataset_size)]
        chosen: list[int] = []
        available = list(range(self.dataset_size))
        while len(chosen) < batch_size:
            if not available:  # more tasks than the taskset: start another round
                available = list(range(self.dataset_size))
            pick = rng.choices(range(len(available)), weights=[weights[i] for i in available])[0]
            chosen.append(available.pop(pick))
        return chosen

    # ---- Trinity-RFT's Beta interpolation -----------------------------------------------

    def _init_beta(self) -> None:
        if not self.rows or len(self.feature_keys) != 2:
            raise ValueError("difficulty_based (Trinity-RFT's estimator) needs exactly 2 "
                             "task_selector.feature_keys (two reference pass rates per task), "
                             f"got {len(self.feature_keys)}")
        self.features = np.array([feature_values(dict(r), self.feature_keys, f"row {i}")
                                  for i, r in enumerate(self.rows)], dtype=float)  # (N, 2)
        self.alphas = np.ones(self.dataset_size)
        self.betas = np.ones(self.dataset_size)
        self.cap_coef: float | None = None
        self.rho = float(self.args.value("rho"))

    def _beta_update(self, indices: list[int], scores: list[float]) -> None:
        m, lamb = self.args.value("m"), self.args.value("lamb")
        observed = np.array(scores, dtype=float)
        anchors = self.features[indices].mean(axis=0)  # (2,)
        estimate = (observed.mean() - anchors[0]) / (anchors[1] - anchors[0] + 1e-6)
        self.cap_coef = (float(estimate) if self.cap_coef is None
                         else 0.9 * self.cap_coef + 0.1 * float(estimate))
        low, high = self.features[:, 0], self.features[:, 1]
        interpolated = np.clip(low + (high - low) * self.cap_coef, 0.0, 1.0)  # (N,)
        error = float(np.abs(interpolated[indices] - observed).mean())
        if self.args.value("adaptive_rho") and error >= 0.25:
            self.rho *= 0.5
        interpolated[indices] = observed
        successes = np.zeros(self.dataset_size)
        failures = np.zeros(self.dataset_size)
        successes[indices] = observed * m
        failures[indices] = (1.0 - observed) * m
        self.alphas = ((1 - lamb) * self.alphas + lamb + (1 - self.rho) * successes
                       + self.rho * interpolated * m)
        self.betas = ((1 - lamb) * self.betas + lamb + (1 - self.rho) * failures
                      + self.rho * (1.0 - interpolated) * m)

    def _beta_batch(self, batch_size: int) -> list[int]:
        rng = np.random.default_rng([self.seed, self.consumed])
        if self.args.value("do_sample"):
            rates = rng.beta(self.alphas, self.betas)
        else:
            rates = self.alphas / (self.alphas + self.betas)
        scores = -np.abs(self.args.value("target_reward") - rates)  # (N,)
        tau = self.args.value("tau")
        chosen: list[int] = []
        while len(chosen) < batch_size:  # more tasks than the taskset: another round
            take = min(batch_size - len(chosen), self.dataset_size)
            if tau == 0:
                keys = scores
            else:  # Gumbel top-k: distinct draws, each ∝ softmax(scores / tau)
                keys = scores / tau + rng.gumbel(size=self.dataset_size)
            chosen += np.argsort(-keys, kind="stable")[:take].tolist()
        return chosen

    # ---- TaskSelector -------------------------------------------------------------------

    def next_batch(self, batch_size: int) -> list[int]:
        chosen = self._beta_batch(batch_size) if self.beta else self._prior_batch(batch_size)
        self.batches += 1
        self.consumed += batch_size
        return chosen

    def update(self, indices: list[int], scores: list[float]) -> None:
        if not indices:
            return
        if self.beta:
            self._beta_update(list(indices), list(scores))
            return
        for index, score in zip(indices, scores, strict=True):
            self.reward_sum[index] += score
            self.count[index] += 1

    @property
    def epoch(self) -> int:
        return self.consumed // self.dataset_size

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"batches": self.batches, "consumed": self.consumed}
        if self.beta:
            state.update(alphas=self.alphas.tolist(), betas=self.betas.tolist(),
                         cap_coef=self.cap_coef, rho=self.rho)
        else:
            state.update(reward_sum=self.reward_sum, count=self.count)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.batches, self.consumed = int(state["batches"]), int(state["consumed"])
        if self.beta:
            self.alphas = np.array(state["alphas"], dtype=float)
            self.betas = np.array(state["betas"], dtype=float)
            self.cap_coef = state["cap_coef"]
            self.rho = float(state["rho"])
        else:
            self.reward_sum, self.count = list(state["reward_sum"]), list(state["count"])
