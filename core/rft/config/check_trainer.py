"""The ``trainer`` section's check: the backend, its ranks, checkpoints, gradient clip,
the memory estimate and the use of the engine's log-probs."""

from __future__ import annotations

import os
from typing import Any

from rft.algorithm import AlgorithmPreset
from rft.config.findings import Findings
from rft.config.plan import ModelPlan, Selected
from rft.config.schema import RftConfig
from rft.plugin_kinds import TRAINER


def check_trainer(c: RftConfig, found: Findings,
                  preset: AlgorithmPreset | None) -> Selected[Any] | None:
    """Trainer plugin, checkpoint settings; the trainer's ranks (FSDP2) and, for the
    ``torch`` trainer, the ``trainer_config`` keys it does not honour; then the backend's
    own :meth:`~rft.trainer.base.Trainer.check_config`. Returns the resolved trainer."""
    t = c.trainer
    trainer = found.select(TRAINER, "trainer.trainer_type", t.trainer_type)
    if t.cpu_ranks <= 0:
        found.problem("trainer.cpu_ranks", f"must be > 0, got {t.cpu_ranks}")
    else:
        check_trainer_ranks(c, found, preset)
    if t.save_interval < 0:
        found.problem("trainer.save_interval", f"must be >= 0, got {t.save_interval}")
    if t.max_checkpoints_to_keep is not None and t.max_checkpoints_to_keep <= 0:
        found.problem("trainer.max_checkpoints_to_keep",
                      f"must be > 0 (or null to keep all), got {t.max_checkpoints_to_keep}")
    check_grad_clip(c, found)
    check = getattr(trainer.implementation, "check_config", None) if trainer else None
    if check is not None:  # the backend's own checks (Trainer.check_config)
        problems, warnings = check(c)
        found.problems.extend(problems)
        found.warnings.extend(warnings)
    return trainer


def check_grad_clip(c: RftConfig, found: Findings) -> None:
    """``trainer.grad_clip`` (derived from ``algorithm.optimizer.clip_grad`` when unset)
    and ``clip_grad``: both > 0, and equal when both are set."""
    t, clip_grad = c.trainer, c.algorithm.optimizer.clip_grad
    if clip_grad is not None and clip_grad <= 0:
        found.problem("algorithm.optimizer.clip_grad", f"must be > 0, got {clip_grad}")
    if t.grad_clip is not None and t.grad_clip <= 0 and t.grad_clip != clip_grad:
        found.problem("trainer.grad_clip", f"must be > 0, got {t.grad_clip}")
    if t.grad_clip is not None and clip_grad is not None and t.grad_clip != clip_grad:
        found.problem("trainer.grad_clip", f"{t.grad_clip} differs from algorithm.optimizer."
                      f"clip_grad {clip_grad} (the same gradient clip); set one of them")


def check_trainer_ranks(c: RftConfig, found: Findings, preset: AlgorithmPreset | None) -> None:
    """``trainer.ranks`` and what the ``torch`` trainer needs of it."""
    t, cl = c.trainer, c.cluster
    torch_trainer = t.trainer_type == "torch"
    if torch_trainer and t.trainer_strategy == "megatron":
        if c.mode in ("both", "train") and (cl.trainer_gpu_num or 0) > 1:
            found.problem("trainer.trainer_strategy", "'megatron' is not supported by the "
                          "torch trainer: use fsdp2 (or trainer_type verl)")
        else:
            found.warnings.append("trainer.trainer_strategy: 'megatron' is not supported by "
                                  "the torch trainer; it runs as one process")
    ranks = t.ranks if t.ranks is not None else 1  # derived (rft.config.derive)
    if c.mode == "colocate" and t.cpu_ranks > 1 and ranks == 1:
        found.warnings.append(f"trainer.cpu_ranks: {t.cpu_ranks} ranks in mode 'colocate' "
                              "need the torch trainer on a CPU cluster (cluster.gpu_per_node: "
                              "0); it runs one trainer process")
    if cl.gpu_per_node == 0 and ranks > 1:
        cpus = (os.cpu_count() or 1) * (cl.node_num or 1)
        if ranks > cpus:
            found.problem("trainer.cpu_ranks", f"{ranks} trainer ranks need one CPU each "
                          f"but the cluster has {cpus} ({cl.node_num or 1} node(s) of "
                          f"{os.cpu_count()} CPUs)")
    if not torch_trainer:
        return
    if t.ulysses_sequence_parallel_size != 1:
        found.warnings.append(f"trainer.ulysses_sequence_parallel_size: "
                              f"{t.ulysses_sequence_parallel_size} is not honoured by the "
                              "torch trainer (no sequence parallelism); it runs with 1")
    from rft.config.support import TRAINER_CONFIG_REASON

    for key in unhonoured_trainer_keys(t.trainer_config):
        found.warnings.append(f"trainer.trainer_config.{key}: {TRAINER_CONFIG_REASON}")
    if ranks > 1 and preset is not None and c.buffer.train_batch_size:
        unit = preset.batch_layout.unit_size
        tree = t.trainer_config or {}
        mini = (tree.get("actor_rollout_ref") or {}).get("actor", {}) or {}
        mini_size = mini.get("ppo_mini_batch_size") if isinstance(mini, dict) else None
        rows = (int(mini_size) * (c.algorithm.repeat_times or 1) if mini_size
                else c.buffer.train_batch_size)
        rows = min(rows, c.buffer.train_batch_size)
        if rows // unit < ranks:
            found.problem("trainer.ranks", f"{ranks} trainer ranks need at least {ranks} "
                          f"{'rows' if unit == 1 else 'units of ' + str(unit) + ' rows'} per "
                          f"mini-batch (optimizer step), got {rows} rows "
                          "(buffer.train_batch_size, or actor_rollout_ref.actor."
                          "ppo_mini_batch_size × repeat_times)")


