"""Tiny end-to-end runs for tests: a colocate GRPO config on the tiny model, a small
arithmetic taskset, and the metrics the run logged.

    from rft.testing.runs import run_tiny
    outcome = run_tiny(model_dir, taskset, tmp_dir, {"algorithm.policy_loss_fn": "my_loss"},
                       plugins=[MyPlugin()])
    assert len(outcome.metrics) == 2

The ``rft_run`` fixture of rft's pytest plugin (:mod:`rft.testing.pytest_plugin`) wraps
:func:`run_tiny`. The default config uses names of the official plugins
(``grpo`` from rft-plugin-grpo, ``simple_workflow`` from rft-plugin-workflows,
``accuracy_reward`` from rft-plugin-rewards); overrides replace any of them.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rft.hookspecs import hookimpl

__all__ = ["RunOutcome", "TextRewardPlugin", "apply_overrides", "read_metrics", "run_tiny",
           "text_reward", "tiny_run_config", "write_taskset"]


def text_reward(response: str, truth: Any = None) -> dict[str, float]:
    """``text = (Σ ord(c) mod 7) / 7`` over the response's characters: a reward that varies
    with the sampled text, so the tiny random model (which never answers right) still gets
    group advantages that are not all zero."""
    return {"text": float(sum(map(ord, response)) % 7) / 7.0}


class TextRewardPlugin:
    """An in-process plugin registering :func:`text_reward` as ``text_reward``, for
    ``rft_run(..., plugins=[TextRewardPlugin()])`` runs whose loss must see a signal."""

    @hookimpl
    def register_reward_fns(self) -> dict[str, Any]:
        return {"text_reward": text_reward}


@dataclass(frozen=True)
class RunOutcome:
    """What a finished tiny run left behind."""

    metrics: list[dict[str, float]]
    """One dict per step (step 1 first): the explorer's and the trainer's metrics of that
    step merged (``rollout/reward/mean``, ``actor/pg_loss``, …), read from the ``jsonl``
    monitor files."""
    job_dir: Path
    """``<checkpoint_root_dir>/<project>/<name>``: checkpoints, ``monitor/*.jsonl``,
    ``summary.json``."""

    def rewards(self) -> list[float]:
        """``rollout/reward/mean`` of each step that explored."""
        return [step["rollout/reward/mean"] for step in self.metrics
                if "rollout/reward/mean" in step]


def write_taskset(path: str | Path, count: int = 8) -> Path:
    """A JSONL taskset of ``count`` arithmetic rows ``{"question": "3+1=", "answer": "4"}``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"question": f"{i}+1=", "answer": str(i + 1)}) + "\n"
                            for i in range(count)), encoding="utf-8")
    return path


def tiny_run_config(model: str | Path, taskset: str | Path, root: str | Path,
                    steps: int = 2) -> dict[str, Any]:
    """A colocate GRPO config (``hf`` engine in fp32, ``torch`` trainer, ``jsonl``
    monitor): 2 tasks × 2 rollouts of at most 8 tokens per step, ``steps`` steps, weights
    synced in memory every step, no evaluation, no intermediate checkpoint."""
    return {
        "project": "rft_run", "name": "run", "mode": "colocate",
        "checkpoint_root_dir": str(Path(root) / "checkpoints"),
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 2, "optimizer": {"lr": 1e-3}},
        "model": {"model_path": str(model), "max_prompt_tokens": 128, "max_response_tokens": 8},
        "cluster": {"node_num": 1, "gpu_per_node": 0},
        "buffer": {
            "batch_size": 2, "total_steps": steps,
            "explorer_input": {
                "taskset": {"name": "train", "path": str(taskset),
                            "format": {"prompt_key": "question", "response_key": "answer"},
                            "default_workflow_type": "simple_workflow",
                            "default_reward_fn_type": "accuracy_reward"},
            },
            "trainer_input": {"experience_buffer": {"name": "exp", "storage_type": "queue"}},
        },
        "explorer": {"eval_interval": 1000, "rollout_model": {"engine_type": "hf",
                                                              "dtype": "float32"}},
        "synchronizer": {"sync_method": "memory", "sync_interval": 1},
        "trainer": {"trainer_type": "torch"},
        "monitor": {"monitor_type": "jsonl"},
    }


def apply_overrides(config: dict[str, Any], overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    """``config`` with ``overrides`` merged in (a copy): nested dicts merge key by key,
    other values replace; a dotted key ``"algorithm.policy_loss_fn"`` is the nested
    ``{"algorithm": {"policy_loss_fn": …}}``."""
    merged = copy.deepcopy(config)
    for key, value in (overrides or {}).items():
        *parents, last = key.split(".")
        node = merged
        for part in parents:
            child = node.get(part)
            if not isinstance(child, dict):
                child = node[part] = {}
            node = child
        if isinstance(value, Mapping) and isinstance(node.get(last), dict):
            node[last] = apply_overrides(node[last], value)
        else:
            node[last] = copy.deepcopy(value)
    return merged


def read_metrics(job_dir: str | Path) -> list[dict[str, float]]:
    """The metrics of every ``<job_dir>/monitor/*.jsonl`` file merged per step (step 1
    first; a step-0 evaluation is left out)."""
    steps: dict[int, dict[str, float]] = {}
    for path in sorted((Path(job_dir) / "monitor").glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                record = json.loads(line)
                if record["step"] >= 1:
                    steps.setdefault(record["step"], {}).update(record["metrics"])
    return [steps[step] for step in sorted(steps)]


def run_tiny(model: str | Path, taskset: str | Path, root: str | Path,
             overrides: Mapping[str, Any] | None = None, *, plugins: Sequence[object] = (),
             steps: int = 2) -> RunOutcome:
    """Write :func:`tiny_run_config` with ``overrides`` to ``<root>/config.yaml``, load it
    with a registry that also holds ``plugins`` (modules or objects with ``@hookimpl``
    methods, registered after the installed plugins) and run it.

    :return: the :class:`RunOutcome` of the run's (last) stage.
    """
    import yaml

    from rft.config import load_config
    from rft.launcher import run
    from rft.plugins import PluginRegistry

    config = apply_overrides(tiny_run_config(model, taskset, root, steps), overrides)
    path = Path(root) / "config.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    loaded = load_config(path, registry=PluginRegistry.create(extra_plugins=plugins))
    run(loaded)
    job_dir = Path(loaded.stages[-1].plan.job_dir)
    return RunOutcome(read_metrics(job_dir), job_dir)
