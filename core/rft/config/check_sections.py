"""The checks of the smaller sections: names and job dir, model, synchronizer, the split
modes, monitor, data processor, and the fields rft accepts without implementing."""

from __future__ import annotations

import dataclasses
from typing import Any

from rft.algorithm import AlgorithmPreset
from rft.config.derive import SYNC_METHODS_BY_MODE
from rft.config.findings import Findings, is_remote, require_local, training_tasksets
from rft.config.plan import Selected
from rft.config.ray_timeline import check_ray_timeline
from rft.config.schema import ExperienceBufferConfig, RftConfig, TasksetConfig
from rft.plugin_kinds import EXPERIENCE_OPERATOR, MONITOR, SERVICE

SPLIT_MODES = ("explore", "train", "bench")
"""Modes that run one side of a run alone; weights move through the job dir's checkpoints."""


def check_global(c: RftConfig, found: Findings) -> None:
    """Names without ``/``; a checkpoint root dir."""
    for key in ("project", "name"):
        value = getattr(c, key)
        if not value or "/" in value:
            found.problem(key, f"must be a non-empty name without '/', got {value!r}")
    if not c.checkpoint_root_dir:
        found.problem("checkpoint_root_dir", "must be set")


def check_model(c: RftConfig, found: Findings) -> None:
    """Model path and token limits (``max_model_len`` derived when it can be)."""
    m = c.model
    if not m.model_path and not (m.external_model.enable and c.mode in ("bench", "explore")):
        found.problem("model.model_path", "must be set")  # external rollout model: a tokenizer
    require_local(found, "model.model_path", m.model_path)
    require_local(found, "model.chat_template_path", m.chat_template_path)
    for key in ("max_model_len", "max_prompt_tokens", "max_response_tokens"):
        value = getattr(m, key)
        if value is not None and value <= 0:
            found.problem(f"model.{key}", f"must be > 0, got {value}")
    if m.max_model_len is None:
        found.problem("model.max_model_len",
                      "cannot be derived: set it, or both model.max_prompt_tokens and "
                      "model.max_response_tokens")
        return
    if m.max_prompt_tokens is not None and m.max_response_tokens is not None:
        if m.max_prompt_tokens <= 0 or m.max_response_tokens <= 0:
            found.problem("model.max_model_len",
                          f"{m.max_model_len} leaves no room: max_prompt_tokens="
                          f"{m.max_prompt_tokens}, max_response_tokens={m.max_response_tokens}")
        elif m.max_prompt_tokens + m.max_response_tokens > m.max_model_len:
            found.warnings.append(
                f"model.max_model_len: {m.max_model_len} is less than max_prompt_tokens + "
                f"max_response_tokens = {m.max_prompt_tokens} + {m.max_response_tokens}: a "
                "response is cut at max_model_len minus its prompt's length (as in "
                "Trinity-RFT up to 0.3.0; later versions refuse this)")
    if m.max_response_tokens is not None and m.min_response_tokens >= m.max_response_tokens:
        found.problem("model.min_response_tokens",
                      f"must be less than max_response_tokens ({m.max_response_tokens}), "
                      f"got {m.min_response_tokens}")


def check_synchronizer(c: RftConfig, found: Findings) -> None:
    """Sync method against mode; positive intervals and timeout."""
    s = c.synchronizer
    allowed = SYNC_METHODS_BY_MODE.get(c.mode, ())
    if s.sync_method not in allowed:
        found.problem("synchronizer.sync_method",
                      f"{s.sync_method!r} does not work in mode {c.mode!r}; use "
                      + " or ".join(repr(m) for m in allowed))
    if s.sync_interval <= 0:
        found.problem("synchronizer.sync_interval", f"must be > 0, got {s.sync_interval}")
    if s.max_staleness is not None and s.max_staleness < 0:
        found.problem("synchronizer.max_staleness", f"must be >= 0, got {s.max_staleness}")
    if s.sync_offset < 0:
        found.problem("synchronizer.sync_offset", f"must be >= 0, got {s.sync_offset}")
    if s.sync_timeout <= 0:
        found.problem("synchronizer.sync_timeout",
                      f"must be > 0 seconds, got {s.sync_timeout}")
    if c.mode == "serve":
        check_serve(c, found)
    if s.partial_rollout:
        _check_partial_rollout(c, found)
    if c.mode == "colocate" and s.sync_offset != 0:
        found.problem("synchronizer.sync_offset", "mode 'colocate' alternates explore and "
                      f"train: must be 0, got {s.sync_offset}")


