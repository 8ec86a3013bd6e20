"""External API models (``model.external_model``, engine ``external``): their validation.

``model.external_model.enable: true`` and ``explorer.rollout_model.engine_type: external``
say the same thing — the rollout model is a model behind an OpenAI-compatible server — as
in Trinity-RFT, where ``enable`` switches the rollout engine to ``external``.
:func:`derive_external_model` (before :func:`~rft.config.validate.check_model`) makes the
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
from typing import TYPE_CHECKING, Any

from rft.config.schema import ExternalModelConfig, InferenceModelConfig, RftConfig

if TYPE_CHECKING:
    from rft.config.validate import Validation

EXTERNAL_ENGINE = "external"
"""The engine ``model.external_model.enable: true`` selects (Trinity-RFT's rule)."""

DEFAULT_ENGINE = InferenceModelConfig().engine_type
"""The rollout engine a config gets when it names none."""

TRAINING_MODES = ("colocate", "both")
"""Modes whose rollout model is the policy being trained."""


def is_remote(v: Validation, engine_type: str) -> bool:
    """Whether ``engine_type`` is a registered engine serving a remote model."""
    if not v.registry.has("engine", engine_type):
        return False
    return bool(getattr(v.registry.get("engine", engine_type), "remote", False))


def derive_external_model(c: RftConfig, v: Validation) -> None:
    """``model.external_model.enable`` and the rollout engine agree (module docstring)."""
    ext, rm = c.model.external_model, c.explorer.rollout_model
    if ext.enable and rm.engine_type == DEFAULT_ENGINE:
        rm.engine_type = EXTERNAL_ENGINE
    elif ext.enable and not is_remote(v, rm.engine_type):
        v.problem("model.external_model.enable", "true makes the rollout model the external "
                  f"API model (engine '{EXTERNAL_ENGINE}'), but explorer.rollout_model."
                  f"engine_type is {rm.engine_type!r}: remove one of them")
    elif is_remote(v, rm.engine_type):
        ext.enable = True


def check_external_engines(c: RftConfig, v: Validation) -> None:
    """What a remote engine can be used for, and its server settings (module docstring)."""
    rm = c.explorer.rollout_model
    if is_remote(v, rm.engine_type):
        _check_rollout(c, v)
        _check_model("explorer.rollout_model", rm, v)
        _check_server("model.external_model", c.model.external_model, c, v)
    for i, aux in enumerate(c.explorer.auxiliary_models):
        if is_remote(v, aux.engine_type):
            key = f"explorer.auxiliary_models[{i}]"
            _check_model(key, aux, v)
            _check_server(f"{key}.external_model_config", aux.external_model_config, c, v)


def _check_rollout(c: RftConfig, v: Validation) -> None:
    key = "explorer.rollout_model.engine_type"
    name = c.explorer.rollout_model.engine_type
    train_only = v.preset is not None and v.preset.train_only
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


def _check_model(key: str, model: InferenceModelConfig, v: Validation) -> None:
    for field_name in ("enable_history", "enable_openai_api"):
        if getattr(model, field_name):
            v.problem(f"{key}.{field_name}", f"engine {model.engine_type!r} takes chat "
                      "messages only, and this needs token ids; set it false")


def _check_server(key: str, settings: ExternalModelConfig, c: RftConfig,
                  v: Validation) -> None:
    env: dict[str, Any] = {**os.environ, **(c.explorer.env_vars or {})}
    if not str(env.get(settings.base_url_env) or "").strip():
        v.problem(f"{key}.base_url_env", f"environment variable {settings.base_url_env} is "
                  "not set; it must hold the OpenAI-compatible server's base URL, e.g. "
                  "http://127.0.0.1:8000/v1")
    if not env.get(settings.api_key_env):
        v.warnings.append(f"{key}.api_key_env: environment variable {settings.api_key_env} is "
                          "not set; requests to the server carry no API key")


__all__ = ["EXTERNAL_ENGINE", "check_external_engines", "derive_external_model", "is_remote"]
