"""The first stage of validation: the values the configuration guide derives.

:func:`derive` takes a converted config and returns a new one with every derivable value
filled in — Trinity-RFT's spellings read into rft's fields, the algorithm preset's
defaults, token limits, batch sizes, taskset defaults, buffer paths, the GPU split, the
trainer's ranks and token budget — one function per section, each returning new values
with :func:`dataclasses.replace`. Its input is never changed. It decides nothing about
validity: a value it cannot derive stays unset and :func:`rft.config.check.check` names
it; the few lines derivation itself produces (a user value it replaces, two spellings of
one field that disagree) come back in :class:`Derived`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any, Literal, TypeVar

from rft.algorithm import AlgorithmPreset
from rft.config.external import derive_external_model
from rft.config.findings import Findings, is_remote, lookup
from rft.config.schema import (
    DEFAULT_GRAD_CLIP,
    AlgorithmConfig,
    BufferConfig,
    ClusterConfig,
    ExperienceBufferConfig,
    ExplorerConfig,
    ExplorerInputConfig,
    InferenceModelConfig,
    ModelConfig,
    OperatorConfig,
    RftConfig,
    SynchronizerConfig,
    TaskSelectorConfig,
    TasksetConfig,
    TrainerConfig,
)
from rft.config.task_pipeline import derive_task_pipeline
from rft.config.token_budget import TokenBudget, derive_budget
from rft.config.trinity_forms import derive_trinity_forms
from rft.plugins import PluginRegistry
from rft.workflow import default_environment, default_reward_fn

GPU_MODES = ("both", "train", "explore", "bench")
"""Modes whose processes are placed on GPUs through the cluster section."""

SyncMethod = Literal["nccl", "checkpoint", "memory"]
"""The values of ``synchronizer.sync_method``."""

SYNC_METHODS_BY_MODE: dict[str, tuple[SyncMethod, ...]] = {
    "both": ("nccl", "memory", "checkpoint"),
    "colocate": ("memory", "nccl", "checkpoint"),
    "train": ("checkpoint",),
    "explore": ("checkpoint",),
    "bench": ("checkpoint",),
    "serve": ("memory", "checkpoint"),
}
"""Weight synchronisation methods that can work in each mode; the first is the mode's
default when ``synchronizer.sync_method`` is unset."""

GPU_MEMORY_UTILIZATION = 0.9
"""``gpu_memory_utilization`` of a vLLM engine with a GPU of its own (vLLM's default)."""
COLOCATE_GPU_MEMORY_UTILIZATION = 0.5
"""``gpu_memory_utilization`` of the rollout model in mode ``colocate`` (veRL's default):
the engine and the trainer share each GPU."""


@dataclass(frozen=True)
class Derived:
    """What :func:`derive` returns."""

    config: RftConfig
    """The config with every derivable value filled in."""
    token_budget: TokenBudget | None
    """``trainer.max_token_len_per_gpu`` when derived (:mod:`rft.config.token_budget`);
    ``None`` when the user set it or it could not be derived."""
    problems: tuple[str, ...] = ()
    """Derivation's problems: two spellings of one field that disagree."""
    warnings: tuple[str, ...] = ()
    """Derivation's warnings: a user value it replaces or reads differently."""


def derive(raw: RftConfig, registry: PluginRegistry) -> Derived:
    """``raw`` with the guide's derivations applied, section by section (module doc)."""
    found = Findings(registry)
    c = derive_trinity_forms(raw, found)
    c = derive_global(c)
    c = derive_task_pipeline(c)
    c = replace(c, algorithm=derive_algorithm(c.algorithm, registry, found))
    c = derive_explorer_operator(c, registry)
    c = derive_external_model(c, registry)
    c = replace(c, model=derive_model(c.model))
    c = replace(c, buffer=derive_buffer(c, registry, found))
    c = replace(c, explorer=derive_explorer(c, registry, found))
    c = replace(c, cluster=derive_cluster(c, registry))
    c = replace(c, synchronizer=derive_synchronizer(c))
    trainer, budget = derive_trainer(c)
    c = replace(c, trainer=trainer)
    return Derived(c, budget, tuple(found.problems), tuple(found.warnings))


def derive_global(c: RftConfig) -> RftConfig:
    """Checkpoint job dir ``<root>/<project>[/<group>]/<name>`` and Ray namespace
    ``<project>/<name>`` (stages come with their job dir)."""
    if not c.checkpoint_root_dir:
        return c
    job_dir = c.checkpoint_job_dir
    if job_dir is None:
        job_dir = os.path.join(c.checkpoint_root_dir, c.project, c.group, c.name)
    namespace = c.ray_namespace if c.ray_namespace is not None else f"{c.project}/{c.name}"
    return replace(c, checkpoint_job_dir=job_dir, ray_namespace=namespace)


def derive_algorithm(a: AlgorithmConfig, registry: PluginRegistry,
                     found: Findings) -> AlgorithmConfig:
    """The preset's function names and args where unset, and ``repeat_times`` (the
    preset's fixed one replaces the user's, with a warning)."""
    preset = lookup(registry, "algorithm", a.algorithm_type)
    if not isinstance(preset, AlgorithmPreset):
        return a
    changes: dict[str, Any] = {name: getattr(preset, name) for name in (
        "advantage_fn", "policy_loss_fn", "kl_loss_fn", "kl_penalty_fn", "entropy_loss_fn",
        "sample_strategy") if getattr(a, name) is None}
    changes.update({args_name: {**defaults, **(getattr(a, args_name) or {})}
                    for args_name, defaults in (preset.default_args or {}).items()})
    repeat_times = a.repeat_times
    if preset.fixed_repeat_times is not None:
        if repeat_times not in (None, preset.fixed_repeat_times):  # the guide: "set to 2"
            found.warnings.append(f"algorithm.repeat_times: {a.algorithm_type} uses "
                                  f"repeat_times={preset.fixed_repeat_times}; {repeat_times} "
                                  "is replaced")
        repeat_times = preset.fixed_repeat_times
    if repeat_times is None:
        repeat_times = preset.repeat_times
    return replace(a, **changes, repeat_times=repeat_times)


def derive_explorer_operator(c: RftConfig, registry: PluginRegistry) -> RftConfig:
    """The preset's :attr:`~rft.algorithm.AlgorithmPreset.explorer_operator`, or the
    operator ``algorithm.add_strategy`` names (Trinity-RFT's older form), appended to
    ``data_processor.experience_pipeline.operators`` when none of its name is listed."""
    preset = lookup(registry, "algorithm", c.algorithm.algorithm_type)
    name = preset.explorer_operator if isinstance(preset, AlgorithmPreset) else None
    strategy = c.algorithm.add_strategy  # Trinity-RFT's older spelling of the same
    if strategy is not None:  # an unknown one stays out: the check names add_strategy
        name = strategy if registry.has("experience_operator", strategy) else None
    pipeline = c.data_processor.experience_pipeline
    if name is None or pipeline is None or any(op.name == name for op in pipeline.operators):
        return c
    args = dict(c.algorithm.advantage_fn_args or {}) if c.algorithm.advantage_fn == name else {}
    pipeline = replace(pipeline, operators=[*pipeline.operators, OperatorConfig(name, args)])
    return replace(c, data_processor=replace(c.data_processor, experience_pipeline=pipeline))


def derive_model(m: ModelConfig) -> ModelConfig:
    """``critic_model_path`` from ``model_path``; of ``max_model_len``,
    ``max_prompt_tokens`` and ``max_response_tokens``, the one left unset from the other
    two (``max_model_len = prompt + response``)."""
    m = replace(m, critic_model_path=m.model_path if m.critic_model_path is None
                else m.critic_model_path)
    total, prompt, response = m.max_model_len, m.max_prompt_tokens, m.max_response_tokens
    if total is None:
        if prompt is None or response is None:
            return m  # the check names it
        total = prompt + response
    if response is None and prompt is not None:
        response = total - prompt
    if prompt is None and response is not None:
        prompt = total - response
    return replace(m, max_model_len=total, max_prompt_tokens=prompt,
                   max_response_tokens=response)


def derive_buffer(c: RftConfig, registry: PluginRegistry, found: Findings) -> BufferConfig:
    """``train_batch_size = batch_size × repeat_times``; each taskset's defaults
    (:func:`derive_taskset`); the experience buffer, its name and path; the buffer-level
    retry settings in every storage that sets none."""
    b = c.buffer
    repeat_times = c.algorithm.repeat_times or 1
    ei = b.explorer_input

    def taskset(key: str, t: TasksetConfig, is_eval: bool) -> TasksetConfig:
        return _retries(derive_taskset(key, t, is_eval, ei, repeat_times, registry, found), b)

    ei = replace(
        ei, taskset=None if ei.taskset is None else taskset(
            "buffer.explorer_input.taskset", ei.taskset, False),
        tasksets=[taskset(f"buffer.explorer_input.tasksets[{i}]", t, False)
                  for i, t in enumerate(ei.tasksets)],
        eval_tasksets=[taskset(f"buffer.explorer_input.eval_tasksets[{i}]", t, True)
                       for i, t in enumerate(ei.eval_tasksets)])
    ti = b.trainer_input
    storage = ti.experience_buffer or ExperienceBufferConfig(name="experience_buffer")
    if not storage.name:
        storage = replace(storage, name="experience_buffer")
    if storage.storage_type in ("sql", "file") and not storage.path and c.checkpoint_job_dir:
        suffix = ".db" if storage.storage_type == "sql" else ".jsonl"
        storage = replace(storage, path=os.path.join(c.checkpoint_job_dir, "buffer",
                                                     storage.name + suffix))
    ti = replace(ti, experience_buffer=_retries(storage, b),
                 auxiliary_buffers={name: _retries(aux, b)
                                    for name, aux in ti.auxiliary_buffers.items()})
    train_batch_size = (b.batch_size * repeat_times if b.train_batch_size is None
                        else b.train_batch_size)
    return replace(b, train_batch_size=train_batch_size, explorer_input=ei, trainer_input=ti)


def derive_taskset(key: str, t: TasksetConfig, is_eval: bool, ei: ExplorerInputConfig,
                   repeat_times: int, registry: PluginRegistry,
                   found: Findings) -> TasksetConfig:
    """A taskset's ``repeat_times`` (1 for eval), workflow and reward function from
    ``explorer_input``'s defaults, else the workflow's own default reward function (said
    in a warning, as Trinity-RFT does); ``environment`` from the workflow's
    ``default_environment`` when unset; ``data_selector`` read as ``task_selector``."""
    if t.repeat_times is None:
        t = replace(t, repeat_times=1 if is_eval else repeat_times)
    if t.default_workflow_type is None:
        t = replace(t, default_workflow_type=(
            (ei.default_eval_workflow_type or ei.default_workflow_type) if is_eval
            else ei.default_workflow_type))
    if t.default_reward_fn_type is None:
        t = replace(t, default_reward_fn_type=ei.default_reward_fn_type)
    if t.data_selector is not None:
        if t.task_selector != TaskSelectorConfig():
            found.problem(f"{key}.data_selector", "set either data_selector or task_selector "
                          "(its older name), not both")
        t = replace(t, task_selector=t.data_selector)
    workflow = lookup(registry, "workflow", t.default_workflow_type)
    fallback = default_reward_fn(workflow) if workflow is not None else None
    if t.default_reward_fn_type is None and fallback is not None:
        t = replace(t, default_reward_fn_type=fallback)
        found.warnings.append(f"{key}.default_reward_fn_type: not set; workflow "
                              f"{t.default_workflow_type!r} scores with its default reward "
                              f"function {fallback!r} (as in Trinity-RFT)")
    environment = default_environment(workflow) if workflow is not None else None
    if t.environment is None and environment is not None:
        t = replace(t, environment=environment)
    return t


_Storage = TypeVar("_Storage", TasksetConfig, ExperienceBufferConfig)


def _retries(storage: _Storage, b: BufferConfig) -> _Storage:
    """``buffer.max_retry_times`` / ``max_retry_interval`` where ``storage`` sets none
    (Trinity-RFT 0.2's buffer-level setting, the default of its storages' own since)."""
    return replace(
        storage,
        max_retry_times=(b.max_retry_times if storage.max_retry_times is None
                         else storage.max_retry_times),
        max_retry_interval=(b.max_retry_interval if storage.max_retry_interval is None
                            else storage.max_retry_interval))


def derive_explorer(c: RftConfig, registry: PluginRegistry,
                    found: Findings) -> ExplorerConfig:
    """``eval_interval`` rounded to a multiple of ``synchronizer.sync_interval`` (with a
    warning); each engine's ``gpu_memory_utilization``."""
    e = c.explorer
    interval = c.synchronizer.sync_interval
    if interval > 0 and e.eval_interval > 0 and e.eval_interval % interval:
        rounded = max(interval, round(e.eval_interval / interval) * interval)
        found.warnings.append(f"explorer.eval_interval: {e.eval_interval} is not a multiple "
                              f"of synchronizer.sync_interval ({interval}); using {rounded}")
        e = replace(e, eval_interval=rounded)
    return replace(
        e, rollout_model=_gpu_memory_utilization(c, e.rollout_model, registry, shares_gpu=(
            c.mode == "colocate")),
        auxiliary_models=[_gpu_memory_utilization(c, m, registry, shares_gpu=False)
                          for m in e.auxiliary_models])


_Model = TypeVar("_Model", bound=InferenceModelConfig)


def _gpu_memory_utilization(c: RftConfig, model: _Model, registry: PluginRegistry,
                            shares_gpu: bool) -> _Model:
    """An unset ``gpu_memory_utilization`` of an engine that reads it (its
    ``engine_options``): :data:`COLOCATE_GPU_MEMORY_UTILIZATION` for an engine sharing its
    GPU with the trainer, else :data:`GPU_MEMORY_UTILIZATION`. An engine that does not read
    it keeps ``None``, so nothing warns about a value the user never set."""
    engine = lookup(registry, "engine", model.engine_type)
    if model.gpu_memory_utilization is not None \
            or "gpu_memory_utilization" not in getattr(engine, "engine_options", ()):
        return model
    return replace(model, gpu_memory_utilization=(
        COLOCATE_GPU_MEMORY_UTILIZATION if shares_gpu else GPU_MEMORY_UTILIZATION))


def gpu_split(c: RftConfig, registry: PluginRegistry) -> tuple[int, int, int]:
    """``(explorer, auxiliary, trainer)`` GPUs: the explorer's engines × TP, the auxiliary
    models', the rest for the trainer (modes ``both`` / ``train``); a remote engine
    (external) runs on its own server and takes none."""
    cl, rm = c.cluster, c.explorer.rollout_model
    explorer = 0 if is_remote(registry, rm.engine_type) else \
        rm.engine_num * rm.tensor_parallel_size
    auxiliary = sum(m.engine_num * m.tensor_parallel_size for m in c.explorer.auxiliary_models
                    if not is_remote(registry, m.engine_type))
    total = (cl.node_num or 0) * (cl.gpu_per_node or 0)
    explorer_side = explorer + auxiliary if c.mode != "train" else auxiliary
    trainer = total - explorer_side if c.mode in ("both", "train") else 0
    return explorer, auxiliary, trainer


def derive_cluster(c: RftConfig, registry: PluginRegistry) -> ClusterConfig:
    """The GPU split (:func:`gpu_split`) where the GPUs are known (``node_num`` and
    ``gpu_per_node`` set, not 0) in a mode placed on GPUs (:data:`GPU_MODES`)."""
    cl = c.cluster
    known = cl.node_num is not None and cl.gpu_per_node is not None
    if c.mode not in GPU_MODES or not known or not cl.node_num or not cl.gpu_per_node:
        return cl
    explorer, auxiliary, trainer = gpu_split(c, registry)
    return replace(cl, explorer_gpu_num=explorer, auxiliary_gpu_num=auxiliary,
                   trainer_gpu_num=max(trainer, 0))


def derive_synchronizer(c: RftConfig) -> SynchronizerConfig:
    """An unset ``sync_method``: the mode's first (:data:`SYNC_METHODS_BY_MODE`)."""
    s = c.synchronizer
    allowed = SYNC_METHODS_BY_MODE.get(c.mode, ())
    if s.sync_method is None and allowed:
        return replace(s, sync_method=allowed[0])
    return s


def derive_trainer(c: RftConfig) -> tuple[TrainerConfig, TokenBudget | None]:
    """``total_steps`` from ``buffer.total_steps``, ``rank_timeout`` from the sync
    timeout, ``ranks`` (:func:`trainer_ranks`), ``grad_clip`` (``algorithm.optimizer.
    clip_grad``, else :data:`DEFAULT_GRAD_CLIP`) and the token budget of a dynamic
    micro-batch (:func:`rft.config.token_budget.derive_budget`, returned beside)."""
    t = c.trainer
    clip_grad = c.algorithm.optimizer.clip_grad
    t = replace(
        t, total_steps=c.buffer.total_steps if t.total_steps is None else t.total_steps,
        rank_timeout=(float(c.synchronizer.sync_timeout) if t.rank_timeout is None
                      else t.rank_timeout),
        grad_clip=(t.grad_clip if t.grad_clip is not None else clip_grad
                   if clip_grad is not None else DEFAULT_GRAD_CLIP))
    if t.ranks is None and t.cpu_ranks > 0:
        t = replace(t, ranks=trainer_ranks(replace(c, trainer=t)))
    budget = derive_budget(replace(c, trainer=t))
    if budget is not None:
        t = replace(t, max_token_len_per_gpu=budget.tokens)
    return t, budget


def trainer_ranks(c: RftConfig) -> int:
    """Processes of the trainer (see ``TrainerConfig.ranks``)."""
    t, cl = c.trainer, c.cluster
    if c.mode not in ("both", "train", "colocate") or t.trainer_strategy == "megatron":
        return 1
    if c.mode == "colocate" and t.trainer_type != "torch":
        return 1  # the ranks that hold the rollout engines are the torch trainer's
    gpus = cl.gpu_per_node
    if gpus is None:  # not given: this machine decides CPU or GPU
        import torch

        gpus = torch.cuda.device_count()
        if gpus:
            return 1  # the GPU split is unknown without cluster.node_num / gpu_per_node
    if gpus == 0:
        return max(1, t.cpu_ranks)
    if c.mode == "colocate":  # every device: a trainer rank and its rollout engine
        return max(1, (cl.node_num or 1) * gpus)
    return max(1, cl.trainer_gpu_num or 1)


__all__ = ["COLOCATE_GPU_MEMORY_UTILIZATION", "GPU_MEMORY_UTILIZATION", "GPU_MODES",
           "SYNC_METHODS_BY_MODE", "Derived", "derive", "derive_algorithm", "derive_buffer",
           "derive_cluster", "derive_explorer", "derive_global", "derive_model",
           "derive_synchronizer", "derive_taskset", "derive_trainer", "gpu_split",
           "trainer_ranks"]
