"""The ``explorer`` and ``cluster`` sections' checks: runner limits, every inference
model's engine, endpoint and parsers, and the GPU split."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from rft.config.derive import GPU_MODES, gpu_split
from rft.config.findings import Findings, build_args, is_remote, require_local
from rft.config.plan import ModelPlan, Selected
from rft.config.schema import InferenceModelConfig, RftConfig
from rft.hosts import why_not_loopback
from rft.plugins import args_type_of
from rft.plugin_kinds import ENGINE, REASONING_PARSER, TOOL_CALL_PARSER

COLOCATED_AUXILIARY_ENGINES = ("hf", "vllm")
"""Engines an auxiliary model may use in ``colocate`` mode (CPU machines)."""


@dataclass(frozen=True)
class ModelChoice:
    """What :func:`check_explorer` resolved: each inference model whose engine resolved."""

    rollout: ModelPlan | None = None
    """``explorer.rollout_model``."""
    auxiliary: tuple[ModelPlan, ...] = ()
    """``explorer.auxiliary_models``, in order."""


def check_explorer(c: RftConfig, found: Findings) -> ModelChoice:
    """Runner limits, timeouts, over-rollout; then every model (:func:`check_models`)."""
    e = c.explorer
    rm = e.rollout_model
    for key, value in (("explorer.rollout_model.engine_num", rm.engine_num),
                       ("explorer.rollout_model.tensor_parallel_size", rm.tensor_parallel_size),
                       ("explorer.runner_per_model", e.runner_per_model),
                       ("explorer.eval_interval", e.eval_interval)):
        if value <= 0:
            found.problem(key, f"must be > 0, got {value}")
    if e.max_timeout <= 0:
        found.problem("explorer.max_timeout", f"must be > 0 seconds, got {e.max_timeout}")
    if e.max_retry_times < 0:
        found.problem("explorer.max_retry_times", f"must be >= 0, got {e.max_retry_times}")
    if e.max_repeat_times_per_runner is not None and e.max_repeat_times_per_runner <= 0:
        found.problem("explorer.max_repeat_times_per_runner",
                      f"must be > 0, got {e.max_repeat_times_per_runner}")
    if not 0.0 <= e.over_rollout.ratio < 1.0:
        found.problem("explorer.over_rollout.ratio", f"must be within [0, 1), got "
                      f"{e.over_rollout.ratio}")
    if e.over_rollout.ratio > 0 and c.synchronizer.sync_style == "fixed":
        found.problem("explorer.over_rollout.ratio", "needs a dynamic synchronizer.sync_style "
                      "(explorer_driven or trainer_driven), got fixed")
    if e.dynamic_timeout.enable and e.dynamic_timeout.ratio <= 0:
        found.problem("explorer.dynamic_timeout.ratio",
                      f"must be > 0, got {e.dynamic_timeout.ratio}")
    return check_models(c, found)


def check_models(c: RftConfig, found: Findings) -> ModelChoice:
    """The rollout model's and each auxiliary model's engine and endpoint; auxiliary models
    need a model path and a unique name."""
    names: dict[str, int] = {}
    rm = c.explorer.rollout_model
    models: list[tuple[str, InferenceModelConfig]] = [("explorer.rollout_model", rm)]
    for i, aux in enumerate(c.explorer.auxiliary_models):
        key = f"explorer.auxiliary_models[{i}]"
        models.append((key, aux))
        if not aux.model_path and not is_remote(found.registry, aux.engine_type):
            found.problem(f"{key}.model_path", "must be set (the model this engine serves)")
        require_local(found, f"{key}.model_path", aux.model_path)
        name = aux.name if aux.name is not None else str(i)
        if name in names:
            found.problem(f"{key}.name", f"{name!r} is also the name of "
                          f"explorer.auxiliary_models[{names[name]}]")
        names.setdefault(name, i)
    rollout: ModelPlan | None = None
    auxiliary: list[ModelPlan] = []
    for key, model in models:
        planned = check_model_endpoint(key, model, found)
        if planned is None:
            continue
        if model is rm:
            rollout = planned
        else:
            auxiliary.append(planned)
    return ModelChoice(rollout, tuple(auxiliary))


def check_model_endpoint(key: str, model: InferenceModelConfig,
                         found: Findings) -> ModelPlan | None:
    """One model's engine (its ``extra_engine_args`` against the engine's ``Args``),
    ``gpu_memory_utilization``, OpenAI endpoint and parsers; its plan when the engine
    resolves."""
    engine = found.select(ENGINE, f"{key}.engine_type", model.engine_type)
    value = model.gpu_memory_utilization
    if value is not None and not 0.0 < value <= 1.0:
        found.problem(f"{key}.gpu_memory_utilization", f"must be within (0, 1], got {value}")
    if engine is not None and args_type_of(engine.implementation) is not None:
        # an engine declaring Args takes its extra_engine_args checked against them
        engine = Selected(engine.key, engine.name, engine.implementation, build_args(
            engine.implementation, engine.name, model.extra_engine_args,
            f"{key}.extra_engine_args", found.problems))
    if not 0 <= model.openai_api_port <= 65535:
        found.problem(f"{key}.openai_api_port", f"must be 0 (any free port) or a port "
                      f"number, got {model.openai_api_port}")
    host = model.openai_api_host
    outside = (why_not_loopback(host) if model.enable_openai_api
               and not model.openai_api_key_env else None)
    if outside is not None:
        found.problem(f"{key}.openai_api_key_env", f"must name the environment variable "
                      f"holding an API key: openai_api_host {host!r} serves the model beyond "
                      f"this machine ({outside}; or use openai_api_host: 127.0.0.1)")
    if model.enable_openai_api and model.openai_api_key_env \
            and not os.environ.get(model.openai_api_key_env):
        found.warnings.append(f"{key}.openai_api_key_env: environment variable "
                              f"{model.openai_api_key_env} is not set here; the process "
                              f"serving the OpenAI API needs it")
    for field_name in ("openai_api_max_n", "openai_api_max_request_bytes"):
        if getattr(model, field_name) < 1:
            found.problem(f"{key}.{field_name}", f"must be >= 1, got "
                          f"{getattr(model, field_name)}")
    tool_calls, reasoning = check_reply_parsers(key, model, found)
    return None if engine is None else ModelPlan(key, engine, tool_calls, reasoning)


def check_reply_parsers(key: str, model: InferenceModelConfig, found: Findings
                        ) -> tuple[Selected[Any] | None, Selected[Any] | None]:
    """The OpenAI endpoint's parsers: known names; auto tool choice needs a tool parser.
    Returns the resolved ``(tool_call_parser, reasoning_parser)``."""
    tool_calls = found.select(TOOL_CALL_PARSER, f"{key}.tool_call_parser",
                              model.tool_call_parser)
    reasoning = found.select(REASONING_PARSER, f"{key}.reasoning_parser",
                             model.reasoning_parser)
    if model.enable_auto_tool_choice and not model.tool_call_parser:
        found.problem(f"{key}.enable_auto_tool_choice", "needs tool_call_parser (the format "
                      "the model writes its tool calls in, e.g. hermes)")
    if not model.enable_openai_api:
        for field_name in ("enable_auto_tool_choice", "tool_call_parser", "reasoning_parser"):
            if getattr(model, field_name):
                found.warnings.append(f"{key}.{field_name}: has no effect without "
                                      "enable_openai_api (the parsers serve the OpenAI "
                                      "endpoint)")
    return tool_calls, reasoning


def check_cluster(c: RftConfig, found: Findings) -> None:
    """GPU split: explorer = engines × TP, auxiliary models, trainer = the rest."""
    cl = c.cluster
    registry = found.registry
    if cl.node_num is not None and cl.node_num <= 0:
        found.problem("cluster.node_num", f"must be > 0, got {cl.node_num}")
    if cl.gpu_per_node is not None and cl.gpu_per_node < 0:
        found.problem("cluster.gpu_per_node", f"must be >= 0, got {cl.gpu_per_node}")
    rm = c.explorer.rollout_model
    for i, aux in enumerate(c.explorer.auxiliary_models):
        if aux.engine_num <= 1:
            continue
        if c.mode in ("colocate", "bench"):  # one process: the model's engine runs there
            found.problem(f"explorer.auxiliary_models[{i}].engine_num",
                          f"mode {c.mode!r} runs an auxiliary model as one engine in its "
                          f"process, got {aux.engine_num}: use 1")
        elif is_remote(registry, aux.engine_type):
            found.warnings.append(f"explorer.auxiliary_models[{i}].engine_num: an external "
                                  "model is served by its own server and rft opens one "
                                  "client to it; it has no effect")
    if c.mode == "colocate":
        if rm.engine_num != 1 or rm.tensor_parallel_size != 1:
            found.problem("explorer.rollout_model.engine_num",
                          "mode 'colocate' runs one engine per device (per trainer rank) with "
                          f"tensor_parallel_size 1, got engine_num={rm.engine_num}, "
                          f"tensor_parallel_size={rm.tensor_parallel_size}")
        check_colocated_auxiliary_models(c, found)
        return
    node_gpus = cl.gpu_per_node or 0
    if node_gpus > 0 and rm.tensor_parallel_size > node_gpus:
        found.problem("explorer.rollout_model.tensor_parallel_size",
                      f"{rm.tensor_parallel_size} is larger than a node "
                      f"(cluster.gpu_per_node = {cl.gpu_per_node}): a tensor-parallel group "
                      "runs on one node")
    if c.mode == "bench" and rm.engine_num > 1:
        found.problem("explorer.rollout_model.engine_num",
                      f"mode 'bench' runs one engine in its process; {rm.engine_num} engines "
                      "(Ray actors) need mode 'explore' or 'both'")
    known = cl.node_num is not None and cl.gpu_per_node is not None
    total = (cl.node_num or 0) * (cl.gpu_per_node or 0)  # None: detected from Ray at launch
    if c.mode not in GPU_MODES or not known or total == 0:
        return
    explorer_gpus, auxiliary_gpus, trainer_gpus = gpu_split(c, registry)
    explorer_side = explorer_gpus + auxiliary_gpus if c.mode != "train" else auxiliary_gpus
    if c.mode in ("both", "explore", "bench") and explorer_side > total:
        found.problem("explorer.rollout_model.engine_num",
                      f"explorer needs {explorer_gpus} GPUs (+{auxiliary_gpus} auxiliary) but "
                      f"the cluster has {total}")
    elif c.mode in ("both", "train") and trainer_gpus <= 0:
        found.problem("cluster.gpu_per_node",
                      f"no GPU left for the trainer: cluster has {total}, explorer uses "
                      f"{explorer_gpus}, auxiliary models {auxiliary_gpus}")


def check_colocated_auxiliary_models(c: RftConfig, found: Findings) -> None:
    """``colocate`` shares one device: auxiliary models run there only on CPU machines
    (``cluster.gpu_per_node: 0``, or unset without a GPU), with an in-process engine."""
    registry = found.registry
    local = [aux for aux in c.explorer.auxiliary_models
             if not is_remote(registry, aux.engine_type)]
    if not local:  # none, or remote ones only (external: they use no device here)
        return
    gpus = c.cluster.gpu_per_node
    if gpus is None:
        import torch

        gpus = torch.cuda.device_count()
    if gpus:
        found.problem("explorer.auxiliary_models", f"mode 'colocate' on a GPU machine "
                      f"({gpus} GPU(s) per node) runs no auxiliary models (they need GPUs of "
                      "their own): use mode 'both', or run on CPU (cluster.gpu_per_node: 0)")
        return
    for i, aux in enumerate(c.explorer.auxiliary_models):
        if aux.engine_type not in COLOCATED_AUXILIARY_ENGINES \
                and not is_remote(registry, aux.engine_type):
            found.problem(f"explorer.auxiliary_models[{i}].engine_type",
                          "mode 'colocate' runs auxiliary models in its own process: use "
                          + " or ".join(repr(e) for e in COLOCATED_AUXILIARY_ENGINES)
                          + f", got {aux.engine_type!r}")


__all__ = ["COLOCATED_AUXILIARY_ENGINES", "ModelChoice", "check_cluster",
           "check_colocated_auxiliary_models", "check_explorer", "check_models",
           "check_reply_parsers"]