def check_serve(c: RftConfig, found: Findings) -> None:
    """Mode ``serve``: one engine; a positive cap on pending responses and
    checkpoint-poll interval."""
    e = c.explorer
    if e.serve_max_pending < 1:
        found.problem("explorer.serve_max_pending", f"must be >= 1, got {e.serve_max_pending}")
    if e.rollout_model.engine_num > 1:
        found.problem("explorer.rollout_model.engine_num", "mode 'serve' serves one engine "
                      f"in its process: must be 1, got {e.rollout_model.engine_num}")
    if e.service_status_check_interval <= 0:
        found.problem("explorer.service_status_check_interval",
                      f"must be > 0 seconds, got {e.service_status_check_interval}")


def _check_partial_rollout(c: RftConfig, found: Findings) -> None:
    """``synchronizer.partial_rollout``: mode ``both``, one rollout engine in the explorer's
    process, a synchronizer that hands weights out (not one the explorer asks for), and no
    taskset with images (:meth:`~rft.engines.partial_rollout.PartialRollouts.call` resumes
    an interrupted completion from its token ids alone, without its pixels)."""
    key = "synchronizer.partial_rollout"
    if c.mode != "both":
        found.problem(key, f"works in mode 'both' only, not {c.mode!r}")
    if c.explorer.rollout_model.engine_num > 1:
        found.problem(key, "needs explorer.rollout_model.engine_num: 1 (the engine in the "
                      f"explorer's process), got {c.explorer.rollout_model.engine_num}")
    if c.synchronizer.sync_style in ("explorer_driven", "dynamic_by_explorer"):
        found.problem(key, "needs a synchronizer.sync_style where the trainer hands out "
                      f"weights (fixed or trainer_driven), got {c.synchronizer.sync_style!r}")
    with_images = [f"{where}.format.{name}" for where, taskset in _explorer_tasksets(c)
                   for name in ("image_key", "video_key") if getattr(taskset.format, name)]
    if with_images:
        found.problem(key, f"prompts with images ({', '.join(with_images)}) cannot be "
                      "interrupted and resumed: the resumption re-sends token ids without the "
                      "images' pixels; set it false (docs/multimodal.md)")


def _explorer_tasksets(c: RftConfig) -> list[tuple[str, TasksetConfig]]:
    """The explorer's tasksets (training, then eval) with their dotted keys."""
    evals = [(f"buffer.explorer_input.eval_tasksets[{i}]", t)
             for i, t in enumerate(c.buffer.explorer_input.eval_tasksets)]
    return [*training_tasksets(c), *evals]


