"""Checks made just before a stage loads anything: every model it will load can be had.

A model path that is neither a local folder nor in the Hugging Face cache would be fetched
from the Hub; on a machine that cannot reach it, transformers retries for about a minute
and ends in a traceback. :func:`check_model_sources` says it in one line within seconds
instead (a local-looking path that does not exist is already a validation problem). A
local folder that is not a whole model (empty, no weights, a truncated safetensors file, a
file instead of a folder) is one line naming its path (:func:`model_file_problems`, also
run by ``rft validate``).

:func:`data_problems` (``rft validate``) reads the first rows of every data file a stage
reads — its tasksets, the dataset of a train-only stage (SFT or DPO rows) and the
trainer's auxiliary datasets — and returns one line per problem: a byte that is not
UTF-8, malformed JSON, an empty file (each with file and line), a row without the keys
its format names.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from rft.buffer.offline import RowFormat, check_rows, row_format, rows_config
from rft.buffer.taskset import TaskPlugins, TasksetError, preview_rows, row_to_task
from rft.config.load import unset_env_variable
from rft.config.model_files import model_folder_problem
from rft.config.plan import RunPlan
from rft.config.schema import ExperienceBufferConfig
from rft.config.task_pipeline import pipeline_output
from rft.config.validate import local_looking
from rft.errors import RftError
from rft.hub import HUB_CONNECT_TIMEOUT_S, hub_unreachable, in_hub_cache

__all__ = ["HUB_CONNECT_TIMEOUT_S", "check_data_sources", "check_model_sources", "data_paths",
           "data_problems", "hub_unreachable",
           "in_hub_cache", "model_file_problems", "model_paths", "model_source_problem"]


def model_paths(plan: RunPlan) -> Iterator[tuple[str, str]]:
    """``(dotted key, path)`` of every model the stage loads."""
    c = plan.config
    if c.model.model_path:  # unset only with an external rollout model (validation)
        yield "model.model_path", c.model.model_path
    if c.explorer.rollout_model.model_path:
        yield "explorer.rollout_model.model_path", c.explorer.rollout_model.model_path
    if plan.preset.use_critic and c.model.critic_model_path:
        yield "model.critic_model_path", c.model.critic_model_path
    for i, aux in enumerate(c.explorer.auxiliary_models):
        if aux.model_path:
            yield f"explorer.auxiliary_models[{i}].model_path", aux.model_path


def model_source_problem(key: str, path: str) -> str | None:
    """One line when the model at ``path`` can be neither read here nor downloaded."""
    if os.path.isdir(os.path.expanduser(path)) or local_looking(path) or in_hub_cache(path):
        return None
    reason = hub_unreachable()
    if reason is None:
        return None
    return (f"{key}: {path!r} is not a local folder ({os.path.abspath(path)} does not exist) "
            f"and the Hugging Face Hub cannot be reached ({reason}); point it at a local "
            "model folder (`rft tiny-model DIR` builds a tiny one)")


def model_file_problems(plan: RunPlan) -> list[str]:
    """One line per local model folder of the stage that is not complete
    (:func:`rft.config.model_files.model_folder_problem`): config, tokenizer, and the
    weights' headers where the stage loads weights (not for a model only a remote engine
    serves, whose folder gives the tokenizer)."""
    remote = {m.key: bool(getattr(m.engine.implementation, "remote", False))
              for m in (plan.rollout_model, *plan.auxiliary_models)}
    trains = plan.config.mode in ("both", "train", "colocate")
    problems: list[str] = []
    for key, path in model_paths(plan):
        engine_key = key.rsplit(".", 1)[0]
        if key == "model.model_path":
            weights, tokenizer = trains or not remote.get("explorer.rollout_model", False), True
        elif engine_key in remote:
            weights, tokenizer = not remote[engine_key], True
        else:  # the critic: weights (its tokenizer is the policy's)
            weights, tokenizer = True, False
        problem = model_folder_problem(key, path, weights=weights, tokenizer=tokenizer)
        if problem is not None:
            problems.append(problem)
    return list(dict.fromkeys(problems))


def check_model_sources(plan: RunPlan) -> None:
    """Raise one :class:`RftError` listing every model of the stage that cannot be had:
    not here nor on the Hub, or a local folder that is not complete."""
    problems = [p for key, path in model_paths(plan)
                if (p := model_source_problem(key, path)) is not None]
    problems += model_file_problems(plan)
    if problems:
        raise RftError("\n".join(dict.fromkeys(problems)))


def _readable_here(path: str | None) -> bool:
    """A data path that exists here (a Hub dataset id is left to ``datasets``; a missing
    local path is a validation warning and :func:`check_data_sources`' error)."""
    return bool(path) and os.path.exists(os.path.expanduser(str(path)))


def data_paths(plan: RunPlan) -> Iterator[tuple[str, str]]:
    """``(dotted key, path)`` of every data file or folder the stage reads."""
    produced = pipeline_output(plan.config)  # written by the task pipeline: its inputs instead
    for taskset in (*plan.tasksets, *plan.eval_tasksets):
        if taskset.config.path and taskset.config.path != produced:
            yield taskset.key + ".path", taskset.config.path
    pipeline = plan.config.data_processor.task_pipeline
    if produced is not None and pipeline is not None:
        for i, path in enumerate(pipeline.inputs):
            yield f"data_processor.task_pipeline.inputs[{i}]", path
    for name, aux in plan.config.buffer.trainer_input.auxiliary_buffers.items():
        if aux.storage_type == "file" and aux.path:
            yield f"buffer.trainer_input.auxiliary_buffers.{name}.path", aux.path
    buffer = plan.experience_buffer  # a file an earlier stage may write: only an unset variable
    if buffer.storage_type == "file" and unset_env_variable(buffer.path):
        yield "buffer.trainer_input.experience_buffer.path", str(buffer.path)


def check_data_sources(plan: RunPlan) -> None:
    """Raise one :class:`RftError` line per local data path of the stage that does not exist
    here (validation only warned: the config may have been written for another machine)."""
    problems = [f"{key}: environment variable {unset_env_variable(path)} is not set (used "
                f"in {path})" if unset_env_variable(path) else
                f"{key}: path {path!r} does not exist"
                for key, path in data_paths(plan)
                if local_looking(path) and not os.path.exists(os.path.expanduser(path))]
    trainer = plan.config.trainer
    if trainer.trainer_config_path and trainer.trainer_config is None:  # not read: not here
        problems.append(f"trainer.trainer_config_path: file {trainer.trainer_config_path!r} "
                        "does not exist")
    if problems:
        raise RftError("\n".join(dict.fromkeys(problems)))


def data_problems(plan: RunPlan) -> list[str]:
    """One line per problem in the first rows of the stage's data files (see the module
    docstring); ``[]`` when they read."""
    problems: list[str] = []
    for taskset in (*plan.tasksets, *plan.eval_tasksets):
        if not _readable_here(taskset.config.path):
            continue
        reward = taskset.reward
        plugins = TaskPlugins(taskset.workflow.implementation, taskset.workflow.args,
                              reward.implementation if reward else None,
                              reward.args if reward else None,
                              row_workflows=taskset.row_workflows,
                              row_rewards=taskset.row_rewards,
                              environment=taskset.environment,
                              action_parser=taskset.action_parser)
        try:
            for index, row in enumerate(preview_rows(taskset.config)):
                row_to_task(taskset.config, row, index, plugins, is_eval=taskset.is_eval)
        except TasksetError as exc:
            problems.append(str(exc))
    datasets: list[tuple[ExperienceBufferConfig, RowFormat, str]] = []
    buffer = plan.experience_buffer
    if plan.train_only and buffer.storage_type != "queue":
        datasets.append((buffer, row_format(plan.preset.experience_format),
                         f"experience buffer {buffer.name!r} ({buffer.path})"))
    for name, aux in plan.config.buffer.trainer_input.auxiliary_buffers.items():
        if aux.storage_type == "file":
            datasets.append((aux, "sft",
                             f"buffer.trainer_input.auxiliary_buffers.{name} ({aux.path})"))
    for dataset, fmt, where in datasets:
        if not _readable_here(dataset.path):
            continue
        reader = rows_config(dataset)
        try:
            check_rows(preview_rows(reader), dataset, fmt, where)
        except TasksetError as exc:
            problems.append(str(exc).replace(f"taskset {reader.name!r} ({reader.path})", where))
    return list(dict.fromkeys(problems))
