"""Auxiliary models (``explorer.auxiliary_models``): extra engines for workflows.

Each entry becomes an engine of its own (``engine_type``: ``hf``, ``vllm``, or ``external``
for a model behind an OpenAI-compatible server, set by ``external_model_config``) wrapped in a
:class:`~rft.rollout.model_wrapper.ModelWrapper` named ``name`` (or its position, ``"0"``,
``"1"``, …). Workflows get them as ``self.auxiliary_models`` and look one up with
``self.auxiliary_model("judge")``; an LLM-judge reward, for instance::

    judge = self.auxiliary_model("judge")
    (verdict,) = judge.chat([{"role": "user", "content": f"Is {answer!r} right? yes/no"}],
                            temperature=0.0)

An auxiliary model takes the ``model`` section's limits (``max_model_len``,
``max_prompt_tokens``, …) unless it sets its own, never the policy's chat template; its
weights never change. With ``enable_openai_api`` it gets an OpenAI endpoint of its own.

``engine_num > 1`` (modes ``both`` and ``explore``, which run on Ray): the model is a pool
of that many engine actors (:class:`~rft.distributed.engine_pool.EnginePool`, built by the
:data:`AuxiliaryEngineBuilder` the mode passes), its calls spread over them in turn. The
one-process modes (``colocate``, ``bench``) refuse it at validation.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from rft.config.plan import ModelPlan
from rft.config.schema import (
    AuxiliaryModelConfig,
    InferenceModelConfig,
    RftConfig,
    RolloutModelConfig,
)
from rft.errors import RftError
from rft.engines.engine import InferenceEngine, SamplingArgs
from rft.engines.engine_factory import build_engine
from rft.rollout.model_wrapper import ModelWrapper
from rft.endpoint.settings import EndpointSettings
from rft.engines.reply_parsing import reply_parser_of

AuxiliaryEngineBuilder = Callable[[RftConfig, type[InferenceEngine], int], InferenceEngine]
"""Makes an auxiliary model's engine from its engine config (:func:`engine_config`), the
engine plugin's class and the model's ``engine_num`` (:mod:`rft.distributed.engine_pool`
makes a pool of actors for ``engine_num > 1``)."""


def auxiliary_name(aux: AuxiliaryModelConfig, index: int) -> str:
    """The name workflows look the model up by: ``name``, else its position."""
    return aux.name if aux.name is not None else str(index)


def engine_config(config: RftConfig, aux: AuxiliaryModelConfig) -> RftConfig:
    """A copy of ``config`` whose rollout model is ``aux``: what an engine's builder reads
    (``model.model_path`` is the auxiliary model's, the policy's chat template and LoRA
    adapter are dropped, ``model.external_model`` is the auxiliary model's
    ``external_model_config``)."""
    fields = {f.name: getattr(aux, f.name) for f in dataclasses.fields(InferenceModelConfig)}
    model = dataclasses.replace(config.model, model_path=aux.model_path or "",
                                custom_chat_template=None, chat_template_path=None,
                                lora_configs=None, external_model=aux.external_model_config)
    explorer = dataclasses.replace(config.explorer, rollout_model=RolloutModelConfig(**fields))
    return dataclasses.replace(config, model=model, explorer=explorer)


def default_sampling(config: RftConfig, aux: AuxiliaryModelConfig) -> SamplingArgs:
    """Sampling defaults of an auxiliary model: its own limits, else the ``model`` section's;
    temperature 1 (a judge asks for 0 itself)."""
    m = config.model

    def pick(own: Any, inherited: Any) -> Any:
        return inherited if own is None else own

    return SamplingArgs(max_tokens=pick(aux.max_response_tokens, m.max_response_tokens),
                        min_tokens=pick(aux.min_response_tokens, 0) or 0,
                        repetition_penalty=pick(aux.repetition_penalty, 1.0),
                        ignore_eos=aux.ignore_eos)


def one_engine(config: RftConfig, engine_cls: type[InferenceEngine],
               engine_num: int) -> InferenceEngine:
    """An :data:`AuxiliaryEngineBuilder`: one engine in this process (a remote engine is
    one client whatever ``engine_num``; more than one local engine needs a mode on Ray)."""
    if engine_num > 1 and not engine_cls.remote:
        raise RftError(f"auxiliary model {config.model.model_path!r}: engine_num "
                       f"{engine_num} needs engine actors on Ray (modes both and explore); "
                       "this mode runs one engine in its process")
    return build_engine(config, engine_cls)


def build_auxiliary_models(config: RftConfig, plans: Sequence[ModelPlan],
                           build: AuxiliaryEngineBuilder = one_engine) -> list[ModelWrapper]:
    """Start the engines of ``explorer.auxiliary_models`` (and their OpenAI endpoints);
    ``plans`` are their resolved engines and parsers, in order; ``build`` makes each
    engine (default: one in this process). On failure the ones already started are closed
    again."""
    models: list[ModelWrapper] = []
    try:
        for i, (aux, plan) in enumerate(zip(config.explorer.auxiliary_models, plans,
                                            strict=True)):
            engine: InferenceEngine = build(engine_config(config, aux),
                                            plan.engine.implementation, aux.engine_num)
            model = ModelWrapper(engine, default_sampling(config, aux),
                                 name=auxiliary_name(aux, i), enable_history=aux.enable_history)
            models.append(model)
            if aux.enable_openai_api:
                parser = reply_parser_of(plan, aux.enable_auto_tool_choice)
                model.serve_openai_api(aux.openai_api_host, aux.openai_api_port,
                                       log_requests=aux.enable_log_requests,
                                       reply_parser=parser, settings=EndpointSettings.of(aux))
    except BaseException:
        close_models(models)
        raise
    return models


def close_models(models: list[ModelWrapper]) -> None:
    """Stop the models' endpoints and release their engines."""
    for model in models:
        model.close()
        close = getattr(model.engine, "close", None)
        if close is not None:
            close()


__all__ = ["AuxiliaryEngineBuilder", "auxiliary_name", "build_auxiliary_models", "close_models",
           "default_sampling", "engine_config", "one_engine"]