def check_split_modes(c: RftConfig, found: Findings, preset: AlgorithmPreset | None) -> None:
    """``explore`` / ``train`` / ``bench``: what a side running alone needs from the config
    (the other side is another process that shares the job dir and the experience buffer)."""
    train_only = preset is not None and preset.train_only
    if c.mode == "serve" and train_only:
        found.problem("mode", f"algorithm {c.algorithm.algorithm_type!r} is train-only: mode "
                      "'serve' trains on rewarded responses; use an RL algorithm (grpo, …)")
    if c.mode not in SPLIT_MODES:
        return
    buffer_key = "buffer.trainer_input.experience_buffer.storage_type"
    storage = c.buffer.trainer_input.experience_buffer
    assert storage is not None  # derived (rft.config.derive.derive_buffer)
    if c.mode == "explore" and train_only:
        found.problem("mode", f"algorithm {c.algorithm.algorithm_type!r} is train-only: there "
                      "is nothing to explore; use mode 'train'")
    if storage.storage_type == "queue" and c.mode in ("explore", "train") and not train_only:
        check_shared_queue(c, storage, found)
    if c.mode == "train" and not train_only:
        if storage.storage_type not in ("sql", "queue"):
            found.problem(buffer_key, f"mode 'train' with algorithm "
                          f"{c.algorithm.algorithm_type!r} reads what an 'explore' process "
                          "writes: use 'sql' (or 'queue' on a shared Ray cluster), got "
                          f"{storage.storage_type!r}")
        if not c.trainer.total_steps and not training_tasksets(c):
            found.problem("buffer.total_steps", "mode 'train' cannot tell how many steps to "
                          "train: set it (or trainer.total_steps), or give the explorer's "
                          "taskset")
    if c.mode == "bench":
        if not c.buffer.explorer_input.eval_tasksets:
            found.problem("buffer.explorer_input.eval_tasksets",
                          "mode 'bench' evaluates checkpoints on eval tasksets: set at least "
                          "one")
        hosted = is_remote(found.registry, c.explorer.rollout_model.engine_type)
        if not c.continue_from_checkpoint and not hosted:  # a hosted model needs no checkpoint
            found.problem("continue_from_checkpoint", "mode 'bench' evaluates the checkpoints "
                          "of an existing run: must be true (false starts a new, empty "
                          "<name>_<time>)")
    elif not c.continue_from_checkpoint and not (c.mode == "train" and train_only):
        found.warnings.append(f"continue_from_checkpoint: false gives this {c.mode!r} run its "
                              "own <name>_<timestamp> job dir, which the other side's process "
                              "will not find; set true to share checkpoints")


def check_shared_queue(c: RftConfig, storage: ExperienceBufferConfig, found: Findings) -> None:
    """A ``queue`` between an ``explore`` and a ``train`` process is a Ray actor on a cluster
    both join (:mod:`rft.distributed.shared_queue`): not a private cluster, not a replay
    buffer."""
    if c.cluster.ray_address == "local":
        found.problem("cluster.ray_address", f"'local' starts a private Ray cluster, but "
                      f"storage_type 'queue' in mode {c.mode!r} lives on a Ray cluster that "
                      "the explore and train processes share: give its address, or auto")
    if storage.replay_buffer is not None and storage.replay_buffer.enable:
        found.problem("buffer.trainer_input.experience_buffer.replay_buffer.enable",
                      f"a replay buffer is not shared between processes (mode {c.mode!r}); "
                      "use it in mode 'both' or 'colocate'")


def check_monitor(c: RftConfig, found: Findings) -> Selected[Any] | None:
    """Monitor plugin and its args; returns the resolved monitor."""
    monitor = found.select(MONITOR, "monitor.monitor_type", c.monitor.monitor_type,
                           c.monitor.monitor_args)
    check_ray_timeline(c, found)
    check_rollout_record(c, found)
    return monitor


def check_rollout_record(c: RftConfig, found: Findings) -> None:
    """``monitor.rollout_record_every`` ≥ 1 and ``rollout_record_max_mb`` > 0; a warning
    when the record is on where nothing writes it: mode ``serve`` whose steps a separate
    ``train`` process trains (``sync_method`` other than ``memory``). Modes ``colocate``,
    ``both``, ``explore`` and ``serve`` training in process write it
    (:mod:`rft.monitor.rollout_record`); ``train`` and ``bench`` have no explore step."""
    m = c.monitor
    if m.rollout_record_every < 1:
        found.problem("monitor.rollout_record_every",
                      f"must be 1 or more (record every k-th explore step), got "
                      f"{m.rollout_record_every}")
    if not m.rollout_record_max_mb > 0:
        found.problem("monitor.rollout_record_max_mb",
                      f"must be above 0 (MiB), got {m.rollout_record_max_mb}")
    if m.rollout_record and c.mode == "serve" and c.synchronizer.sync_method != "memory":
        found.warnings.append(
            f"monitor.rollout_record: mode 'serve' with synchronizer.sync_method "
            f"{c.synchronizer.sync_method!r} records nothing (its steps are trained by the "
            "separate train process, which explores nothing); sync_method 'memory' records "
            "the batch of every rollout_record_every-th step")


