"""Building an inference engine and its sampling defaults from a config.

Used for the rollout model (every mode) and, through a config whose rollout model is the
auxiliary one (:func:`rft.explorer.auxiliary.engine_config`), for auxiliary models.
"""

from __future__ import annotations

import os
from typing import Any

from rft.config.schema import RftConfig
from rft.explorer.engine import InferenceEngine, SamplingArgs


def build_engine(config: RftConfig, engine_cls: type[InferenceEngine]) -> InferenceEngine:
    """The rollout engine of a stage (an engine class may provide ``from_config``)."""
    factory = getattr(engine_cls, "from_config", None)
    if factory is not None:
        return factory(config)
    m, rm = config.model, config.explorer.rollout_model
    return engine_cls(
        rm.model_path or m.model_path, dtype=rm.dtype, trust_remote_code=m.trust_remote_code,
        max_model_len=rm.max_model_len or m.max_model_len,
        max_prompt_tokens=rm.max_prompt_tokens or m.max_prompt_tokens,
        max_response_tokens=rm.max_response_tokens or m.max_response_tokens,
        enable_prompt_truncation=(m.enable_prompt_truncation if rm.enable_prompt_truncation is None
                                  else rm.enable_prompt_truncation),
        chat_template=rm.chat_template or m.custom_chat_template or _read_template(m.chat_template_path),
        enable_thinking=rm.enable_thinking if rm.enable_thinking is not None else m.enable_thinking,
        seed=rm.seed,
    )


def _read_template(path: str | None) -> str | None:
    if not path:
        return None
    with open(os.path.expanduser(path), encoding="utf-8") as handle:
        return handle.read()


def default_sampling(config: RftConfig) -> SamplingArgs:
    """Sampling defaults from the ``model`` section, with the rollout model's overrides."""
    m, rm = config.model, config.explorer.rollout_model

    def pick(override: Any, default: Any) -> Any:
        return default if override is None else override

    return SamplingArgs(temperature=m.temperature, top_p=m.top_p, top_k=m.top_k,
                        max_tokens=pick(rm.max_response_tokens, m.max_response_tokens),
                        min_tokens=pick(rm.min_response_tokens, m.min_response_tokens),
                        repetition_penalty=pick(rm.repetition_penalty, m.repetition_penalty),
                        ignore_eos=rm.ignore_eos)
