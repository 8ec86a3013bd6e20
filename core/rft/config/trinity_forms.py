"""Trinity-RFT's other spellings of rft fields, read into rft's own (the first derivation).

Trinity-RFT's example configs are written across its versions; each form below is one of
them, turned into rft's field so that the rest of validation sees one spelling:

- ``synchronizer.sync_style: dynamic_by_explorer`` / ``dynamic_by_trainer`` →
  ``explorer_driven`` / ``trainer_driven`` (the names of the configuration guide);
- ``engine_type: vllm_async`` (Trinity's asynchronous vLLM engine) → ``vllm`` (rft's
  vLLM engine serves concurrent requests) for the rollout and auxiliary models;
- ``trainer.ppo_max_token_len_per_gpu`` → ``trainer.max_token_len_per_gpu``;
- ``experience_buffer.use_priority_queue: true`` → ``replay_buffer.enable: true``;
- ``trainer.trainer_config_path`` (a veRL YAML file) → ``trainer.trainer_config`` when
  that is empty, as Trinity-RFT reads it; a file missing here is a warning (the config may
  be meant for another machine) and a one-line error when a run starts
  (:func:`rft.modes.preflight.check_data_sources`); its keys that mirror rft fields, and
  the sections rft owns, are then reconciled as Trinity-RFT does
  (:func:`rft.config.verl_keys.reconcile`, which also runs on an inline tree);
- ``algorithm.sample_strategy: warmup`` (Trinity-RFT's default, which reads an SFT
  warm-up dataset first when one is configured; rft has none) → ``default``;
- ``algorithm.policy_loss_fn_args.loss_agg_mode`` → ``algorithm.loss_agg_mode``;
- a taskset's ``rollout_args.n`` → unset (Trinity-RFT overwrites it with the taskset's
  repeat count), with a warning when it differs from that count;
- ``explorer.runner_num``: deprecated in Trinity-RFT, which ignores it; so does rft, with
  a warning naming ``runner_per_model``;
- ``explorer.listen_address`` / ``explorer.proxy_port`` (Trinity-RFT's serve-mode
  endpoint) → ``explorer.rollout_model.openai_api_host`` / ``openai_api_port`` (a
  different value set in both places is a problem);
- ``buffer.trainer_input.sft_warmup_dataset`` (Trinity-RFT 0.2's expert data of ``mix``)
  → ``auxiliary_buffers.sft_dataset``, with a warning; a storage's ``algorithm_type`` →
  ``schema_type``;
- the mix / CHORD losses' batch bookkeeping in ``policy_loss_fn_args``
  (:data:`MIX_BATCH_ARGS`: Trinity-RFT normalises each part by sizes written by hand; rft
  aggregates the loss over the batch itself) → dropped, with a warning naming them;
  ``sft_loss_agg_mode`` / ``grpo_loss_agg_mode`` / ``use_token_level_loss_in_sft`` →
  accepted when they equal ``algorithm.loss_agg_mode`` (rft's one mode for every part),
  refused otherwise.

- ``data_processor.data_processor_url`` (Trinity-RFT's older Data-Juicer service) →
  ``service.data_juicer.server_url``, with a warning (a different ``server_url`` set too
  is a problem);
- ``data_processor.experience_pipeline.output`` → ``buffer.trainer_input.experience_buffer``
  (a different one set too is a problem);
- ``data_processor.task_pipeline.config_path`` (a Data-Juicer recipe), or
  ``dj_process_desc`` + ``agent_model_name`` / ``agent_model_config`` (an LLM writes the
  recipe) → one ``data_juicer`` task operator (``rft-plugin-data-juicer``) running it;

- ``checkpoint_root_dir: ''`` (Trinity-RFT's test template) → ``.``: Trinity-RFT joins
  a relative root onto the working directory, so the empty root is the working directory;
- a ``queue`` experience buffer's ``path`` naming a directory (``./exp_buffer``) → the
  JSON lines file ``<dir>/<name>.jsonl`` inside it
  (:func:`rft.config.buffer_paths.resolve_queue_backup`).

Keys that no Trinity-RFT version reads but its example configs wrote
(:data:`UNKNOWN_KEY_HINTS`) get a one-line message naming the field to use.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any, Literal, TypeVar

from rft.config.buffer_paths import resolve_queue_backup
from rft.config.findings import Findings
from rft.config.schema import (DataJuicerServiceConfig, ExperienceBufferConfig,
                               InferenceModelConfig, OperatorConfig, RftConfig, TasksetConfig,
                               TrainerInputConfig)
from rft.config.verl_keys import reconcile
from rft.errors import ConfigError

SYNC_STYLE_NAMES: dict[str, Literal["explorer_driven", "trainer_driven"]] = {
    "dynamic_by_explorer": "explorer_driven", "dynamic_by_trainer": "trainer_driven"}
"""Trinity-RFT's sync style names and rft's."""

ENGINE_NAMES = {"vllm_async": "vllm"}
"""Trinity-RFT's engine names and rft's."""

SAMPLE_STRATEGY_NAMES = {"warmup": "default"}
"""Trinity-RFT's sample strategy names and rft's (``warmup`` reads an SFT warm-up dataset
first when one is configured; rft has none, so it is the default strategy)."""

LOSS_AGG_MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean",
                  "seq-mean-token-sum-norm")
"""The values of ``algorithm.loss_agg_mode``."""

MIX_BATCH_ARGS = ("use_dynamic_bsz", "ppo_mini_batch_size", "ppo_micro_batch_size_per_gpu",
                  "ngpus_trainer", "train_batch_size_usual", "train_batch_size_expert",
                  "read_batch_size_usual", "read_batch_size_expert", "repeat_times")
"""Arguments of Trinity-RFT's mix / CHORD policy losses that tell them the veRL batch and
micro-batch sizes (to weight the RL and SFT parts by their own share); rft's trainer knows
its batches and aggregates the loss itself, so they have no effect."""

SFT_TOKEN_LEVEL_MODES = {True: "token-mean", False: "seq-mean-token-mean"}
"""Trinity-RFT 0.2's ``use_token_level_loss_in_sft`` as a ``loss_agg_mode``."""

