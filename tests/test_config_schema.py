"""The config schema: defaults, documented fields, allowed types, reference configs.

The reference configs under ``tests/data/reference_configs`` are copied from the
Trinity-RFT documentation this project reproduces; every key in them must exist in the
schema (they are read with ``yaml.safe_load``, interpolations left as strings).
"""

import ast
import dataclasses
import inspect
import operator
import types
import typing
from pathlib import Path
from typing import Any, Literal, Union

import pytest
import yaml

from rft.config import convert, schema
from rft.config.schema import RftConfig

REFERENCE_DIR = Path(__file__).parent / "data" / "reference_configs"
REFERENCE_CONFIGS = sorted(REFERENCE_DIR.glob("*.yaml"))

SCHEMA_CLASSES = [
    obj for _, obj in inspect.getmembers(schema, inspect.isclass)
    if dataclasses.is_dataclass(obj) and obj.__module__ == schema.__name__
]


def _reachable(cls: type, seen: set[type]) -> set[type]:
    """Dataclasses reachable from ``cls`` through field types."""
    if cls in seen:
        return seen
    seen.add(cls)
    for f in dataclasses.fields(cls):
        for inner in _walk_type(f.type):
            if dataclasses.is_dataclass(inner):
                _reachable(inner, seen)
    return seen


def _walk_type(tp: Any) -> list[Any]:
    """``tp`` and every type nested inside it."""
    out = [tp]
    if typing.get_origin(tp) is not Literal:
        for arg in typing.get_args(tp):
            out.extend(_walk_type(arg))
    return out


def _unwrap_optional(tp: Any) -> tuple[Any, bool]:
    if typing.get_origin(tp) in (Union, types.UnionType):
        args = typing.get_args(tp)
        if type(None) in args:
            rest = [a for a in args if a is not type(None)]
            if len(rest) == 1:
                return rest[0], True
    return tp, False


# --- defaults ------------------------------------------------------------------------


def test_schema_module_has_no_postponed_annotations() -> None:
    """The converter reads ``dataclasses.fields(...).type`` as real type objects."""
    for cls in SCHEMA_CLASSES:
        for f in dataclasses.fields(cls):
            assert not isinstance(f.type, str), f"{cls.__name__}.{f.name}: {f.type!r}"


@pytest.mark.parametrize("cls", SCHEMA_CLASSES, ids=lambda c: c.__name__)
def test_every_dataclass_instantiates_without_arguments(cls: type) -> None:
    cls()


@pytest.mark.parametrize("cls", SCHEMA_CLASSES, ids=lambda c: c.__name__)
def test_every_dataclass_is_frozen(cls: type) -> None:
    """Config values are built, never edited (``convert`` constructs them, ``derive`` and
    stage chaining use :func:`dataclasses.replace`)."""
    instance = cls()
    name = dataclasses.fields(cls)[0].name
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(instance, name, getattr(instance, name))


def test_replaced_builds_new_sections_along_a_dotted_key() -> None:
    from rft.testing.config_edit import replaced

    config = RftConfig()
    changed = replaced(config, {"model.logprobs": 5, "explorer.rollout_model.dtype": "float32"})
    assert (changed.model.logprobs, changed.explorer.rollout_model.dtype) == (5, "float32")
    assert (config.model.logprobs, config.explorer.rollout_model.dtype) == (
        RftConfig().model.logprobs, RftConfig().explorer.rollout_model.dtype)
    assert changed.buffer is config.buffer  # sections off the keys are shared, not copied
    with pytest.raises(AttributeError, match="ModelConfig has no field 'logprob'"):
        replaced(config, {"model.logprob": 5})


def test_every_dataclass_is_reachable_from_the_top_level() -> None:
    reachable = _reachable(RftConfig, set())
    unreachable = {
        c.__name__ for c in SCHEMA_CLASSES
        if c not in reachable and not any(issubclass(r, c) for r in reachable)
    }
    assert not unreachable


def test_mutable_defaults_are_not_shared() -> None:
    a, b = RftConfig(), RftConfig()
    a.algorithm.optimizer.betas.append(0.5)
    a.explorer.env_vars["X"] = "1"
    a.buffer.explorer_input.eval_tasksets.append(schema.TasksetConfig())
    assert b.algorithm.optimizer.betas == [0.9, 0.999]
    assert b.explorer.env_vars == {}
    assert b.buffer.explorer_input.eval_tasksets == []


