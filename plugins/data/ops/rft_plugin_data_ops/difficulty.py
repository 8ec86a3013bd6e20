"""``llm_difficulty_score_filter``: a model rates each task's difficulty; keep a range.

Args follow Data-Juicer's operator of that name as Trinity-RFT's guide uses it
(``api_or_hf_model``, ``min_score``, ``max_score``, ``input_keys``, ``field_names``).
The model (:mod:`.scorer`) sees a system prompt asking for a rating from 1 (novice) to
5 (expert) and the task as ``<field name>: <value>`` lines (``input_keys[i]`` shown as
``field_names[i]``); the first digit 1–5 of its greedy reply is the rating ``r``, and

    difficulty = (r − 1) / 4  ∈ [0, 1]        (a reply without such a digit: 0)

A row is kept when ``min_score <= difficulty <= max_score``; its ``difficulty`` stat is
what ``priority_weights.difficulty`` weighs.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

from rft.data.task_operator import TaskOperator, TaskRow, row_stats
from rft.engines.engine import InferenceEngine
from rft_plugin_data_ops.scorer import ask, build_scorer, spec_kind

SYSTEM_PROMPT = (
    "You rate how difficult a task is for a student. Reply with one digit from 1 to 5: "
    "1 = novice-friendly, 3 = intermediate, 5 = expert-level. Then one short reason.")
_RATING = re.compile(r"[1-5]")


@dataclass
class DifficultyArgs:
    api_or_hf_model: str = ""
    """An auxiliary model's name, an OpenAI-compatible URL, or a local model folder."""
    min_score: float = 0.5
    """Lowest difficulty kept."""
    max_score: float = 1.0
    """Highest difficulty kept."""
    input_keys: list[str] = field(default_factory=lambda: ["text"])
    """Row fields shown to the model."""
    field_names: list[str] = field(default_factory=lambda: ["Text"])
    """How each of ``input_keys`` is labelled in the prompt (same length; ``""``: the value
    alone)."""
    model_name: str | None = None
    """Model name sent to a URL's server; ``None``: the one it lists."""
    system_prompt: str | None = None
    """Replaces the default rating instructions (``""``: no system message)."""
    max_tokens: int = 32
    """Longest reply."""
    batch_size: int = 8
    """Tasks per engine call."""

    def __post_init__(self) -> None:
        if len(self.field_names) != len(self.input_keys):
            raise ValueError(f"field_names must label each of input_keys "
                             f"({len(self.input_keys)}), got {len(self.field_names)}")
        if not self.api_or_hf_model:
            raise ValueError("api_or_hf_model must name an auxiliary model, a URL or a "
                             "local model folder")


def rating(reply: str) -> int | None:
    """The first digit 1–5 of ``reply``; ``None`` when there is none."""
    match = _RATING.search(reply)
    return int(match.group()) if match else None


def difficulty(reply: str) -> float:
    """``(r − 1) / 4`` of the reply's rating ``r``; 0.0 without one."""
    r = rating(reply)
    return 0.0 if r is None else (r - 1) / 4


class LLMDifficultyScoreFilter(TaskOperator):
    """See the module docstring."""

    Args = DifficultyArgs
    args: DifficultyArgs
    version = "1"

    def __init__(self, args: Any = None) -> None:
        super().__init__(args)
        self._engine: InferenceEngine | None = None

    @classmethod
    def config_warnings(cls, args: Any, auxiliary_models: frozenset[str]) -> list[str]:
        """A model that is none of the three kinds :mod:`.scorer` runs (checked again, as an
        error, when the pipeline starts: the folder may exist only where the run runs)."""
        if spec_kind(args.api_or_hf_model, auxiliary_models) is not None:
            return []
        return [f"args.api_or_hf_model: {args.api_or_hf_model!r} is neither an auxiliary model "
                f"(explorer.auxiliary_models names: {', '.join(sorted(auxiliary_models)) or 'none'})"
                ", an http(s) URL, nor a local model folder here; the pipeline stops at start "
                "unless it is one where the run starts"]

    def cache_identity(self) -> str:
        """An auxiliary model's engine and model path (its name alone would let a changed
        model hit the old cache); a folder's absolute path."""
        spec = self.args.api_or_hf_model
        if self.context is not None and spec in self.context.auxiliary_models:
            model = self.context.auxiliary_models[spec].config.explorer.rollout_model
            return f"auxiliary:{model.engine_type}:{model.model_path}"
        return os.path.abspath(os.path.expanduser(spec)) if os.path.isdir(
            os.path.expanduser(spec)) else spec

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_engine"] = None  # each worker process builds its own
        return state

    def engine(self) -> InferenceEngine:
        """The scoring model's engine (built on first use, in this process)."""
        if self._engine is None:
            self._engine = build_scorer(self.args.api_or_hf_model, self.args.model_name,
                                        self.context, "llm_difficulty_score_filter.args."
                                        "api_or_hf_model")
        return self._engine

    def conversation(self, row: TaskRow) -> list[dict[str, Any]]:
        """The system prompt (none when ``system_prompt`` is ``""``) and the task's fields,
        each labelled ``<field name>: `` (unlabelled when its field name is ``""``)."""
        task = "\n".join(f"{name}: {row.get(key, '')}" if name else str(row.get(key, ""))
                         for key, name in zip(self.args.input_keys, self.args.field_names,
                                              strict=True))
        prompt = SYSTEM_PROMPT if self.args.system_prompt is None else self.args.system_prompt
        system = [{"role": "system", "content": prompt}] if prompt else []
        return [*system, {"role": "user", "content": task}]

    def process(self, rows: list[TaskRow]) -> list[TaskRow]:
        kept: list[TaskRow] = []
        size = max(1, self.args.batch_size)
        for start in range(0, len(rows), size):
            batch = rows[start:start + size]
            replies = ask(self.engine(), [self.conversation(r) for r in batch],
                          self.args.max_tokens)
            for row, reply in zip(batch, replies, strict=True):
                score = difficulty(reply)
                row_stats(row)["difficulty"] = score
                if self.args.min_score <= score <= self.args.max_score:
                    kept.append(row)
        return kept
