"""Building an inference engine and its sampling defaults from a config.

Used for the rollout model (every mode) and, through a config whose rollout model is the
auxiliary one (:func:`rft.rollout.auxiliary.engine_config`), for auxiliary models.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import Any

from rft.adapter import AdapterWeights
from rft.chat_template import model_chat_template
from rft.config.convert import to_dataclass_checked
from rft.config.schema import RftConfig
from rft.engines.engine import InferenceEngine, SamplingArgs
from rft.plugins import args_type_of


def build_engine(config: RftConfig, engine_cls: type[InferenceEngine]) -> InferenceEngine:
    """The rollout engine of a stage (an engine class may provide ``from_config``). With
    ``model.lora_configs[0].path`` it serves that adapter from the start (model version 0);
    a fresh adapter (``B = 0``) is the base model, which it serves as it is."""
    engine = _build(config, engine_cls)
    lora = config.model.lora_configs[0] if config.model.lora_configs else None
    if lora is not None and lora.path:
        adapter = AdapterWeights.load(os.path.expanduser(lora.path),
                                      key="model.lora_configs[0].path", name=lora.name)
        engine.update_adapter(adapter, version=0)
    return engine


def _build(config: RftConfig, engine_cls: type[InferenceEngine]) -> InferenceEngine:
    """``engine_cls.from_config(config)`` where the class has it; otherwise its constructor
    with the model path and the base settings, plus the fields of ``extra_engine_args``
    built into the class's ``Args`` dataclass (:func:`engine_arguments`)."""
    factory = getattr(engine_cls, "from_config", None)
    if factory is not None:
        return factory(config)
    m, rm = config.model, config.explorer.rollout_model
    rope: dict[str, Any] = {}  # model.rope_scaling / rope_theta, as the trainer loads it
    if m.rope_scaling:
        rope["rope_scaling"] = m.rope_scaling
    if m.rope_theta is not None:
        rope["rope_theta"] = m.rope_theta
    # an engine class is built from the model path and settings beyond the base's keywords
    constructor: Callable[..., InferenceEngine] = engine_cls
    return constructor(
        rm.model_path or m.model_path, dtype=rm.dtype, trust_remote_code=m.trust_remote_code,
        **rope,
        max_model_len=rm.max_model_len or m.max_model_len,
        max_prompt_tokens=rm.max_prompt_tokens or m.max_prompt_tokens,
        max_response_tokens=rm.max_response_tokens or m.max_response_tokens,
        enable_prompt_truncation=(m.enable_prompt_truncation if rm.enable_prompt_truncation is None
                                  else rm.enable_prompt_truncation),
        chat_template=model_chat_template(config),
        enable_thinking=rm.enable_thinking if rm.enable_thinking is not None else m.enable_thinking,
        seed=rm.seed,
        **engine_arguments(engine_cls, rm.extra_engine_args),
    )


EXTRA_ARGS_KEY = "explorer.rollout_model.extra_engine_args"


def engine_arguments(engine_cls: type[InferenceEngine],
                     extra_engine_args: dict[str, Any] | None) -> dict[str, Any]:
    """The keyword arguments an engine class declaring an ``Args`` dataclass takes from
    ``extra_engine_args`` (every field of ``Args``, defaults filled in; ``{}`` for a class
    without one). Validation has checked the keys against ``Args``.

    :raises RftError: an unknown key or a bad value (one line naming it)."""
    args_type = args_type_of(engine_cls)
    if args_type is None or not dataclasses.is_dataclass(args_type):
        return {}
    built = to_dataclass_checked(args_type, extra_engine_args, EXTRA_ARGS_KEY)
    return {f.name: getattr(built, f.name) for f in dataclasses.fields(built) if f.init}


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
