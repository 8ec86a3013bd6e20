"""The task-operator contract: one step of ``data_processor.task_pipeline``.

A task operator is a plugin (``register_task_operators``) named in
``data_processor.task_pipeline.operators[i].name`` and built from its ``Args`` dataclass
(``operators[i].args``), like experience operators. The pipeline hands it the taskset's
rows, in order, and keeps what it returns::

    rows = operator.process(rows)

A row is a plain JSON-able ``dict`` (one line of the jsonl taskset). An operator may drop
rows (a filter), change them (a mapper) or attach per-row statistics under
:data:`STATS_KEY` (``row["__rft_stats__"]["difficulty"] = 0.7``) that priority-based
selection (``priority_weights`` / ``top_k``) reads; :data:`STATS_KEY` is removed before the
taskset is written.

Caching: the pipeline stores each operator's output under a content hash of its input
rows and :meth:`TaskOperator.fingerprint` (the operator's name, its ``Args`` and its
:attr:`TaskOperator.version`), so a rerun with the same inputs and settings does not call
the operator again. Bump ``version`` when the operator's behaviour changes.

Parallelism: an operator whose :attr:`TaskOperator.row_wise` is true decides each row on
its own, so the pipeline may split the rows over ``num_process`` worker processes
(spawned; the operator is pickled into each) and concatenate the results in order. An
operator that compares rows (deduplication) sets ``row_wise = False`` and always sees all
rows in one call.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from rft.config.schema import RftConfig
    from rft.engines.engine import InferenceEngine

TaskRow = dict[str, Any]
"""One task as read from the taskset file (a JSON object)."""

STATS_KEY = "__rft_stats__"
"""Row key of the per-row statistics operators attach (``{stat name: float}``)."""

@dataclass(frozen=True)
class ModelSource:
    """A model the run configures, for operators that score with it (an auxiliary model)."""

    key: str
    """Its dotted config key (``explorer.auxiliary_models[i]``)."""
    engine_cls: type[InferenceEngine]
    """Its engine class, as validation resolved ``engine_type``."""
    config: RftConfig
    """The run's config with this model as the rollout model (what engine builders read,
    :func:`rft.rollout.auxiliary.engine_config`)."""

    def build(self) -> InferenceEngine:
        """A new engine serving the model (in the calling process)."""
        from rft.engines.engine_factory import build_engine

        return build_engine(self.config, self.engine_cls)


@dataclass(frozen=True)
class TaskOperatorContext:
    """What the pipeline tells an operator about the run before it processes rows."""

    job_dir: str
    """The run's ``checkpoint_job_dir`` (an operator may keep files under it)."""
    auxiliary_models: dict[str, ModelSource] = field(default_factory=dict)
    """``explorer.auxiliary_models`` by ``name``, for operators that score with a model
    the run already configures."""
    seed: int = 42
    """The run's seed (for operators that sample)."""


class TaskOperator(ABC):
    """Base class of task operators.

    :param args: instance of the operator's ``Args`` dataclass (its ``args`` mapping);
        ``None`` builds the defaults.
    """

    Args: ClassVar[type | None] = None
    version: ClassVar[str] = "1"
    """Part of the cache key: bump it when the operator's output for the same rows and
    args changes."""
    row_wise: ClassVar[bool] = True
    """Each row is decided on its own, so rows may be split over worker processes."""

    def __init__(self, args: Any = None) -> None:
        self.args = args if args is not None or self.Args is None else self.Args()
        self.context: TaskOperatorContext | None = None

    @classmethod
    def config_warnings(cls, args: Any, auxiliary_models: frozenset[str]) -> list[str]:
        """Messages (``"args.<field>: ..."``) about ``args`` that validation shows as
        warnings under the operator's key, e.g. a model that may not be reachable where the
        run starts; ``auxiliary_models``: the names of ``explorer.auxiliary_models``."""
        return []

    def bind(self, context: TaskOperatorContext) -> None:
        """Called once by the pipeline before :meth:`process` (in the parent process; the
        bound operator is what worker processes receive)."""
        self.context = context

    @abstractmethod
    def process(self, rows: list[TaskRow]) -> list[TaskRow]:
        """The rows kept (changed or not), in order; may attach :data:`STATS_KEY` stats."""

    def cache_identity(self) -> str:
        """What else the output depends on, beyond the args, once bound (e.g. which model
        a name resolves to); part of the cache key. Default: nothing."""
        return ""

    def fingerprint(self, name: str) -> str:
        """Hex digest of ``name``, the operator's class, ``version``, args and
        :meth:`cache_identity`: the operator's part of the cache key."""
        args = dataclasses.asdict(self.args) if dataclasses.is_dataclass(self.args) \
            and not isinstance(self.args, type) else self.args
        blob = json.dumps([name, type(self).__qualname__, self.version, args,
                           self.cache_identity()], sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()


def row_stats(row: TaskRow) -> dict[str, float]:
    """The row's statistics dict (created empty when missing)."""
    stats = row.get(STATS_KEY)
    if not isinstance(stats, dict):
        stats = {}
        row[STATS_KEY] = stats
    return stats


__all__ = ["ModelSource", "STATS_KEY", "TaskOperator", "TaskOperatorContext", "TaskRow",
           "row_stats"]
