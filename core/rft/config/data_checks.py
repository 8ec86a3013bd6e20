"""Where each ``format`` field and dataset field has an effect (:func:`check_datasets`, one
of :data:`rft.config.check.CHECKS`, run after the buffer check).

A ``format`` field is read by some readers only: ``chosen_key`` / ``rejected_key`` by DPO
datasets, ``enable_concatenated_multi_turn`` by SFT datasets of ``messages`` rows,
``chat_template`` by training datasets (a taskset's rollouts use the model's template,
:mod:`rft.chat_template`), and no ``format`` field by an experience buffer that the
explorer fills. Set where it has no effect, a field is a warning naming it and saying
what happens instead. Auxiliary buffers are read as SFT datasets (``file``) or as stored
experiences (``sql``); an auxiliary ``queue`` has no writer and is a problem.
"""

from __future__ import annotations

from rft.algorithm import AlgorithmPreset
from rft.config.findings import Findings
from rft.config.schema import ExperienceBufferConfig, FormatConfig, RftConfig, TasksetConfig

_DEFAULT = FormatConfig()


def _tasksets(c: RftConfig) -> list[tuple[str, TasksetConfig]]:
    ei = c.buffer.explorer_input
    found = [("buffer.explorer_input.taskset", ei.taskset)] if ei.taskset is not None else []
    found += [(f"buffer.explorer_input.tasksets[{i}]", t) for i, t in enumerate(ei.tasksets)]
    return found + [(f"buffer.explorer_input.eval_tasksets[{i}]", t)
                    for i, t in enumerate(ei.eval_tasksets)]


def _changed(fmt: FormatConfig, *names: str) -> list[str]:
    return [n for n in names if getattr(fmt, n) != getattr(_DEFAULT, n)]


def check_taskset_format(key: str, fmt: FormatConfig, v: Findings) -> None:
    """Warnings for the ``format`` fields a taskset does not read."""
    if fmt.chat_template:
        v.warnings.append(
            f"{key}.format.chat_template: a taskset's rollouts use the model's chat template "
            "(explorer.rollout_model.chat_template, model.chat_template_path, "
            "model.custom_chat_template, else the tokenizer's); it has no effect here (it "
            "applies to SFT / DPO / auxiliary datasets)")
    for name in _changed(fmt, "chosen_key", "rejected_key", "enable_concatenated_multi_turn"):
        v.warnings.append(f"{key}.format.{name}: read by training datasets (SFT / DPO) only; "
                          "it has no effect on a taskset")


def check_dataset_format(key: str, fmt: FormatConfig, rows: str, v: Findings) -> None:
    """Warnings for the ``format`` fields a dataset of ``rows`` (``sft`` / ``dpo``) does
    not read."""
    if fmt.enable_concatenated_multi_turn and rows == "dpo":
        v.warnings.append(f"{key}.format.enable_concatenated_multi_turn: SFT only; DPO rows "
                          "train on their chosen / rejected replies; it has no effect")
    elif fmt.enable_concatenated_multi_turn and fmt.prompt_type != "messages":
        v.warnings.append(f"{key}.format.enable_concatenated_multi_turn: applies to "
                          "'messages' rows only (format.prompt_type is 'plaintext': one turn "
                          "each); it has no effect")
    if rows == "sft":
        for name in _changed(fmt, "chosen_key", "rejected_key"):
            v.warnings.append(f"{key}.format.{name}: read by DPO datasets only (this one is "
                              "read as SFT rows); it has no effect")


def _schema_problem(key: str, buffer: ExperienceBufferConfig, expected: str,
                    v: Findings) -> None:
    if buffer.schema_type is not None and buffer.schema_type != expected:
        v.problem(f"{key}.schema_type", f"{buffer.schema_type!r}, but this buffer is read as "
                  f"{expected!r} (rft derives it; remove the field)")


def check_datasets(c: RftConfig, v: Findings, preset: AlgorithmPreset | None) -> None:
    """The checks of the module docstring (``preset``: the algorithm's, when it resolved)."""
    for key, taskset in _tasksets(c):
        check_taskset_format(key, taskset.format, v)
    buffer = c.buffer.trainer_input.experience_buffer
    key = "buffer.trainer_input.experience_buffer"
    if buffer is not None and preset is not None:
        if preset.train_only:
            rows = "dpo" if preset.experience_format == "dpo" else "sft"
            _schema_problem(key, buffer, rows, v)
            check_dataset_format(key, buffer.format, rows, v)
        else:
            _schema_problem(key, buffer, "experience", v)
            if buffer.format != _DEFAULT:
                changed = ", ".join(_changed(buffer.format, *vars(_DEFAULT)))
                v.warnings.append(
                    f"{key}.format: {changed}: the explorer writes this buffer's experiences "
                    "(format is read from datasets: train-only algorithms such as sft / dpo, "
                    "auxiliary buffers); it has no effect")
        if buffer.total_epochs is not None:
            v.warnings.append(f"{key}.total_epochs: the experience buffer's passes are "
                              "buffer.total_epochs; it has no effect (auxiliary datasets only)")
    for name, aux in c.buffer.trainer_input.auxiliary_buffers.items():
        aux_key = f"buffer.trainer_input.auxiliary_buffers.{name}"
        if aux.storage_type == "queue":
            v.problem(f"{aux_key}.storage_type", "an auxiliary queue has no writer; use 'file' "
                      "(a dataset of SFT rows) or 'sql' (experiences another run stored)")
        _schema_problem(aux_key, aux, "sft" if aux.storage_type == "file" else "experience", v)
        if aux.total_epochs is not None and aux.total_epochs <= 0:
            v.problem(f"{aux_key}.total_epochs", f"must be > 0, got {aux.total_epochs}")
        if aux.storage_type == "file":
            check_dataset_format(aux_key, aux.format, "sft", v)


__all__ = ["check_dataset_format", "check_datasets", "check_taskset_format"]