SFT_WARMUP_BUFFER = "sft_dataset"
"""The auxiliary buffer ``sft_warmup_dataset`` is read as (Trinity-RFT's name of mix's
expert buffer)."""

UNKNOWN_KEY_HINTS = {
    "algorithm.mu": "not a field of Trinity-RFT or rft (Trinity-RFT refuses it too); the "
                    "SFT weight of mix is algorithm.policy_loss_fn_args.mu",
    "buffer.expert_data_ratio": "not a field of Trinity-RFT or rft (Trinity-RFT refuses it "
                                "too); mix's share of expert rows is "
                                "algorithm.sample_strategy_args.expert_data_ratio",
    "buffer.explore_batch_size": "not a field of Trinity-RFT or rft (Trinity-RFT refuses it "
                                 "too); tasks explored per step are buffer.batch_size, "
                                 "experiences trained per step buffer.train_batch_size",
}
"""Keys written in Trinity-RFT example configs that no version of it reads, and what to
write instead."""

MISSING_TRAINER_CONFIG_HERE = ("does not exist here: its veRL settings are not checked; "
                               "`rft run` stops at start unless it exists where it runs")


def derive_trinity_forms(c: RftConfig, found: Findings) -> RftConfig:
    """``c`` with Trinity-RFT's spellings (module docstring) read into rft's fields; ``c``
    itself is not changed. Conflicting spellings are problems in ``found``."""
    s, a = c.synchronizer, c.algorithm
    if c.explorer.runner_num is not None:
        found.warnings.append(
            f"explorer.runner_num: deprecated in Trinity-RFT and ignored (there too); each "
            f"rollout engine runs explorer.runner_per_model={c.explorer.runner_per_model} "
            "workflow runners")
    c = replace(
        c, synchronizer=replace(s, sync_style=SYNC_STYLE_NAMES.get(s.sync_style, s.sync_style)),
        explorer=replace(c.explorer, rollout_model=_engine_name(c.explorer.rollout_model),
                         auxiliary_models=[_engine_name(m)
                                           for m in c.explorer.auxiliary_models]),
        algorithm=a if a.sample_strategy is None else replace(
            a, sample_strategy=SAMPLE_STRATEGY_NAMES.get(a.sample_strategy, a.sample_strategy)),
        checkpoint_root_dir=os.curdir if c.checkpoint_root_dir == "" else c.checkpoint_root_dir)
    c = _serve_address(c, found)
    c = _queue_backup_directory(c)
    c = _loss_agg_mode(c, found)
    c = _mix_loss_args(c, found)
    c = _sft_warmup_dataset(c, found)
    c = _storage_algorithm_types(c, found)
    c = _samples_per_task(c, found)
    c = _token_len(c, found)
    c = _priority_queue(c, found)
    c = _data_processor_url(c, found)
    c = _task_pipeline_recipe(c, found)
    c = _pipeline_output(c, found)
    c, from_file = _trainer_config_file(c, found)
    return reconcile(c, found.warnings, found.problems, from_file=from_file)