def check_data_processor(c: RftConfig, found: Findings) -> tuple[Selected[Any], ...]:
    """Experience operators named in the experience pipeline; returns those resolved."""
    pipeline = c.data_processor.experience_pipeline
    if pipeline is None:
        return ()
    for name, source in pipeline.inputs.items():
        key = f"data_processor.experience_pipeline.inputs.{name}"
        if source.storage_type == "queue":
            found.problem(f"{key}.storage_type", "'queue' lives in one process and nothing "
                          "else writes it; an input buffer is a file or sql buffer")
        elif not source.path:
            found.problem(f"{key}.path", f"required: the {source.storage_type} buffer whose "
                          "experiences join each explore step's in the pipeline")
    operators: list[Selected[Any]] = []
    for i, operator in enumerate(pipeline.operators):
        key = f"data_processor.experience_pipeline.operators[{i}]"
        chosen = found.select(EXPERIENCE_OPERATOR, f"{key}.name", operator.name,
                              operator.args, f"{key}.args")
        if chosen is None:
            continue
        operators.append(chosen)
        for needed in getattr(chosen.implementation, "needs_services", ()):
            if getattr(c.service, needed, None) is None:
                found.problem(f"{key}.name", f"the {operator.name} experience operator "
                              f"works through service.{needed}, which is not set (e.g. "
                              f"service: {{{needed}: {{auto_start: true}}}})")
    return tuple(operators)


def check_services(c: RftConfig, found: Findings) -> tuple[Selected[Any], ...]:
    """Each section of ``service`` that is set resolves to the run service registered
    under its name (:mod:`rft.services`); returns those resolved."""
    dj = c.service.data_juicer
    if dj is not None and not dj.auto_start and not dj.server_url:
        found.problem("service.data_juicer", "set auto_start: true (the run starts a "
                      "Data-Juicer server) or server_url (a running one)")
    elif dj is not None and dj.auto_start and dj.server_url:
        found.warnings.append(f"service.data_juicer.server_url: ignored ({dj.server_url!r}): "
                              "auto_start: true starts the run's own server")
    services: list[Selected[Any]] = []
    for spec in dataclasses.fields(c.service):
        section = getattr(c.service, spec.name)
        if section is None:
            continue
        key = f"service.{spec.name}"
        if not found.registry.has(SERVICE, spec.name):
            found.problems.append(found.registry.unknown_name_message(
                SERVICE, spec.name, key=key))
            continue
        services.append(Selected(key, spec.name, found.registry.get(SERVICE, spec.name),
                                 section))
    return tuple(services)


def check_support(c: RftConfig, found: Findings) -> None:
    """Fields rft accepts but does not implement (:mod:`rft.config.support`): one line each
    naming the key, a warning (a problem where running without it would mislead); and the
    ``trainer.trainer_config`` key paths the torch trainer does not read. A key an earlier
    check already reported is not reported again."""
    from rft.config.support import support_messages

    problems, warnings = support_messages(c)
    said = found.said()
    found.problems.extend(p for p in problems if p.split(": ", 1)[0] not in said)
    found.warnings.extend(w for w in warnings if w.split(": ", 1)[0] not in said)


__all__ = ["SPLIT_MODES", "check_data_processor", "check_global", "check_model",
           "check_monitor", "check_shared_queue", "check_split_modes", "check_support",
           "check_synchronizer"]
