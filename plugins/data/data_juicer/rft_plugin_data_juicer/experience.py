"""The ``data_juicer`` experience operator: a Data-Juicer recipe run on the run's
Data-Juicer server (``service.data_juicer``); the task operator is in
:mod:`rft_plugin_data_juicer.tasks`.

Both read the recipe at construction (``config_path``: a Data-Juicer YAML file, or
``process``: its operators inline) and have the server check every operator name before
any row is sent, so a recipe that does not parse or names an operator Data-Juicer does not
know stops the run before it explores, in one line.

Experiences go to the server as rows ``{"text": response, "response": response,
"prompt": prompt, "reward": reward}`` (prompt from ``info["prompt"]`` when the workflow
kept it); Data-Juicer's filters drop rows and compute statistics, which land in each kept
experience's ``info`` under their Data-Juicer names (``text_len``, ``llm_quality_score``,
...), where ``reward_shaping_mapper``'s ``stats_key`` reads them.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from rft.buffer.operators import ExperienceOperator
from rft.errors import RftError
from rft.experience import Experience
from rft_plugin_data_juicer.client import DataJuicerClient
from rft_plugin_data_juicer.recipe import Process, load_recipe

EXPERIENCE_KEY = "data_processor.experience_pipeline.operators[data_juicer]"


@dataclass
class DataJuicerArgs:
    """Arguments of the ``data_juicer`` operators."""

    config_path: str | None = None
    """A Data-Juicer recipe (YAML with a ``process`` list); relative to the working
    directory."""
    process: list[Any] = field(default_factory=list)
    """The recipe's operators inline (``[{text_length_filter: {min_len: 5}}]``); wins over
    ``config_path``."""
    dj_process_desc: str | None = None
    """Task operator only, with neither recipe above: what the recipe should do, in words;
    ``agent_model_name`` writes it (:mod:`rft_plugin_data_juicer.agent`)."""
    agent_model_name: str | None = None
    """The model that writes the recipe: an auxiliary model's name, an OpenAI-compatible
    server's URL, or a local model folder."""
    agent_model_config: dict[str, Any] = field(default_factory=dict)
    """``model_name`` (for a URL), ``max_tokens`` of the reply (default 512)."""


def numbers(stats: dict[str, Any]) -> dict[str, float]:
    """The numeric statistics (a one-element list counts as its element)."""
    out: dict[str, float] = {}
    for name, value in stats.items():
        if isinstance(value, list) and len(value) == 1:
            value = value[0]
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[name] = float(value)
    return out


def ready_recipe(args: DataJuicerArgs, key: str) -> tuple[Process, DataJuicerClient]:
    """The operator's recipe, its operators checked by the server, and the client."""
    if args.dj_process_desc and not (args.config_path or args.process):
        raise RftError(f"{key}.dj_process_desc: an agent-written recipe is for the task "
                       "pipeline; give the experience operator config_path or process")
    recipe = load_recipe(args.config_path, args.process, key)
    client = DataJuicerClient(key)
    client.validate(recipe)
    return recipe, client


class DataJuicerExperienceOperator(ExperienceOperator):
    """Run a Data-Juicer recipe over each explore step's experiences (module docstring).

    Metrics: ``kept``, ``dropped`` and the mean of each numeric statistic
    (``<stat>/mean``)."""

    Args = DataJuicerArgs
    needs_services = ("data_juicer",)

    def __init__(self, args: Any = None) -> None:
        super().__init__(args)
        self.recipe, self.client = ready_recipe(self.args, EXPERIENCE_KEY)

    def process(self, experiences: list[Experience]) -> tuple[list[Experience], dict[str, float]]:
        if not experiences:
            return experiences, {"kept": 0.0, "dropped": 0.0}
        rows = [{"text": e.response_text or "", "response": e.response_text or "",
                 "prompt": str(e.info.get("prompt", "")), "reward": float(e.reward or 0.0)}
                for e in experiences]
        result = self.client.process(self.recipe, rows)
        kept: list[Experience] = []
        seen: dict[str, list[float]] = {}
        for position, stats in zip(result.index, result.stats, strict=True):
            exp = experiences[position]
            for name, value in numbers(stats).items():
                exp.info[name] = value
                seen.setdefault(name, []).append(value)
            kept.append(exp)
        metrics = {"kept": float(len(kept)), "dropped": float(len(experiences) - len(kept))}
        metrics.update({f"{name}/mean": statistics.fmean(values)
                        for name, values in seen.items()})
        return kept, metrics


__all__ = ["DataJuicerArgs", "DataJuicerExperienceOperator", "numbers", "ready_recipe"]