_Model = TypeVar("_Model", bound=InferenceModelConfig)


def _data_processor_url(c: RftConfig, found: Findings) -> RftConfig:
    """``data_processor.data_processor_url`` (Trinity-RFT's older form) →
    ``service.data_juicer.server_url``, with a warning; a different ``server_url`` set
    too is a problem."""
    url = c.data_processor.data_processor_url
    if url is None:
        return c
    key = "data_processor.data_processor_url"
    dj = c.service.data_juicer or DataJuicerServiceConfig()
    if dj.server_url is not None and dj.server_url != url:
        found.problem(key, f"{url!r} differs from service.data_juicer.server_url "
                           f"{dj.server_url!r}; set one of them")
        return c
    found.warnings.append(f"{key}: Trinity-RFT's older form, read as "
                          f"service.data_juicer.server_url ({url!r})")
    return replace(c, service=replace(c.service, data_juicer=replace(dj, server_url=url)))


def _pipeline_output(c: RftConfig, found: Findings) -> RftConfig:
    """``data_processor.experience_pipeline.output`` (where processed experiences go) →
    ``buffer.trainer_input.experience_buffer`` (what the trainer reads), as in
    Trinity-RFT; both set and different is a problem."""
    pipeline = c.data_processor.experience_pipeline
    if pipeline is None or pipeline.output is None:
        return c
    current = c.buffer.trainer_input.experience_buffer
    if current is not None and current != pipeline.output:
        found.problem("data_processor.experience_pipeline.output",
                      "differs from buffer.trainer_input.experience_buffer, which the trainer "
                      "reads; set one of them (the pipeline writes what the trainer reads)")
        return c
    return _with_trainer_input(c, replace(c.buffer.trainer_input,
                                          experience_buffer=pipeline.output))


def _task_pipeline_recipe(c: RftConfig, found: Findings) -> RftConfig:
    """``data_processor.task_pipeline.config_path`` (a Data-Juicer recipe for the whole
    pipeline, Trinity-RFT's form), or its older ``dj_process_desc`` with
    ``agent_model_name`` / ``agent_model_config`` (an LLM writes the recipe) → one
    ``data_juicer`` task operator; as in Trinity-RFT, ``operators`` set beside them are
    ignored (a warning)."""
    pipeline = c.data_processor.task_pipeline
    if pipeline is None or (pipeline.config_path is None and not pipeline.dj_process_desc):
        return c
    if pipeline.config_path is not None:
        args: dict[str, Any] = {"config_path": pipeline.config_path}
        said = f"config_path ({pipeline.config_path!r})"
    else:
        args = {"dj_process_desc": pipeline.dj_process_desc,
                "agent_model_name": pipeline.agent_model_name,
                "agent_model_config": dict(pipeline.agent_model_config)}
        said = "dj_process_desc"
        found.warnings.append(
            f"data_processor.task_pipeline: Trinity-RFT's older agent form, read as one "
            f"data_juicer task operator: agent_model_name {pipeline.agent_model_name!r} "
            "writes its Data-Juicer recipe from dj_process_desc when the pipeline runs")
    if pipeline.operators:
        found.warnings.append(f"data_processor.task_pipeline.operators: ignored: {said} is "
                              "the pipeline's Data-Juicer recipe")
    operators = [OperatorConfig("data_juicer", args)]
    return replace(c, data_processor=replace(
        c.data_processor, task_pipeline=replace(pipeline, operators=operators)))


def _engine_name(model: _Model) -> _Model:
    """Trinity-RFT's engine name → rft's (:data:`ENGINE_NAMES`)."""
    return replace(model, engine_type=ENGINE_NAMES.get(model.engine_type, model.engine_type))