GUIDE_DEFAULTS = [
    # global
    ("mode", "both"),
    ("continue_from_checkpoint", True),
    ("ignore_validator_suggestions", False),
    ("ray_namespace", None),  # derived: <project>/<name>
    ("checkpoint_job_dir", None),  # derived
    # algorithm
    ("algorithm.optimizer.lr_scheduler_type", "constant"),
    ("algorithm.optimizer.lr", 1e-6),
    ("algorithm.optimizer.lr_warmup_steps_ratio", 0.0),
    ("algorithm.optimizer.weight_decay", 0.01),
    ("algorithm.repeat_times", None),  # preset default
    ("algorithm.advantage_fn", None),
    ("algorithm.policy_loss_fn", None),
    ("algorithm.kl_loss_fn", None),
    ("algorithm.kl_penalty_fn", None),
    ("algorithm.entropy_loss_fn", None),
    ("algorithm.sample_strategy", None),
    ("algorithm.kl_loss_fn_args", {}),
    # monitor
    ("monitor.monitor_type", "tensorboard"),
    ("monitor.enable_ray_timeline", False),
    # model
    ("model.critic_model_path", None),  # derived: model_path
    ("model.max_model_len", None),  # derived: prompt + response
    ("model.min_response_tokens", 1),
    ("model.enable_prompt_truncation", True),
    ("model.repetition_penalty", 1.0),
    ("model.lora_configs", None),
    ("model.rope_scaling", None),
    ("model.rope_theta", None),
    ("model.temperature", 1.0),
    ("model.top_p", 1.0),
    ("model.top_k", -1),
    ("model.tinker.enable", False),
    ("model.tinker.rank", 32),
    ("model.tinker.seed", None),
    ("model.tinker.train_mlp", True),
    ("model.tinker.train_attn", True),
    ("model.tinker.train_unembed", True),
    ("model.external_model.enable", False),
    ("model.external_model.base_url_env", "OPENAI_BASE_URL"),
    ("model.external_model.api_key_env", "OPENAI_API_KEY"),
    ("model.external_model.model_name", None),
    # buffer
    ("buffer.batch_size", 1),
    ("buffer.train_batch_size", None),  # derived: batch_size * repeat_times
    ("buffer.total_epochs", 1),
    ("buffer.total_steps", None),
    ("buffer.explorer_input.taskset", None),
    ("buffer.explorer_input.tasksets", []),
    ("buffer.explorer_input.eval_tasksets", []),
    # explorer
    ("explorer.name", "explorer"),
    ("explorer.runner_per_model", 8),
    ("explorer.concurrent_mode", "sequential"),
    ("explorer.max_repeat_times_per_runner", None),
    ("explorer.max_timeout", 900),
    ("explorer.max_retry_times", 2),
    ("explorer.env_vars", {}),
    ("explorer.rollout_model.engine_type", "vllm"),
    ("explorer.rollout_model.engine_num", 1),
    ("explorer.rollout_model.tensor_parallel_size", 1),
    ("explorer.rollout_model.enable_history", False),
    ("explorer.rollout_model.gpu_memory_utilization", None),  # resolved by validation
    ("explorer.auxiliary_models", []),
    ("explorer.eval_interval", 100),
    ("explorer.eval_on_startup", True),
    ("explorer.over_rollout.ratio", 0.0),
    ("explorer.over_rollout.wait_after_min", 30.0),
    ("explorer.dynamic_timeout.enable", False),
    ("explorer.dynamic_timeout.ratio", 3.0),
    ("explorer.runner_state_report_interval", 0),
    # synchronizer
    ("synchronizer.sync_method", None),  # the mode's default: nccl in `both` (the guide's), see test_config
    ("synchronizer.sync_offset", 0),
    ("synchronizer.sync_timeout", 1200),
    ("synchronizer.sync_style", "fixed"),
    # trainer
    ("trainer.name", "trainer"),
    ("trainer.trainer_type", "torch"),
    ("trainer.trainer_strategy", "fsdp"),
    ("trainer.save_strategy", "unrestricted"),
    ("trainer.save_hf_checkpoint", "last"),
    ("trainer.grad_clip", None),  # unset: algorithm.optimizer.clip_grad, else 1.0 (validation)
    ("trainer.use_dynamic_bsz", True),
    ("trainer.ulysses_sequence_parallel_size", 1),
    ("trainer.max_checkpoints_to_keep", None),  # keep all
    ("trainer.trainer_config", None),
    # service / data processor / log / stages
    ("service.data_juicer", None),
    ("data_processor.task_pipeline", None),
    ("data_processor.experience_pipeline.operators", []),
    ("log.level", "INFO"),
    ("log.group_by_node", False),
    ("stages", []),
]


