"""Trinity-RFT's other spellings of rft fields, read into rft's own (the first check run).

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
  (:func:`rft.modes.preflight.check_data_sources`);
- ``algorithm.sample_strategy: warmup`` (Trinity-RFT's default, which reads an SFT
  warm-up dataset first when one is configured; rft has none) → ``default``;
- ``algorithm.policy_loss_fn_args.loss_agg_mode`` → ``algorithm.loss_agg_mode``;
- a training taskset's ``rollout_args.n`` equal to its ``repeat_times`` → unset (what
  rft does anyway; another value is refused by validation);
- ``explorer.runner_num``: deprecated in Trinity-RFT, which ignores it; so does rft, with
  a warning naming ``runner_per_model``.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from rft.errors import ConfigError

if TYPE_CHECKING:
    from rft.config.schema import RftConfig
    from rft.config.validate import Validation

SYNC_STYLE_NAMES = {"dynamic_by_explorer": "explorer_driven",
                    "dynamic_by_trainer": "trainer_driven"}
"""Trinity-RFT's sync style names and rft's."""

ENGINE_NAMES = {"vllm_async": "vllm"}
"""Trinity-RFT's engine names and rft's."""

SAMPLE_STRATEGY_NAMES = {"warmup": "default"}
"""Trinity-RFT's sample strategy names and rft's (``warmup`` reads an SFT warm-up dataset
first when one is configured; rft has none, so it is the default strategy)."""

LOSS_AGG_MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean",
                  "seq-mean-token-sum-norm")
"""The values of ``algorithm.loss_agg_mode``."""

MISSING_TRAINER_CONFIG_HERE = ("does not exist here: its veRL settings are not checked; "
                               "`rft run` stops at start unless it exists where it runs")


def check_trinity_forms(c: RftConfig, v: Validation) -> None:
    """Read Trinity-RFT's spellings (module docstring) into rft's fields."""
    s, a = c.synchronizer, c.algorithm
    s.sync_style = SYNC_STYLE_NAMES.get(s.sync_style, s.sync_style)  # type: ignore[assignment]
    for model in (c.explorer.rollout_model, *c.explorer.auxiliary_models):
        model.engine_type = ENGINE_NAMES.get(model.engine_type, model.engine_type)
    if a.sample_strategy is not None:
        a.sample_strategy = SAMPLE_STRATEGY_NAMES.get(a.sample_strategy, a.sample_strategy)
    if c.explorer.runner_num is not None:
        v.warnings.append(
            f"explorer.runner_num: deprecated in Trinity-RFT and ignored (there too); each "
            f"rollout engine runs explorer.runner_per_model={c.explorer.runner_per_model} "
            "workflow runners")
    _loss_agg_mode(c, v)
    _samples_per_task(c)
    _token_len(c, v)
    _priority_queue(c, v)
    _trainer_config_file(c, v)


def _priority_queue(c: RftConfig, v: Validation) -> None:
    """``use_priority_queue: true`` enables the buffer's replay buffer."""
    ti = c.buffer.trainer_input
    buffers = [("buffer.trainer_input.experience_buffer", ti.experience_buffer)]
    buffers += [(f"buffer.trainer_input.auxiliary_buffers.{name}", b)
                for name, b in ti.auxiliary_buffers.items()]
    for key, buffer in buffers:
        if buffer is None or not buffer.use_priority_queue:
            continue
        if buffer.replay_buffer is None:
            v.problem(f"{key}.use_priority_queue", "true, but replay_buffer is null "
                      "(disabled); use_priority_queue is Trinity-RFT's older "
                      "replay_buffer.enable")
        else:
            buffer.replay_buffer.enable = True


def _loss_agg_mode(c: RftConfig, v: Validation) -> None:
    """Trinity-RFT's policy losses take ``loss_agg_mode`` as an argument; rft's is
    ``algorithm.loss_agg_mode`` (one mode for every loss term)."""
    args = c.algorithm.policy_loss_fn_args
    if not isinstance(args, dict) or "loss_agg_mode" not in args:
        return
    mode = args.pop("loss_agg_mode")
    allowed = LOSS_AGG_MODES
    if mode not in allowed:
        v.problem("algorithm.policy_loss_fn_args.loss_agg_mode",
                  f"{mode!r} is not allowed; expected one of "
                  + ", ".join(repr(m) for m in allowed))
        return
    if c.algorithm.loss_agg_mode is not None and c.algorithm.loss_agg_mode != mode:
        v.problem("algorithm.policy_loss_fn_args.loss_agg_mode",
                  f"{mode!r} differs from algorithm.loss_agg_mode "
                  f"{c.algorithm.loss_agg_mode!r} (rft's place for it); set one")
        return
    c.algorithm.loss_agg_mode = mode


def _samples_per_task(c: RftConfig) -> None:
    """A training taskset's ``rollout_args.n`` equal to its repeat count says what rft does
    anyway (Trinity-RFT sets ``n`` from ``repeat_times``): read as unset. Any other value
    is left for validation to refuse."""
    ei = c.buffer.explorer_input
    for taskset in ([ei.taskset] if ei.taskset is not None else []) + list(ei.tasksets):
        repeat = taskset.repeat_times or c.algorithm.repeat_times
        if taskset.rollout_args.n is not None and taskset.rollout_args.n == repeat:
            taskset.rollout_args.n = None


def _token_len(c: RftConfig, v: Validation) -> None:
    t = c.trainer
    if t.ppo_max_token_len_per_gpu is None:
        return
    current = t.max_token_len_per_gpu
    if current is not None and current != t.ppo_max_token_len_per_gpu:
        v.problem("trainer.ppo_max_token_len_per_gpu",
                  f"{t.ppo_max_token_len_per_gpu} differs from trainer.max_token_len_per_gpu "
                  f"{t.max_token_len_per_gpu} (Trinity-RFT's older name of it); set one")
        return
    t.max_token_len_per_gpu = t.ppo_max_token_len_per_gpu


def _trainer_config_file(c: RftConfig, v: Validation) -> None:
    t = c.trainer
    path = t.trainer_config_path
    if not path:
        return
    key = "trainer.trainer_config_path"
    if t.trainer_config:
        v.warnings.append(f"{key}: not read, trainer.trainer_config is set (it wins, as in "
                          "Trinity-RFT)")
        return
    if not os.path.isfile(os.path.expanduser(path)):
        v.warnings.append(f"{key}: file {path!r} {MISSING_TRAINER_CONFIG_HERE}")
        return
    t.trainer_config = read_trainer_config(path, key, v.problems)


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