def _with_trainer_input(c: RftConfig, trainer_input: TrainerInputConfig) -> RftConfig:
    return replace(c, buffer=replace(c.buffer, trainer_input=trainer_input))


def _serve_address(c: RftConfig, found: Findings) -> RftConfig:
    """``explorer.listen_address`` / ``proxy_port`` into the rollout model's
    ``openai_api_host`` / ``openai_api_port`` (module docstring)."""
    e, rm = c.explorer, c.explorer.rollout_model
    default = InferenceModelConfig()
    changes: dict[str, Any] = {}
    for trinity, ours, value in (("listen_address", "openai_api_host", e.listen_address),
                                 ("proxy_port", "openai_api_port", e.proxy_port)):
        if value is None:
            continue
        current = getattr(rm, ours)
        if current != getattr(default, ours) and current != value:
            found.problem(f"explorer.{trinity}", f"{value!r} differs from "
                          f"explorer.rollout_model.{ours}={current!r}; set one of them")
            continue
        changes[ours] = value
    if not changes:
        return c
    return replace(c, explorer=replace(e, rollout_model=replace(rm, **changes)))


def _queue_backup_directory(c: RftConfig) -> RftConfig:
    """A queue's backup ``path`` naming a directory → ``<dir>/<name>.jsonl``."""
    ti = c.buffer.trainer_input
    buffer = ti.experience_buffer
    if buffer is None or buffer.storage_type != "queue" or not buffer.path:
        return c
    path = resolve_queue_backup(buffer.path, buffer.name or "experience_buffer")
    return _with_trainer_input(c, replace(ti, experience_buffer=replace(buffer, path=path)))


def _buffers(ti: TrainerInputConfig) -> list[tuple[str, str | None, ExperienceBufferConfig]]:
    """``(dotted key, auxiliary name or None, buffer)`` of every trainer-input buffer."""
    found: list[tuple[str, str | None, ExperienceBufferConfig]] = []
    if ti.experience_buffer is not None:
        found.append(("buffer.trainer_input.experience_buffer", None, ti.experience_buffer))
    found += [(f"buffer.trainer_input.auxiliary_buffers.{name}", name, b)
              for name, b in ti.auxiliary_buffers.items()]
    return found


def _replace_buffer(ti: TrainerInputConfig, name: str | None,
                    buffer: ExperienceBufferConfig) -> TrainerInputConfig:
    """``ti`` with the experience buffer (``name`` None) or an auxiliary one replaced."""
    if name is None:
        return replace(ti, experience_buffer=buffer)
    return replace(ti, auxiliary_buffers={**ti.auxiliary_buffers, name: buffer})


def _priority_queue(c: RftConfig, found: Findings) -> RftConfig:
    """``use_priority_queue: true`` enables the buffer's replay buffer."""
    ti = c.buffer.trainer_input
    for key, name, buffer in _buffers(ti):
        if not buffer.use_priority_queue:
            continue
        if buffer.replay_buffer is None:
            found.problem(f"{key}.use_priority_queue", "true, but replay_buffer is null "
                          "(disabled); use_priority_queue is Trinity-RFT's older "
                          "replay_buffer.enable")
        else:
            ti = _replace_buffer(ti, name, replace(
                buffer, replay_buffer=replace(buffer.replay_buffer, enable=True)))
    return _with_trainer_input(c, ti)


def _loss_agg_mode(c: RftConfig, found: Findings) -> RftConfig:
    """Trinity-RFT's policy losses take ``loss_agg_mode`` as an argument; rft's is
    ``algorithm.loss_agg_mode`` (one mode for every loss term)."""
    a = c.algorithm
    args = a.policy_loss_fn_args
    if not isinstance(args, dict) or "loss_agg_mode" not in args:
        return c
    mode = args["loss_agg_mode"]
    a = replace(a, policy_loss_fn_args={k: v for k, v in args.items() if k != "loss_agg_mode"})
    key = "algorithm.policy_loss_fn_args.loss_agg_mode"
    if mode not in LOSS_AGG_MODES:
        found.problem(key, f"{mode!r} is not allowed; expected one of "
                      + ", ".join(repr(m) for m in LOSS_AGG_MODES))
    elif a.loss_agg_mode is not None and a.loss_agg_mode != mode:
        found.problem(key, f"{mode!r} differs from algorithm.loss_agg_mode "
                      f"{a.loss_agg_mode!r} (rft's place for it); set one")
    else:
        a = replace(a, loss_agg_mode=mode)
    return replace(c, algorithm=a)


