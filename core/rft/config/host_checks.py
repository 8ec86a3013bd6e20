"""Checks of what ``rft run`` would refuse on this machine, made at validation, and of
fields that have no effect where they are set.

- an engine whose Python package is not installed here
  (:attr:`~rft.engines.engine.InferenceEngine.required_modules`: ``vllm``, also
  through Trinity-RFT's ``vllm_async``): a problem, unless ``cluster.ray_address`` (or
  ``RAY_ADDRESS``) names a Ray cluster, whose nodes run the engines;
- ``cluster.gpu_per_node`` larger than the GPUs of this machine when the run would use
  this machine alone (``ray_address: local``, or ``auto`` when this process has joined
  no Ray cluster and ``ray start`` left no cluster address on this machine): a problem.
  The GPUs are counted through ``torch.cuda.device_count()`` (NVML; CUDA stays
  uninitialised; 0 with a CPU build of torch). Ray is not started. With a cluster
  address the check belongs to the run, which asks Ray;
- a taskset's ``subset_name`` on a local folder that has neither a subfolder of that
  name nor a configuration of that name in its ``README.md``: a problem (``datasets``
  would refuse it when the run starts); on a local data file: a warning (it has no effect);
- fields with no effect here, a warning each: an engine option
  (:data:`ENGINE_OPTIONS`) set for an engine that does not read it
  (:attr:`~rft.engines.engine.InferenceEngine.engine_options`), trainer batching
  fields (:data:`TRAINER_FIELDS`) in a mode that runs no trainer, and
  ``synchronizer.sync_method: nccl`` in mode ``colocate`` (one process: the engine's
  weights are updated in memory).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import sys
from typing import Any

import yaml

from rft.algorithm import AlgorithmPreset
from rft.config.check_buffer import BufferChoice
from rft.config.check_models import ModelChoice
from rft.config.findings import Findings
from rft.config.schema import InferenceModelConfig, RftConfig, TrainerConfig
from rft.ray_address_file import recorded_ray_address

ENGINE_OPTIONS = ("enforce_eager", "enable_prefix_caching", "enable_chunked_prefill",
                  "gpu_memory_utilization")
"""``InferenceModelConfig`` fields only some engines read (vLLM's)."""

TRAINER_FIELDS = ("use_dynamic_bsz", "ulysses_sequence_parallel_size")
"""Trainer batching fields (Trinity-RFT / veRL) that act only where a trainer runs."""

TRAINERLESS_MODES = ("explore", "bench")
"""Modes that run no trainer."""

PRIVATE_CLUSTER_ADDRESSES = ("auto", "local")
"""``cluster.ray_address`` values that may start a Ray cluster on this machine."""


def module_missing(name: str) -> bool:
    """Whether the Python package ``name`` cannot be imported here (nothing is imported)."""
    try:
        return importlib.util.find_spec(name) is None
    except (ImportError, ValueError):
        return True


def cluster_address(c: RftConfig) -> str:
    """The Ray address the run joins: ``RAY_ADDRESS`` when set (it wins), else
    ``cluster.ray_address``."""
    return os.environ.get("RAY_ADDRESS") or c.cluster.ray_address


def ray_cluster_started_here() -> bool:
    """Whether ``ray start`` left the address of a cluster on this machine (Ray's address
    file), which ``ray_address: auto`` would join."""
    return recorded_ray_address() is not None


def ray_joined() -> bool:
    """Whether this process has already joined a Ray cluster (``ray.init``), which the run
    then uses; Ray is neither imported nor started for this."""
    ray = sys.modules.get("ray")
    return ray is not None and bool(getattr(ray, "is_initialized", lambda: False)())


def host_gpu_count() -> int:
    """GPUs of this machine, without initialising CUDA (0 with a CPU build of torch)."""
    import torch

    return torch.cuda.device_count()


def check_engines_available(c: RftConfig, v: Findings, preset: AlgorithmPreset | None,
                            models: ModelChoice) -> None:
    """Every engine the stage starts has its Python packages installed here."""
    train_only = preset is not None and preset.train_only
    if c.mode == "train" or train_only:
        return  # no engine starts
    external = cluster_address(c) not in PRIVATE_CLUSTER_ADDRESSES
    for planned in (models.rollout, *models.auxiliary):
        if planned is None:
            continue
        engine = planned.engine.implementation
        missing = [m for m in getattr(engine, "required_modules", ()) if module_missing(m)]
        if not missing:
            continue
        hint = getattr(engine, "install_hint", "") or "pip install " + " ".join(missing)
        message = (f"engine {planned.engine.name!r} needs {', '.join(missing)}, which is not "
                   f"installed here ({hint})")
        if external:  # the engines run on the cluster's nodes
            v.warnings.append(f"{planned.key}.engine_type: {message}; the nodes of the Ray "
                              f"cluster at {cluster_address(c)!r} need it")
        else:
            v.problem(f"{planned.key}.engine_type", message)


def check_host_gpus(c: RftConfig, v: Findings) -> None:
    """``cluster.gpu_per_node`` against this machine's GPUs when the run would use this
    machine alone (see the module docstring)."""
    asked = c.cluster.gpu_per_node
    address = cluster_address(c)
    if not asked or address not in PRIVATE_CLUSTER_ADDRESSES:
        return
    here = host_gpu_count()
    if asked <= here:
        return
    if address == "auto" and (ray_joined() or ray_cluster_started_here()):
        return  # `auto` joins that cluster; the run checks its GPUs through Ray
    v.problem("cluster.gpu_per_node",
              f"{asked} GPUs per node, but this machine has {here} and the run would use "
              f"it alone (cluster.ray_address {address!r}: no Ray cluster started here to "
              f"join): set gpu_per_node: {here}"
              + (" (CPU)" if here == 0 else "")
              + ", or give cluster.ray_address of a Ray cluster with such nodes")


def readme_configurations(folder: str) -> list[str] | None:
    """The configuration names of a dataset folder's ``README.md`` (its YAML front matter,
    ``configs[].config_name``); ``None``: no README or no front matter."""
    try:
        with open(os.path.join(folder, "README.md"), encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError):
        return None
    if not text.startswith("---"):
        return None
    end = text.find("\n---", 3)
    try:
        meta = yaml.safe_load(text[3:end] if end > 0 else "")
    except yaml.YAMLError:
        return None
    if not isinstance(meta, dict):
        return None
    names = []
    for entry in meta.get("configs") or []:
        if isinstance(entry, dict) and entry.get("config_name"):
            names.append(str(entry["config_name"]))
    return names


def check_subsets(c: RftConfig, v: Findings, buffer: BufferChoice) -> None:
    """A taskset's ``subset_name`` on a local folder names a subfolder or a configuration
    of its ``README.md``; on a local file it has no effect."""
    for planned in (*buffer.tasksets, *buffer.eval_tasksets):
        taskset = planned.config
        if not taskset.subset_name or not taskset.path or taskset.storage_type != "file":
            continue
        path = os.path.expanduser(taskset.path)
        key = f"{planned.key}.subset_name"
        if os.path.isfile(path):
            v.warnings.append(f"{key}: {taskset.subset_name!r} has no effect on a data file "
                              f"({taskset.path})")
        elif os.path.isdir(path) and not os.path.isdir(os.path.join(path,
                                                                   taskset.subset_name)):
            names = readme_configurations(path)
            if names is not None and taskset.subset_name in names:
                continue
            known = (f"its README.md names {', '.join(map(repr, names))}" if names
                     else "it has no README.md naming configurations")
            v.problem(key, f"{taskset.subset_name!r} is neither a subfolder of "
                      f"{taskset.path} nor one of its configurations ({known})")


def _models(c: RftConfig) -> list[tuple[str, InferenceModelConfig]]:
    return [("explorer.rollout_model", c.explorer.rollout_model),
            *((f"explorer.auxiliary_models[{i}]", m)
              for i, m in enumerate(c.explorer.auxiliary_models))]


def _default(cls: type, name: str) -> Any:
    return next(f.default for f in dataclasses.fields(cls) if f.name == name)


def check_no_effect(c: RftConfig, v: Findings, models: ModelChoice) -> None:
    """One warning per field set where nothing reads it (see the module docstring)."""
    said = v.said()
    warnings: list[str] = []
    engines = {p.key: p.engine for p in (models.rollout, *models.auxiliary) if p}
    for key, model in _models(c):
        engine = engines.get(key)
        if engine is None:
            continue
        honoured: frozenset[str] = getattr(engine.implementation, "engine_options", frozenset())
        for option in ENGINE_OPTIONS:
            value = getattr(model, option)
            if option not in honoured and value != _default(InferenceModelConfig, option):
                warnings.append(f"{key}.{option}: engine {engine.name!r} does not read it "
                                  f"(a vLLM setting); {value!r} has no effect")
    if c.mode in TRAINERLESS_MODES:
        for name in TRAINER_FIELDS:
            value = getattr(c.trainer, name)
            default = _default(TrainerConfig, name)
            if value != default:
                warnings.append(f"trainer.{name}: mode {c.mode!r} runs no trainer; "
                                  f"{value!r} has no effect")
    if c.mode == "colocate" and c.synchronizer.sync_method == "nccl":
        warnings.append("synchronizer.sync_method: mode 'colocate' runs explorer and trainer "
                        "in one process and updates the engine's weights in memory; 'nccl' "
                        "has no effect")
    v.warnings.extend(w for w in warnings if w.split(": ", 1)[0] not in said)


def check_host(c: RftConfig, v: Findings, preset: AlgorithmPreset | None, models: ModelChoice,
               buffer: BufferChoice) -> None:
    """The checks of this module, in order (``preset``, ``models`` and ``buffer``: what the
    algorithm's, the explorer's and the buffer's checks resolved)."""
    check_engines_available(c, v, preset, models)
    check_host_gpus(c, v)
    check_subsets(c, v, buffer)
    check_no_effect(c, v, models)


__all__ = ["ENGINE_OPTIONS", "TRAINER_FIELDS", "check_host", "host_gpu_count",
           "readme_configurations"]
