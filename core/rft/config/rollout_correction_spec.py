"""The ``algorithm.rollout_correction`` settings parsed (veRL 0.9.1's ``rollout_is`` /
``rollout_rs`` thresholds and options): what :mod:`rft.trainer.rollout_correction`
applies. Torch-free, so that config validation parses them once and names a bad value
after its dotted key (a :class:`ValueError` whose text the check reports).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from rft.config.schema import RolloutCorrectionConfig

IsLevel = Literal["token", "sequence"]
Estimator = Literal["k1", "k2", "k3"]
Reduction = Literal["token", "seq_sum", "seq_mean", "seq_max"]

RS_OPTIONS: tuple[str, ...] = (
    "token_k1", "token_k2", "token_k3", "seq_sum_k1", "seq_sum_k2", "seq_sum_k3",
    "seq_mean_k1", "seq_mean_k2", "seq_mean_k3", "seq_max_k2", "seq_max_k3")
"""The ``rollout_rs`` options (veRL's ``SUPPORTED_ROLLOUT_RS_OPTIONS``)."""


@dataclass(frozen=True)
class IsBounds:
    """Bounds of the importance weights: ``lower is None``: truncate at ``upper`` (TIS);
    else zero weights outside ``[lower, upper]`` (IcePop)."""

    upper: float
    lower: float | None = None


@dataclass(frozen=True)
class RejectionOption:
    """One ``rollout_rs`` criterion: ``reduction`` of the per-token ``estimator`` kept
    within ``[lower, upper]`` (``lower`` only for ``k1``; bounds on the ratio)."""

    name: str
    reduction: Reduction
    estimator: Estimator
    upper: float
    lower: float | None = None


@dataclass(frozen=True)
class CorrectionSpec:
    """What :func:`correct` applies (parsed from ``algorithm.rollout_correction``)."""

    rollout_is: IsLevel | None = None
    is_bounds: IsBounds = IsBounds(2.0)
    batch_normalize: bool = False
    rejection: tuple[RejectionOption, ...] = ()

    @property
    def active(self) -> bool:
        """Whether anything is applied (weights or rejection)."""
        return self.rollout_is is not None or bool(self.rejection)


# --------------------------------------------------------------------------------------
# Parsing the thresholds
# --------------------------------------------------------------------------------------


def _number(text: str, what: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"{what} {text!r} is not a number") from None


def parse_is_threshold(spec: object) -> IsBounds:
    """``2.0`` / ``"2.0"`` → TIS bound; ``"0.5_5.0"`` → IcePop ``[0.5, 5.0]``; both
    positive with ``lower ≤ upper``."""
    if isinstance(spec, bool) or not isinstance(spec, (int, float, str)):
        raise ValueError(f"must be a number or a 'lower_upper' string, got {spec!r}")
    lower: float | None = None
    if isinstance(spec, str):
        text = spec.strip()
        if not text:
            raise ValueError("must not be empty")
        if "_" in text:
            low, high = text.split("_", 1)
            lower, upper = _number(low, "lower bound"), _number(high, "upper bound")
        else:
            upper = _number(text, "threshold")
    else:
        upper = float(spec)
    if not upper > 0:
        raise ValueError(f"upper bound must be positive, got {upper}")
    if lower is not None and not 0 < lower <= upper:
        raise ValueError(f"lower bound must be positive and <= the upper bound, got {spec!r}")
    return IsBounds(upper, lower)


def parse_rejection(options: object, spec: object) -> tuple[RejectionOption, ...]:
    """``rollout_rs`` (comma separated, duplicates dropped) with ``rollout_rs_threshold``
    (one value for all, or one per option, comma separated): ``k1`` options take
    ``"lower_upper"`` or one upper ratio bound (``lower = 1/upper``); ``k2`` / ``k3``
    one positive upper bound."""
    if not isinstance(options, str):
        raise ValueError(f"rollout_rs must be a string of options, got {options!r}")
    names: list[str] = []
    for part in options.split(","):
        name = part.strip()
        if not name:
            continue
        if name not in RS_OPTIONS:
            raise ValueError(f"rollout_rs: unknown option {name!r} "
                             f"(one of {', '.join(RS_OPTIONS)})")
        if name not in names:
            names.append(name)
    if not names:
        raise ValueError("rollout_rs names no option")
    if spec is None:
        raise ValueError("rollout_rs_threshold must be set when rollout_rs is")
    if isinstance(spec, bool) or not isinstance(spec, (int, float, str)):
        raise ValueError(f"rollout_rs_threshold must be a number or a string, got {spec!r}")
    specs = ([str(spec)] if not isinstance(spec, str)
             else [s.strip() for s in spec.split(",") if s.strip()])
    if len(specs) not in (1, len(names)):
        raise ValueError(f"rollout_rs_threshold gives {len(specs)} thresholds for "
                         f"{len(names)} rollout_rs options (one, or one per option)")
    if len(specs) == 1:
        specs = specs * len(names)
    parsed: list[RejectionOption] = []
    for name, text in zip(names, specs, strict=True):
        reduction_text, estimator_text = name.rsplit("_", 1)
        reduction: Reduction = ("token" if reduction_text == "token" else
                                "seq_sum" if reduction_text == "seq_sum" else
                                "seq_mean" if reduction_text == "seq_mean" else "seq_max")
        estimator: Estimator = ("k1" if estimator_text == "k1" else
                                "k2" if estimator_text == "k2" else "k3")
        if estimator == "k1":
            if "_" in text:
                low, high = text.split("_", 1)
                lower = _number(low, f"{name} lower bound")
                upper = _number(high, f"{name} upper bound")
            else:
                upper = _number(text, f"{name} threshold")
                if upper == 0:
                    raise ValueError(f"{name}: thresholds must be positive, got {text}")
                lower = 1.0 / upper
            if lower <= 0 or upper <= 0:
                raise ValueError(f"{name}: thresholds must be positive, got {text}")
            if lower > upper:
                raise ValueError(f"{name}: lower bound above upper bound in {text!r}")
            parsed.append(RejectionOption(name, reduction, estimator, upper, lower))
        else:
            if "_" in text:
                raise ValueError(f"{name}: takes one upper bound, not {text!r}")
            upper = _number(text, f"{name} threshold")
            if upper <= 0:
                raise ValueError(f"{name}: threshold must be positive, got {text}")
            parsed.append(RejectionOption(name, reduction, estimator, upper))
    return tuple(parsed)


def spec_of(config: RolloutCorrectionConfig) -> CorrectionSpec:
    """The :class:`CorrectionSpec` of ``algorithm.rollout_correction`` (validation
    checked it: :func:`parse_correction` raises ``ValueError`` only on a config that
    did not pass :mod:`rft.config.check_algorithm`)."""
    return parse_correction(config.rollout_is, config.rollout_is_threshold,
                            config.rollout_is_batch_normalize, config.rollout_rs,
                            config.rollout_rs_threshold)


def parse_correction(rollout_is: str | None, rollout_is_threshold: object,
                     rollout_is_batch_normalize: bool, rollout_rs: str | None,
                     rollout_rs_threshold: object) -> CorrectionSpec:
    """The :class:`CorrectionSpec` of the config values (veRL's names); ``ValueError``
    naming the bad value."""
    level: IsLevel | None
    if rollout_is is None:
        level = None
    elif rollout_is == "token":
        level = "token"
    elif rollout_is == "sequence":
        level = "sequence"
    else:
        raise ValueError(f"rollout_is must be token, sequence or null, got {rollout_is!r}")
    bounds = parse_is_threshold(rollout_is_threshold) if level is not None else IsBounds(2.0)
    rejection = (parse_rejection(rollout_rs, rollout_rs_threshold)
                 if rollout_rs is not None else ())
    return CorrectionSpec(level, bounds, bool(rollout_is_batch_normalize), rejection)
