"""External API models (``model.external_model``, engine ``external``): their validation.

``model.external_model.enable: true`` and ``explorer.rollout_model.engine_type: external``
say the same thing — the rollout model is a model behind an OpenAI-compatible server — as
in Trinity-RFT, where ``enable`` switches the rollout engine to ``external``.
:func:`derive_external_model` (a derivation, :mod:`rft.config.derive`) makes the
two agree: ``enable: true`` sets the engine type when it was left at its default
(``vllm``), and refuses another one; an engine that is remote sets ``enable: true``.
``model.model_path`` is then optional (a local tokenizer of the served model).

:func:`check_external_engines` (after the cluster check) holds every remote engine — the
rollout model's and the auxiliary models' (``engine_type: external``, settings in
``external_model_config``) — to what it can do (:attr:`InferenceEngine.remote
<rft.engines.engine.InferenceEngine.remote>`, read from the resolved engine class, never
from its name):

- as the rollout model only in modes ``bench`` (the hosted model is evaluated as it is)
  and ``explore`` (explored as it is: no trainer checkpoint is loaded into it, a warning;
  ``synchronizer.wait_for_checkpoint`` is a problem): it cannot be the policy being
  trained (modes ``colocate``, ``both``, and ``train`` of an RL algorithm);
- no ``enable_history`` / ``enable_openai_api`` (both work on token ids);
- the environment variable ``base_url_env`` names must be set here or in
  ``explorer.env_vars`` (a problem naming it); an unset ``api_key_env`` is a warning
  (requests carry no key).
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

from rft.algorithm import AlgorithmPreset
from rft.config.findings import Findings, is_remote
from rft.config.schema import ExternalModelConfig, InferenceModelConfig, RftConfig
from rft.plugins import PluginRegistry

EXTERNAL_ENGINE = "external"
"""The engine ``model.external_model.enable: true`` selects (Trinity-RFT's rule)."""

DEFAULT_ENGINE = InferenceModelConfig().engine_type
"""The rollout engine a config gets when it names none."""

TRAINING_MODES = ("colocate", "both")
"""Modes whose rollout model is the policy being trained."""


def derive_external_model(c: RftConfig, registry: PluginRegistry) -> RftConfig:
    """``c`` with ``model.external_model.enable`` and the rollout engine agreeing (module
    docstring); when they cannot, ``c`` unchanged (:func:`check_external_engines` says so)."""
    ext, rm = c.model.external_model, c.explorer.rollout_model
    if ext.enable and rm.engine_type == DEFAULT_ENGINE:
        rm = replace(rm, engine_type=EXTERNAL_ENGINE)
        return replace(c, explorer=replace(c.explorer, rollout_model=rm))
    if not ext.enable and is_remote(registry, rm.engine_type):
        return replace(c, model=replace(c.model, external_model=replace(ext, enable=True)))
    return c


def check_external_engines(c: RftConfig, v: Findings, preset: AlgorithmPreset | None
                           ) -> None:
    """What a remote engine can be used for, and its server settings (module docstring)."""
    rm = c.explorer.rollout_model
    if c.model.external_model.enable and rm.engine_type != EXTERNAL_ENGINE \
            and not is_remote(v.registry, rm.engine_type):
        v.problem("model.external_model.enable", "true makes the rollout model the external "
                  f"API model (engine '{EXTERNAL_ENGINE}'), but explorer.rollout_model."
                  f"engine_type is {rm.engine_type!r}: remove one of them")
    if is_remote(v.registry, rm.engine_type):
        _check_rollout(c, v, preset)
        _check_model("explorer.rollout_model", rm, v)
        _check_server("model.external_model", c.model.external_model, c, v)
    for i, aux in enumerate(c.explorer.auxiliary_models):
        if is_remote(v.registry, aux.engine_type):
            key = f"explorer.auxiliary_models[{i}]"
            _check_model(key, aux, v)
            _check_server(f"{key}.external_model_config", aux.external_model_config, c, v)


def _check_rollout(c: RftConfig, v: Findings, preset: AlgorithmPreset | None) -> None:
    key = "explorer.rollout_model.engine_type"
    name = c.explorer.rollout_model.engine_type
    train_only = preset is not None and preset.train_only
    if c.mode in TRAINING_MODES or (c.mode == "train" and not train_only):
        v.problem(key, f"{name!r} serves a model on a remote server whose weights rft cannot "
                  f"change: it cannot be the policy trained in mode {c.mode!r}; evaluate it "
                  "with mode 'bench' or 'explore', or train with an in-process engine "
                  "(hf, vllm)")
    elif c.mode == "explore":
        if c.synchronizer.wait_for_checkpoint:
            v.problem("synchronizer.wait_for_checkpoint", f"the rollout engine {name!r} "
                      "serves a remote model that takes no checkpoint: nothing to wait for; "
                      "set it false")
        else:
            v.warnings.append(f"{key}: {name!r} serves a remote model: mode 'explore' explores "
                              "it as it is served, loading no trainer checkpoint into it")


def _check_model(key: str, model: InferenceModelConfig, v: Findings) -> None:
    for field_name in ("enable_history", "enable_openai_api"):
        if getattr(model, field_name):
            v.problem(f"{key}.{field_name}", f"engine {model.engine_type!r} takes chat "
                      "messages only, and this needs token ids; set it false")


def _check_server(key: str, settings: ExternalModelConfig, c: RftConfig,
                  v: Findings) -> None:
    env: dict[str, Any] = {**os.environ, **(c.explorer.env_vars or {})}
    if not str(env.get(settings.base_url_env) or "").strip():
        v.problem(f"{key}.base_url_env", f"environment variable {settings.base_url_env} is "
                  "not set; it must hold the OpenAI-compatible server's base URL, e.g. "
                  "http://127.0.0.1:8000/v1")
    if not env.get(settings.api_key_env):
        v.warnings.append(f"{key}.api_key_env: environment variable {settings.api_key_env} is "
                          "not set; requests to the server carry no API key")


__all__ = ["EXTERNAL_ENGINE", "check_external_engines", "derive_external_model"]