@pytest.mark.parametrize(("path", "expected"), GUIDE_DEFAULTS, ids=[p for p, _ in GUIDE_DEFAULTS])
def test_default_matches_the_guide(path: str, expected: Any) -> None:
    value = operator.attrgetter(path)(RftConfig())
    assert value == expected
    assert type(value) is type(expected)  # 1 is not 1.0, None is not {}


@pytest.mark.parametrize(("cls", "path", "expected"), [
    (schema.TasksetConfig, "storage_type", "file"),
    (schema.TasksetConfig, "split", "train"),
    (schema.TasksetConfig, "subset_name", None),
    (schema.TasksetConfig, "repeat_times", None),  # derived
    (schema.TasksetConfig, "task_selector.selector_type", "sequential"),
    (schema.TasksetConfig, "rollout_args.temperature", None),  # inherit model.temperature
    (schema.TasksetConfig, "workflow_args", {}),
    (schema.ExperienceBufferConfig, "storage_type", "queue"),
    (schema.ExperienceBufferConfig, "max_read_timeout", 1800.0),
    (schema.ExperienceBufferConfig, "replay_buffer.enable", False),
    (schema.ExperienceBufferConfig, "replay_buffer.priority_fn", "linear_decay"),
    (schema.ExperienceBufferConfig, "replay_buffer.reuse_cooldown_time", None),
    (schema.FormatConfig, "prompt_type", "messages"),
    (schema.LoRAConfig, "name", None),
    (schema.LoRAConfig, "lora_rank", 32),
    (schema.LoRAConfig, "lora_alpha", 32),
    (schema.LoRAConfig, "lora_dtype", "auto"),
    (schema.LoRAConfig, "target_modules", "all-linear"),
    (schema.AuxiliaryModelConfig, "engine_num", 1),
    (schema.AuxiliaryModelConfig, "tensor_parallel_size", 1),
    (schema.StageConfig, "mode", None),
    (schema.StageConfig, "algorithm", None),
])
def test_section_default_matches_the_guide(cls: type, path: str, expected: Any) -> None:
    value = operator.attrgetter(path)(cls())
    assert value == expected
    assert type(value) is type(expected)


# --- documentation -------------------------------------------------------------------


def _undocumented_fields() -> list[str]:
    tree = ast.parse(Path(schema.__file__).read_text(encoding="utf-8"))
    missing = []
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        if ast.get_docstring(node) is None:
            missing.append(f"{node.name} (class)")
        body = node.body
        for i, stmt in enumerate(body):
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                nxt = body[i + 1] if i + 1 < len(body) else None
                documented = (
                    isinstance(nxt, ast.Expr)
                    and isinstance(nxt.value, ast.Constant)
                    and isinstance(nxt.value.value, str)
                    and nxt.value.value.strip()
                )
                if not documented:
                    missing.append(f"{node.name}.{stmt.target.id}")
    return missing


def test_every_class_and_field_has_a_docstring() -> None:
    assert _undocumented_fields() == []


def test_module_docstring_explains_the_layout() -> None:
    doc = schema.__doc__ or ""
    for section in ("algorithm", "model", "cluster", "buffer", "explorer", "synchronizer",
                    "trainer", "monitor", "service", "data_processor", "log", "stages"):
        assert f"{section}:" in doc, section


# --- allowed field types -------------------------------------------------------------

SCALARS = (int, float, bool, str)


def _allowed(tp: Any) -> bool:
    """Types the converter understands (see the module docstring of the schema)."""
    if tp is Any or tp in SCALARS or dataclasses.is_dataclass(tp):
        return True
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Literal:
        return bool(args) and all(type(a) in SCALARS for a in args)
    if origin in (Union, types.UnionType):
        inner, optional = _unwrap_optional(tp)
        return optional and _allowed(inner)
    if origin is list:
        return len(args) == 1 and _allowed(args[0])
    if origin is dict:
        return len(args) == 2 and args[0] is str and _allowed(args[1])
    return False


def test_allowed_type_check_rejects_other_forms() -> None:
    assert not _allowed(typing.Optional[typing.Union[int, str]])
    assert not _allowed(int | str)
    assert not _allowed(tuple[int, int])
    assert not _allowed(dict[int, str])
    assert not _allowed(list)
    assert _allowed(Literal["a", "b"] | None)
    assert _allowed(dict[str, list[schema.LoRAConfig]])


