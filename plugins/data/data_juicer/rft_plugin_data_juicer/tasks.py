"""The ``data_juicer`` task operator: a Data-Juicer recipe over the taskset's rows, run on
the run's Data-Juicer server (``service.data_juicer``), in the task pipeline. The recipe is
``config_path`` / ``process``, or, with ``dj_process_desc`` alone, the one the agent model
writes (:mod:`rft_plugin_data_juicer.agent`)."""

from __future__ import annotations

import hashlib
import os
from typing import Any

from rft.data.task_operator import STATS_KEY, TaskOperator, TaskRow, row_stats
from rft.errors import RftError
from rft_plugin_data_juicer.agent import agent_kind, written_recipe
from rft_plugin_data_juicer.client import DataJuicerClient
from rft_plugin_data_juicer.experience import DataJuicerArgs, numbers, ready_recipe
from rft_plugin_data_juicer.recipe import Process

TASK_KEY = "data_processor.task_pipeline.operators[data_juicer]"


class DataJuicerTaskOperator(TaskOperator):
    """Run a Data-Juicer recipe over the taskset's rows: its filters drop tasks, its
    mappers change them, its numeric statistics go to the row's stats
    (:data:`rft.data.task_operator.STATS_KEY`), where priority selection reads them."""

    Args = DataJuicerArgs
    row_wise = False  # deduplicators compare rows; the server runs one recipe at a time

    def __init__(self, args: Any = None) -> None:
        super().__init__(args)
        self._ready: tuple[Process, DataJuicerClient] | None = None

    def process(self, rows: list[TaskRow]) -> list[TaskRow]:
        if self._ready is None:
            self._ready = self._recipe(rows)
        recipe, client = self._ready
        plain = [{k: v for k, v in row.items() if k != STATS_KEY} for row in rows]
        result = client.process(recipe, plain)
        out: list[TaskRow] = []
        for position, row, stats in zip(result.index, result.rows, result.stats, strict=True):
            if STATS_KEY in rows[position]:
                row[STATS_KEY] = dict(rows[position][STATS_KEY])
            row_stats(row).update(numbers(stats))
            out.append(row)
        return out

    @classmethod
    def config_warnings(cls, args: Any, auxiliary_models: frozenset[str]) -> list[str]:
        """An ``agent_model_name`` that names no model here (it may where the run starts)."""
        spec = args.agent_model_name if args.dj_process_desc and not (
            args.config_path or args.process) else None
        if spec is None or agent_kind(spec, auxiliary_models) is not None:
            return []
        return [f"args.agent_model_name: {spec!r} is neither an auxiliary model of the run, "
                "an http(s) URL nor a local model folder here: the pipeline stops when it "
                "runs unless it is one there"]

    def cache_identity(self) -> str:
        """The recipe file's content hash: an edited recipe is not answered from the
        cache."""
        path = self.args.config_path
        if not path or not os.path.isfile(path):
            return ""
        with open(path, "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest()

    def _recipe(self, rows: list[TaskRow]) -> tuple[Process, DataJuicerClient]:
        """The recipe given, or (``dj_process_desc`` alone) the one the agent writes."""
        args = self.args
        if args.config_path or args.process or not args.dj_process_desc:
            return ready_recipe(args, TASK_KEY)
        if not args.agent_model_name:
            raise RftError(f"{TASK_KEY}.agent_model_name: required with dj_process_desc (the "
                           "model that writes the Data-Juicer recipe)")
        client = DataJuicerClient(TASK_KEY)
        fields = sorted({k for row in rows for k in row if k != STATS_KEY})
        recipe = written_recipe(args.dj_process_desc, args.agent_model_name,
                                args.agent_model_config, fields, client, self.context, TASK_KEY)
        return recipe, client

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_ready"] = None  # a worker builds its own client
        return state


__all__ = ["DataJuicerTaskOperator"]