def explain_unknown_keys(problems: list[str]) -> list[str]:
    """``problems`` with the unknown-key line of each :data:`UNKNOWN_KEY_HINTS` key
    replaced by its hint."""
    explained = []
    for line in problems:
        key = line.split(": unknown key", 1)[0] if ": unknown key" in line else None
        explained.append(f"{key}: {UNKNOWN_KEY_HINTS[key]}" if key in UNKNOWN_KEY_HINTS
                         else line)
    return explained


def _mix_loss_args(c: RftConfig, found: Findings) -> RftConfig:
    """Trinity-RFT's batch bookkeeping (:data:`MIX_BATCH_ARGS`) is dropped with a warning;
    a per-part aggregation mode is accepted when it is rft's one mode."""
    args = c.algorithm.policy_loss_fn_args
    if not isinstance(args, dict):
        return c
    key = "algorithm.policy_loss_fn_args"
    dropped = [name for name in MIX_BATCH_ARGS if name in args]
    if dropped:
        found.warnings.append(
            f"{key}: {', '.join(dropped)}: Trinity-RFT's batch sizes for weighting its mix / "
            "CHORD loss parts; rft's trainer aggregates the loss over its own batches "
            "(algorithm.loss_agg_mode), so they have no effect")
    mode = c.algorithm.loss_agg_mode or "token-mean"
    modes: dict[str, Any] = {name: args[name] for name in ("sft_loss_agg_mode",
                                                           "grpo_loss_agg_mode") if name in args}
    if "use_token_level_loss_in_sft" in args:
        token_level = args["use_token_level_loss_in_sft"]
        modes["use_token_level_loss_in_sft"] = SFT_TOKEN_LEVEL_MODES.get(
            bool(token_level), token_level)
    for name, value in modes.items():
        if value is not None and value != mode:
            found.problem(f"{key}.{name}", f"means loss_agg_mode {value!r}, but rft aggregates "
                          f"every loss part with algorithm.loss_agg_mode {mode!r}; set that, "
                          "or drop this")
    removed = set(dropped) | set(modes)
    if not removed:
        return c
    kept = {k: v for k, v in args.items() if k not in removed}
    return replace(c, algorithm=replace(c.algorithm, policy_loss_fn_args=kept))


def _sft_warmup_dataset(c: RftConfig, found: Findings) -> RftConfig:
    """Trinity-RFT 0.2 read mix's expert rows from ``sft_warmup_dataset``; rft reads them
    from an auxiliary buffer (:data:`SFT_WARMUP_BUFFER`)."""
    ti = c.buffer.trainer_input
    if ti.sft_warmup_dataset is None:
        return c
    key = "buffer.trainer_input.sft_warmup_dataset"
    if SFT_WARMUP_BUFFER in ti.auxiliary_buffers:
        found.problem(key, f"and auxiliary_buffers.{SFT_WARMUP_BUFFER} are both set (this is "
                      "Trinity-RFT 0.2's place of it); set one")
        return c
    found.warnings.append(f"{key}: read as buffer.trainer_input.auxiliary_buffers."
                          f"{SFT_WARMUP_BUFFER} (the expert data of mix / mix_chord; rft has "
                          "no SFT warm-up steps: for a warm-up, use stages)")
    return _with_trainer_input(c, replace(
        ti, sft_warmup_dataset=None,
        auxiliary_buffers={**ti.auxiliary_buffers, SFT_WARMUP_BUFFER: ti.sft_warmup_dataset}))