def unhonoured_trainer_keys(tree: dict[str, Any] | None) -> list[str]:
    """Dotted keys set in ``trainer_config`` that the ``torch`` trainer does not read (the
    ones it reads: :data:`rft.config.support.TRAINER_CONFIG_HONOURED`)."""
    from rft.config.support import TRAINER_CONFIG_HONOURED

    found: list[str] = []

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, dict) and node:
            for key, value in node.items():
                walk(value, f"{prefix}.{key}" if prefix else str(key))
        elif prefix and prefix not in TRAINER_CONFIG_HONOURED:
            found.append(prefix)

    walk(tree or {}, "")
    return found


def check_memory(c: RftConfig, found: Findings) -> None:
    """The trainer's memory per device against the device (:mod:`rft.config.memory_estimate`):
    a warning with suggestions when it does not fit, unless ``ignore_validator_suggestions``.
    Skipped for LoRA, and where the model's ``config.json`` or the device is not here."""
    from rft.config import memory_estimate as me

    if c.ignore_validator_suggestions or c.mode not in ("both", "train", "colocate") \
            or c.model.lora_configs or not c.model.model_path:
        return
    shape = me.read_shape(c.model.model_path)
    if shape is None:
        return
    t = c.trainer
    ranks = t.ranks or 1
    memory = me.trainer_memory(t.trainer_config, ranks, t.max_token_len_per_gpu)
    gpus = c.cluster.gpu_per_node
    import torch

    local_gpus = torch.cuda.device_count()  # NVML: CUDA stays uninitialised here
    if gpus == 0 or (gpus is None and not local_gpus):  # CPU ranks share the host's memory
        host = me.available_host_bytes()
        if host is None:
            return
        device_bytes, device = host, "host (available RAM)"
        sharing = -(-ranks // max(1, c.cluster.node_num or 1))
    else:
        gpu = me.gpu_total_bytes() if local_gpus else None
        if gpu is None:
            return  # GPUs elsewhere (none here): their memory is unknown here
        device_bytes, device, sharing = gpu, "GPU", 1
    line = me.suggestion(shape, memory, device_bytes, device, sharing)
    if line is not None:
        found.warnings.append(line)


def check_rollout_logprobs(c: RftConfig, found: Findings, rollout: ModelPlan | None) -> None:
    """``trainer_config.torch.use_rollout_logprobs`` trains on the engine's log-probs as the
    old ones: refused where the engine keeps its processed log-probs (no full-vocabulary
    re-scoring, :attr:`~rft.engines.engine.InferenceEngine.keeps_processed_logprobs`) for
    this sampling: ``T ∉ {0, 1}`` with top-p < 1, top-k > 0 or a repetition penalty."""
    engine = rollout.engine if rollout is not None else None
    torch_tree = (c.trainer.trainer_config or {}).get("torch") or {}
    if engine is None or not getattr(engine.implementation, "keeps_processed_logprobs", False) \
            or not torch_tree.get("use_rollout_logprobs"):
        return
    m, rm = c.model, c.explorer.rollout_model
    penalty = rm.repetition_penalty if rm.repetition_penalty is not None else m.repetition_penalty
    processed = (m.top_p < 1.0 or m.top_k > 0 or penalty != 1.0)
    if m.temperature in (0.0, 1.0) or not processed \
            or (rm.extra_engine_args or {}).get("rescore_full_vocabulary"):
        return
    found.problem("trainer.trainer_config.torch.use_rollout_logprobs",
                  f"engine {engine.name!r} keeps its processed log-probs at temperature "
                  f"{m.temperature:g} with top_p / top_k / repetition_penalty (re-scoring "
                  f"needs full-vocabulary prompt log-probs): leave it false (the trainer "
                  f"scores) or set explorer.rollout_model.extra_engine_args."
                  f"rescore_full_vocabulary: true")


__all__ = ["check_grad_clip", "check_memory", "check_rollout_logprobs", "check_trainer",
           "check_trainer_ranks", "unhonoured_trainer_keys"]
