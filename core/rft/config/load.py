"""Reading a YAML config: OmegaConf loading, dot-list overrides, interpolation.

The result is plain data (dicts, lists, scalars) with every ``${...}`` resolved, ready
for :mod:`rft.config.convert`. Every problem is collected as one line starting with its
location: ``FILE:LINE:COL`` for YAML syntax, the dotted key for interpolation errors, the
override itself for a malformed ``key=value``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import yaml
from omegaconf import DictConfig, ListConfig, Node, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from rft.config.convert import join_key
from rft.errors import ConfigError


def read_yaml(path: str | os.PathLike[str]) -> DictConfig:
    """Load ``path`` with OmegaConf (interpolations left unresolved).

    :raises ConfigError: missing file, YAML syntax error (with line and column), or a
        top level that is not a mapping.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ConfigError([f"{path}: config file not found"])
    try:
        loaded = OmegaConf.load(path)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else path
        what = exc.problem or exc.context or "invalid YAML"
        raise ConfigError([f"{where}: YAML syntax error: {what}"]) from exc
    except yaml.YAMLError as exc:
        raise ConfigError([f"{path}: YAML error: {str(exc).splitlines()[0]}"]) from exc
    except OSError as exc:
        raise ConfigError([f"{path}: cannot read config file: {exc.strerror}"]) from exc
    except OmegaConfBaseException as exc:  # e.g. a ${...} with an unbalanced quote or brace
        key = getattr(exc, "full_key", None)
        message = str(exc).splitlines()[0]
        raise ConfigError([f"{path}: {key + ': ' if key else ''}invalid interpolation: "
                           f"{message}"]) from exc
    if loaded is None:
        loaded = OmegaConf.create({})
    if not isinstance(loaded, DictConfig):
        raise ConfigError([f"{path}: the top level of a config must be a mapping"])
    return loaded


def apply_overrides(config: DictConfig, overrides: Sequence[str]) -> DictConfig:
    """Merge command-line ``key.sub=value`` overrides (values parsed as YAML) onto ``config``."""
    problems: list[str] = []
    for item in overrides:
        if "=" not in item or not item.split("=", 1)[0].strip():
            problems.append(f"override {item!r}: expected key.sub=value")
            continue
        key, text = item.split("=", 1)
        try:  # update() follows list indices (stages.1.buffer.batch_size=8)
            parsed = OmegaConf.to_container(OmegaConf.from_dotlist([f"value={text}"]))
            assert isinstance(parsed, dict)  # a dot-list is a mapping
            OmegaConf.update(config, key.strip(), parsed["value"], merge=True, force_add=True)
        except (OmegaConfBaseException, yaml.YAMLError, TypeError, ValueError,
                IndexError) as exc:
            problems.append(f"override {item!r}: {str(exc).splitlines()[0]}")
    if problems:
        raise ConfigError(problems)
    return config


def _interpolation_problem(key: str, raw: Any, exc: Exception) -> str:
    message = str(exc).splitlines()[0]
    if "Environment variable" in message and "not found" in message:
        variable = message.split("'")[1] if "'" in message else message
        return f"{key}: environment variable {variable} is not set (used in {raw})"
    if type(exc).__name__ == "InterpolationKeyError":
        return f"{key}: {raw} refers to a key that is not in the config"
    return f"{key}: cannot resolve {raw}: {message}"


def unset_env_variable(value: Any) -> str | None:
    """The variable of a data path left as ``${oc.env:VAR}`` text because ``VAR`` is not
    set here (see :func:`resolve`); ``None`` for any other value."""
    if isinstance(value, str) and value.startswith("${oc.env:") and value.endswith("}"):
        return value[len("${oc.env:"):-1].split(",", 1)[0].strip()
    return None


def _data_path_key(key: str) -> bool:
    """A data file's ``path`` under ``buffer`` (also in a stage's ``buffer``)."""
    parts = key.replace("[", ".").split(".")
    return parts[-1] == "path" and "buffer" in parts[:-1]


VERL_TREE = "trainer.trainer_config"
"""The veRL block (also under a stage): its own ``${...}`` root when the config's is not."""


def _verl_tree_key(key: str) -> bool:
    return key == VERL_TREE or key.endswith("." + VERL_TREE)


def _resolve_in_verl_tree(tree: tuple[str, DictConfig] | None, key: str) -> Any:
    """The leaf ``key`` resolved with the veRL block as the root (veRL's own
    interpolations such as ``${actor_rollout_ref.actor.use_dynamic_bsz}``, as in the
    separate veRL file the guide's block comes from); raises when that fails too."""
    if tree is None:
        raise KeyError(key)
    prefix, root = tree
    return OmegaConf.select(root, key[len(prefix) + 1:], throw_on_missing=True)


def resolve(node: DictConfig | ListConfig, key: str, problems: list[str],
            verl_tree: tuple[str, DictConfig] | None = None) -> Any:
    """Plain data of ``node`` with every interpolation resolved, leaf by leaf, so that all
    unresolvable leaves are reported (each with its dotted key), not just the first.

    A data path (``buffer....path``) naming an environment variable unset here keeps its
    ``${oc.env:VAR}`` text: the config may be meant for another machine, so validation
    warns and a run stops at start (:func:`unset_env_variable`).

    Under ``trainer.trainer_config`` an interpolation naming a key the config does not
    have is resolved with the veRL block itself as the root (``verl_tree``: its dotted
    key and a detached copy), where veRL's own ``${...}`` point."""
    if isinstance(node, DictConfig):
        items: list[tuple[str | int, Any]] = [(str(k), k) for k in node.keys()]
    else:
        items = [(i, i) for i in range(len(node))]
    result: Any = {} if isinstance(node, DictConfig) else []
    for label, index in items:
        child_key = join_key(key, label)
        child = node._get_node(index)
        raw = child._value() if isinstance(child, Node) else None
        try:
            value = node[index]
        except OmegaConfBaseException as exc:
            if _data_path_key(child_key) and unset_env_variable(raw) \
                    and "Environment variable" in str(exc):
                value = raw
            else:
                try:
                    value = _resolve_in_verl_tree(verl_tree, child_key)
                except (OmegaConfBaseException, KeyError):
                    problems.append(_interpolation_problem(child_key, raw, exc))
                    continue
        if isinstance(value, DictConfig) and _verl_tree_key(child_key):
            detached = OmegaConf.create(OmegaConf.to_container(value, resolve=False))
            assert isinstance(detached, DictConfig)  # made from a mapping
            value = resolve(value, child_key, problems, (child_key, detached))
        elif isinstance(value, (DictConfig, ListConfig)):
            value = resolve(value, child_key, problems, verl_tree)
        if isinstance(result, dict):
            result[str(label)] = value
        else:
            result.append(value)
    return result


def load_plain(path: str | os.PathLike[str], overrides: Sequence[str] = ()) -> dict[str, Any]:
    """Read a config file, apply overrides and resolve interpolations into plain data.

    :raises ConfigError: with one line per problem.
    """
    config = apply_overrides(read_yaml(path), overrides)
    problems: list[str] = []
    plain = resolve(config, "", problems)
    if problems:
        raise ConfigError(problems)
    return plain
