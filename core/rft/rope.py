"""``model.rope_scaling`` / ``model.rope_theta``: RoPE overrides of a checkpoint's config.

The trainer (:func:`rft.trainer.models.load_causal_lm`), the ``hf`` engine and the vLLM
engine (``hf_overrides``) apply the same overrides, so engine and trainer log-probs agree.
transformers >= 5 keeps both in ``config.rope_parameters``
(``{"rope_type": ..., "rope_theta": ..., "factor": ...}``); older versions have
``rope_scaling`` and ``rope_theta`` attributes. Overrides are merged into what the
checkpoint has.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def rope_overrides(hf_config: Any, rope_scaling: Mapping[str, Any] | None,
                   rope_theta: float | None) -> dict[str, Any]:
    """The config attributes to set on ``hf_config`` (a ``PretrainedConfig``) for the
    overrides; ``{}`` when both are ``None``. A ``type`` key of ``rope_scaling`` is read as
    ``rope_type`` (the older spelling)."""
    if not rope_scaling and rope_theta is None:
        return {}
    scaling = dict(rope_scaling or {})
    if "type" in scaling and "rope_type" not in scaling:
        scaling["rope_type"] = scaling.pop("type")
    if hasattr(hf_config, "rope_parameters"):  # transformers >= 5
        params = dict(getattr(hf_config, "rope_parameters", None) or {})
        params.update(scaling)
        if rope_theta is not None:
            params["rope_theta"] = float(rope_theta)
        return {"rope_parameters": params}
    overrides: dict[str, Any] = {}
    if scaling:
        overrides["rope_scaling"] = scaling
    if rope_theta is not None:
        overrides["rope_theta"] = float(rope_theta)
    return overrides


def apply_rope(hf_config: Any, rope_scaling: Mapping[str, Any] | None,
               rope_theta: float | None) -> dict[str, Any]:
    """Set the overrides of :func:`rope_overrides` on ``hf_config``; returns them."""
    overrides = rope_overrides(hf_config, rope_scaling, rope_theta)
    for name, value in overrides.items():
        setattr(hf_config, name, value)
    return overrides