@pytest.mark.parametrize("cls", SCHEMA_CLASSES, ids=lambda c: c.__name__)
def test_every_field_type_is_an_allowed_form(cls: type) -> None:
    bad = [f"{f.name}: {f.type!r}" for f in dataclasses.fields(cls) if not _allowed(f.type)]
    assert bad == []


@pytest.mark.parametrize("cls", SCHEMA_CLASSES, ids=lambda c: c.__name__)
def test_every_default_fits_its_type(cls: type) -> None:
    instance = cls()
    problems: list[str] = []
    for f in dataclasses.fields(cls):
        _check(getattr(instance, f.name), f.type, f"{cls.__name__}.{f.name}", problems,
               allow_instances=True)
    assert problems == []


# --- reference configs ---------------------------------------------------------------


def _check(value: Any, tp: Any, key: str, problems: list[str],
           allow_instances: bool = False) -> None:
    """Append a line per key of ``value`` that has no place in type ``tp``."""
    tp, optional = _unwrap_optional(tp)
    if value is None:
        if not optional and tp is not Any:
            problems.append(f"{key}: null where {tp!r} is required")
        return
    if tp is Any:
        return
    if dataclasses.is_dataclass(tp):
        if allow_instances and isinstance(value, tp):
            value = {f.name: getattr(value, f.name) for f in dataclasses.fields(tp)}
        if not isinstance(value, dict):
            problems.append(f"{key}: expected a mapping, got {value!r}")
            return
        fields = {f.name: f.type for f in dataclasses.fields(tp)}
        for name, item in value.items():
            if name not in fields:
                problems.append(f"{key}.{name}: unknown key in {tp.__name__}")
            else:
                _check(item, fields[name], f"{key}.{name}", problems, allow_instances)
        return
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is list:
        if not isinstance(value, list):
            problems.append(f"{key}: expected a list, got {value!r}")
            return
        for i, item in enumerate(value):
            _check(item, args[0], f"{key}[{i}]", problems, allow_instances)
    elif origin is dict:
        if not isinstance(value, dict):
            problems.append(f"{key}: expected a mapping, got {value!r}")
            return
        for name, item in value.items():
            _check(item, args[1], f"{key}.{name}", problems, allow_instances)
    elif origin is Literal:
        if value not in args:
            problems.append(f"{key}: {value!r} not in {args}")
    elif tp is bool:
        if not isinstance(value, bool):
            problems.append(f"{key}: expected a bool, got {value!r}")
    elif tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            problems.append(f"{key}: expected an int, got {value!r}")
    elif tp is float:
        # YAML 1.1 (safe_load) reads ``1e-6`` as a string; the converter parses it.
        if isinstance(value, str):
            try:
                float(value)
            except ValueError:
                problems.append(f"{key}: expected a number, got {value!r}")
        elif isinstance(value, bool) or not isinstance(value, (int, float)):
            problems.append(f"{key}: expected a number, got {value!r}")
    elif tp is str:
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            problems.append(f"{key}: expected a string, got {value!r}")


def test_reference_configs_are_present() -> None:
    names = {p.name for p in REFERENCE_CONFIGS}
    assert {"verl_alignment_ppo_example.yaml", "verl_alignment_grpo_example.yaml"} <= names
    assert {f"gsm8k_alignment_experiment{i}.yaml" for i in range(1, 5)} <= names


@pytest.mark.parametrize("path", REFERENCE_CONFIGS, ids=lambda p: p.stem)
def test_every_key_of_a_reference_config_is_in_the_schema(path: Path) -> None:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    problems: list[str] = []
    _check(data, RftConfig, "", problems)
    assert problems == []


def test_key_check_reports_unknown_and_mistyped_keys() -> None:
    problems: list[str] = []
    _check({"explorer": {"max_timeot": 1, "rollout_model": {"engine_num": "two"}},
            "mode": "fast", "trainer": {"trainer_config": {"anything": {"goes": 1}}}},
           RftConfig, "", problems)
    assert problems == [
        ".explorer.max_timeot: unknown key in ExplorerConfig",
        ".explorer.rollout_model.engine_num: expected an int, got 'two'",
        ".mode: 'fast' not in ('both', 'train', 'explore', 'bench', 'colocate', 'serve')",
    ]


@pytest.mark.parametrize("path", REFERENCE_CONFIGS, ids=lambda p: p.stem)
def test_reference_config_converts_without_problems(path: Path) -> None:
    """The real converter accepts each reference config as is."""
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    problems: list[str] = []
    config = convert.to_dataclass(RftConfig, data, "", problems)
    assert problems == []
    assert isinstance(config, RftConfig)
