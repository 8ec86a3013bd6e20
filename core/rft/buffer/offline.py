"""Training datasets read from files: the experience buffer of a train-only stage (SFT,
DPO) and the trainer's auxiliary buffers (expert data for ``mix``).

A dataset is an :class:`~rft.config.schema.ExperienceBufferConfig` whose rows are read
like a taskset's (``path``, ``split``, ``subset_name``, ``storage_type: file | sql``) and
turned into experiences by the row format its use asks for: ``sft`` rows
(:mod:`rft.buffer.sft_data`) or ``dpo`` preference rows (:mod:`rft.buffer.preference_data`).
"""

from __future__ import annotations

from typing import Any, Literal

from rft.buffer.errors import TasksetError
from rft.buffer.preference_data import preference_example, row_to_preference_pair
from rft.buffer.sft_data import row_to_sft_experience, sft_example
from rft.buffer.taskset import read_rows
from rft.config.schema import ExperienceBufferConfig, TasksetConfig
from rft.experience import Experience

RowFormat = Literal["sft", "dpo"]
"""How a dataset's rows are read: one prompt/reply each, or a preference pair each."""


def row_format(experience_format: str) -> RowFormat:
    """The row format of a train-only algorithm's dataset (its preset's
    ``experience_format``): ``dpo`` reads preference pairs, anything else SFT rows."""
    return "dpo" if experience_format == "dpo" else "sft"


def rows_config(cfg: ExperienceBufferConfig) -> TasksetConfig:
    """The reader's view of a dataset buffer (what :func:`read_rows` takes), with its
    retries and progress bar."""
    return TasksetConfig(name=cfg.name, storage_type="sql" if cfg.storage_type == "sql"
                         else "file", path=cfg.path, split=cfg.split,
                         subset_name=cfg.subset_name, format=cfg.format,
                         max_retry_times=cfg.max_retry_times,
                         max_retry_interval=cfg.max_retry_interval,
                         enable_progress_bar=cfg.enable_progress_bar)


def read_dataset_rows(cfg: ExperienceBufferConfig, where: str) -> list[dict[str, Any]]:
    """All rows of the dataset; a reading error names it as ``where`` (not as a taskset)."""
    try:
        return read_rows(rows_config(cfg))
    except TasksetError as exc:
        raise TasksetError(str(exc).replace(f"taskset {cfg.name!r} ({cfg.path})", where)
                           ) from exc


def check_rows(rows: list[dict[str, Any]], cfg: ExperienceBufferConfig, fmt: RowFormat,
               where: str) -> None:
    """Raise the one-line :class:`~rft.buffer.errors.TasksetError` of the first row that
    lacks what ``fmt`` needs (no tokenizer: for ``rft validate``)."""
    for index, row in enumerate(rows):
        if fmt == "dpo":
            preference_example(row, index, cfg.format, where)
        else:
            sft_example(row, index, cfg.format, where)


def dataset_experiences(cfg: ExperienceBufferConfig, tokenizer: Any, fmt: RowFormat,
                        where: str) -> list[Experience]:
    """Every row of the dataset as experiences, in order (a ``dpo`` row gives its chosen
    then its rejected experience)."""
    rows = read_dataset_rows(cfg, where)
    if fmt == "dpo":
        return [e for index, row in enumerate(rows)
                for e in row_to_preference_pair(row, index, cfg.format, tokenizer, where)]
    if cfg.format.image_key:  # images: the prompt through the model's processor
        return _image_sft_experiences(rows, cfg, tokenizer, where)
    return [row_to_sft_experience(row, index, cfg.format, tokenizer, where)
            for index, row in enumerate(rows)]


def _image_sft_experiences(rows: list[dict[str, Any]], cfg: ExperienceBufferConfig,
                           tokenizer: Any, where: str) -> list[Experience]:
    """SFT rows with images (:mod:`rft.multimodal.sft_rows`), rendered by the processor
    saved with the model ``tokenizer`` comes from (the processor's chat template, which
    places the image parts; the tokenizer's where it has none)."""
    from rft.buffer.taskset import media_folder
    from rft.multimodal.processor import load_processor
    from rft.multimodal.sft_rows import image_sft_experience

    processor = load_processor(str(getattr(tokenizer, "name_or_path", "")))
    if not getattr(processor, "chat_template", None):
        processor.chat_template = getattr(tokenizer, "chat_template", None)
    folder = media_folder(rows_config(cfg))
    return [image_sft_experience(row, index, cfg.format, processor, folder, where)
            for index, row in enumerate(rows)]


__all__ = ["RowFormat", "check_rows", "dataset_experiences", "read_dataset_rows", "row_format",
           "rows_config"]
