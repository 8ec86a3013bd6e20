"""The support note a schema field carries: what rft does with it.

Every field of :mod:`rft.config.schema` says, in its declaration, whether rft honours it::

    batch_size: int = field(default=1, metadata=consumed(EXPLORER, BUILDERS))

The helpers below build that ``metadata`` (one entry under :data:`SUPPORT_KEY`):

- :func:`consumed`: the field has its documented effect; ``modules`` are the modules that
  read it (``tests/test_config_support.py`` checks that each reads an attribute of that
  name). Values it accepts without implementing them (``trainer_strategy: megatron``) are
  its ``unsupported`` part, reported like an unsupported field.
- :func:`unsupported`: rft accepts the field but does not implement it; validation reports
  a user who sets it in one line ``dotted.key: <reason>`` (a warning, or a problem where
  running without it would mislead).
- :func:`derived`: validation fills it in (``cluster.trainer_gpu_num``, ...).
- :func:`structural`: a section or a container of sections; its own fields have notes.

:func:`entry_of` reads the note back; :mod:`rft.config.support` holds the readers
(validation's messages, the docs tables, the completeness check). This module imports
nothing of rft, so the schema can import it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

# --------------------------------------------------------------------------------------
# Entry types
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Unsupported:
    """Accepted, but rft does not implement the field."""

    reason: str
    """The message after ``dotted.key: ``; one line."""
    severity: Literal["warning", "error"] = "warning"
    """``error``: running without the field would mislead (validation fails)."""
    when: Callable[[Any], bool] | None = None
    """Which values are reported; ``None``: any value but the default (an empty list /
    mapping, or a section equal to its defaults, counts as unset where the default is
    ``None``)."""
    example: Any = None
    """A value that is reported (tests); ``None``: one derived from the field's type."""


@dataclass(frozen=True)
class Consumed:
    """The field has its documented effect."""

    modules: tuple[str, ...]
    """Modules that read the field (``rft.rollout.explorer``, ``rft_plugin_workflows...``)."""
    note: str = ""
    """Where / how it acts, when that is worth saying."""
    unsupported: Unsupported | None = None
    """Values the field accepts but rft does not implement (its ``when``), reported like
    an unsupported field; ``None``: every value works."""


@dataclass(frozen=True)
class Derived:
    """Validation fills the value in; users leave it unset."""

    note: str


@dataclass(frozen=True)
class Structural:
    """A section or a container of sections; its own fields have their entries."""

    note: str = ""


Support = Consumed | Unsupported | Derived | Structural

SUPPORT_KEY = "rft.support"
"""The key of a field's :data:`Support` entry in its ``dataclasses.field`` metadata."""

# --------------------------------------------------------------------------------------
# Field metadata
# --------------------------------------------------------------------------------------


def support(entry: Support) -> Mapping[str, Support]:
    """The ``metadata`` of a field whose support is ``entry`` (read-only)."""
    return MappingProxyType({SUPPORT_KEY: entry})


def consumed(*modules: str, note: str = "",
             unsupported: Unsupported | None = None) -> Mapping[str, Support]:
    """Metadata: the field has its effect; ``modules`` read it (see :class:`Consumed`)."""
    return support(Consumed(tuple(modules), note, unsupported))


def unsupported(reason: str, severity: Literal["warning", "error"] = "warning",
                when: Callable[[Any], bool] | None = None,
                example: Any = None) -> Mapping[str, Support]:
    """Metadata: accepted but not implemented (see :class:`Unsupported`)."""
    return support(Unsupported(reason, severity, when, example))


def derived(note: str) -> Mapping[str, Support]:
    """Metadata: validation fills the field in, as ``note`` says."""
    return support(Derived(note))


def structural(note: str = "") -> Mapping[str, Support]:
    """Metadata: a section or container whose own fields carry their notes."""
    return support(Structural(note))


def entry_of(f: dataclasses.Field[Any]) -> Support | None:
    """The support entry a field declares; ``None`` for a field without one."""
    entry = f.metadata.get(SUPPORT_KEY)
    return entry if isinstance(entry, (Consumed, Unsupported, Derived, Structural)) else None


def positive(value: Any) -> bool:
    """``when`` of a count whose positive values are not implemented."""
    return value is not None and value > 0


# --------------------------------------------------------------------------------------
# Consumers (modules), named once
# --------------------------------------------------------------------------------------