def _storage_algorithm_types(c: RftConfig, found: Findings) -> RftConfig:
    """A storage's Trinity-RFT 0.2 ``algorithm_type`` (what its rows are) →
    ``schema_type``: ``sft`` / ``dpo`` rows, experiences for any other algorithm."""
    ti = c.buffer.trainer_input
    for key, name, buffer in _buffers(ti):
        if buffer.algorithm_type is None:
            continue
        kind: Literal["sft", "dpo", "experience"] = (
            "sft" if buffer.algorithm_type == "sft"
            else "dpo" if buffer.algorithm_type == "dpo" else "experience")
        if buffer.schema_type is not None and buffer.schema_type != kind:
            found.problem(f"{key}.algorithm_type", f"{buffer.algorithm_type!r} (rows of kind "
                          f"{kind!r}) differs from schema_type {buffer.schema_type!r}; set one")
            continue
        ti = _replace_buffer(ti, name, replace(buffer, schema_type=kind))
    return _with_trainer_input(c, ti)


def _samples_per_task(c: RftConfig, found: Findings) -> RftConfig:
    """A taskset's ``rollout_args.n``: Trinity-RFT overwrites it with the taskset's repeat
    count (``algorithm.repeat_times`` for the training taskset, the eval taskset's own
    ``repeat_times``), so rft reads it as unset; a value other than that count gets a
    warning naming the key (it has no effect, there as here)."""
    ei = c.buffer.explorer_input

    def read(taskset: TasksetConfig, key: str, default_repeat: int | None) -> TasksetConfig:
        n = taskset.rollout_args.n
        if n is None:
            return taskset
        repeat = taskset.repeat_times or default_repeat
        if n != repeat:
            found.warnings.append(
                f"{key}.rollout_args.n: ignored ({n}): the samples per task are the "
                f"taskset's repeat_times ({repeat}); Trinity-RFT overwrites n with it too")
        return replace(taskset, rollout_args=replace(taskset.rollout_args, n=None))

    key = "buffer.explorer_input"
    ei = replace(ei, taskset=None if ei.taskset is None else read(
                     ei.taskset, f"{key}.taskset", c.algorithm.repeat_times),
                 tasksets=[read(t, f"{key}.tasksets[{i}]", c.algorithm.repeat_times)
                           for i, t in enumerate(ei.tasksets)],
                 eval_tasksets=[read(t, f"{key}.eval_tasksets[{i}]", 1)
                                for i, t in enumerate(ei.eval_tasksets)])
    return replace(c, buffer=replace(c.buffer, explorer_input=ei))


def _token_len(c: RftConfig, found: Findings) -> RftConfig:
    """``trainer.ppo_max_token_len_per_gpu`` → ``trainer.max_token_len_per_gpu``."""
    t = c.trainer
    if t.ppo_max_token_len_per_gpu is None:
        return c
    current = t.max_token_len_per_gpu
    if current is not None and current != t.ppo_max_token_len_per_gpu:
        found.problem("trainer.ppo_max_token_len_per_gpu",
                      f"{t.ppo_max_token_len_per_gpu} differs from trainer.max_token_len_per_"
                      f"gpu {t.max_token_len_per_gpu} (Trinity-RFT's older name of it); set one")
        return c
    return replace(c, trainer=replace(t, max_token_len_per_gpu=t.ppo_max_token_len_per_gpu))


def _trainer_config_file(c: RftConfig, found: Findings) -> tuple[RftConfig, bool]:
    """Read ``trainer.trainer_config_path``; whether ``trainer_config`` came from it."""
    t = c.trainer
    path = t.trainer_config_path
    if not path:
        return c, False
    key = "trainer.trainer_config_path"
    if t.trainer_config:
        found.warnings.append(f"{key}: not read, trainer.trainer_config is set (it wins, as "
                              "in Trinity-RFT)")
        return c, False
    if not os.path.isfile(os.path.expanduser(path)):
        found.warnings.append(f"{key}: file {path!r} {MISSING_TRAINER_CONFIG_HERE}")
        return c, False
    tree = read_trainer_config(path, key, found.problems)
    return replace(c, trainer=replace(t, trainer_config=tree)), True


def read_trainer_config(path: str, key: str, problems: list[str]) -> dict[str, Any] | None:
    """The veRL tree in the YAML file ``path`` (interpolations resolved within the file);
    problems appended as ``key: ...`` lines."""
    from rft.config.load import read_yaml, resolve

    try:
        tree = read_yaml(os.path.expanduser(path))
    except ConfigError as exc:
        problems.extend(f"{key}: {line}" for line in exc.problems)
        return None
    found: list[str] = []
    plain = resolve(tree, "", found)
    problems.extend(f"{key}: {path}: {line}" for line in found)
    return plain or None