DERIVE = "rft.config.derive"
CHECK = "rft.config.check_sections"
CHECK_ALGORITHM = "rft.config.check_algorithm"
CHECK_BUFFER = "rft.config.check_buffer"
CHECK_MODELS = "rft.config.check_models"
CHECK_TRAINER = "rft.config.check_trainer"
TRINITY_FORMS = "rft.config.trinity_forms"
DJ_SERVICE = "rft_plugin_data_juicer.service"
DJ_OPERATORS = "rft_plugin_data_juicer.experience"
DJ_AGENT = "rft_plugin_data_juicer.tasks"
BUILD_STAGES = "rft.config"
SCHEMA = "rft.config.schema"
OPTIM = "rft.trainer.optim"
OPTIONS = "rft.trainer.options"
TORCH_TRAINER = "rft.trainer.torch_trainer"
ROLLOUT_PREP = "rft.trainer.rollout_prep"
ROLLOUT_CORRECTION = "rft.config.rollout_correction_spec"
POLICY_UPDATES = "rft.trainer.policy_updates"
TRAINER_RANKS = "rft.trainer.ranks"
ENGINE = "rft.engines.engine"
ENGINE_FACTORY = "rft.engines.engine_factory"
CALL_BATCHING = "rft.engines.call_batching"
VLLM = "rft.engines.vllm_engine"
VLLM_SETTINGS = "rft.engines.vllm_settings"
EXTERNAL_ENGINE = "rft.engines.external_engine"
EXTERNAL_CHECKS = "rft.config.external"
EXPLORER = "rft.rollout.explorer"
AUXILIARY = "rft.rollout.auxiliary"
REPLY_PARSING = "rft.engines.reply_parsing"
ENDPOINT_SETTINGS = "rft.endpoint.settings"
TASKSET = "rft.buffer.taskset"
SFT_DATA = "rft.buffer.sft_data"
BUFFER_FACTORY = "rft.buffer.factory"
BUILDERS = "rft.modes.builders"
STAGE = "rft.modes.stage"
BENCH = "rft.modes.bench"
EXPLORE = "rft.modes.explore"
TRAIN = "rft.modes.train"
SERVE = "rft.modes.serve"
COLOCATE = "rft.modes.colocate"
ROLLOUT_RECORD = "rft.monitor.rollout_record"
LAUNCHER = "rft.launcher"
BOTH = "rft.modes.both.coordinator"
BOTH_ENTRY = "rft.modes.both"
BOTH_CHECKPOINTS = "rft.modes.both.checkpoints"
BOTH_ACTORS = "rft.distributed.both_actors"
WORKERS = "rft.distributed.workers"
CLUSTER = "rft.distributed.cluster"
PLACEMENT = "rft.distributed.placement"
ACTOR_ENV = "rft.distributed.actor_env"
TIMELINE = "rft.distributed.timeline"
EXPLORE_ENGINES = "rft.distributed.explore_engines"
SHARED_QUEUE = "rft.distributed.shared_queue"
PLAN = "rft.config.plan"
RAY_TIMELINE = "rft.config.ray_timeline"
LOGS = "rft.logs"
CHAT_TEMPLATE = "rft.chat_template"
PREFERENCE_DATA = "rft.buffer.preference_data"
DATA_CHECKS = "rft.config.data_checks"
OFFLINE = "rft.buffer.offline"
LORA_CHECK = "rft.config.lora"
TRAINER_LORA = "rft.trainer.lora"
VERL_LORA = "rft_plugin_verl.lora"
VERL_CONFIG = "rft_plugin_verl.config"

# --------------------------------------------------------------------------------------
# Notes and reasons several fields share
# --------------------------------------------------------------------------------------

RESOLVED = "resolved through the plugin registry into the run plan"
TEMPLATE_ORDER = "precedence: docs/configuration.md, chat templates"
RETRY_READ = ("a read that failed because the file is not there (yet) or the SQLite file is "
              "locked is tried again; then one line names it; unset: buffer's value")
RETRY_SQL = ("sql: an operation that failed on a locked / busy database or a disk I/O error "
             "is tried again; file datasets: as a taskset's read; unset: buffer's value")
RETRY_DEFAULT = ("the value of every taskset and experience buffer that sets none "
                 "(Trinity-RFT 0.2's buffer-level setting)")
PROGRESS = "datasets' progress bars (sql: a tqdm bar) on stderr while loading"
TINKER = "the Tinker training service is not supported by rft; it has no effect"
DATA_JUICER = "the Data-Juicer service is not supported by rft; it has no effect"
TASK_PIPELINE = "task pipelines are not implemented by rft; tasks are used as read"
TASK_PIPELINE_CONFIG = "rft.config.task_pipeline"
TASK_PIPELINE_RUN = "rft.data.task_pipeline"
TOP_LOGPROBS = ("top log-probabilities are not returned (rft returns the sampled token's "
                "log-probability only, as with 0); it has no effect")
