"""Validation's two stages: ``derive`` returns a new config, ``check`` only reads it and
reports every independent problem in one pass; a chained stage gets a new, checked plan."""

from __future__ import annotations

import copy
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from config_corpus import BASE_CONFIG, prepare_environment
from rft.config import load_config
from rft.config.check import check
from rft.config.convert import to_dataclass
from rft.config.derive import Derived, derive
from rft.config.load import load_plain
from rft.config.schema import RftConfig
from rft.errors import ConfigError
from rft.launcher import start_from
from rft.plugins import PluginRegistry


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    prepare_environment(tmp_path, monkeypatch)
    return tmp_path


@pytest.fixture(scope="module")
def registry() -> PluginRegistry:
    return PluginRegistry.create()


def raw_config(*overrides: str) -> RftConfig:
    problems: list[str] = []
    config = to_dataclass(RftConfig, load_plain(BASE_CONFIG, overrides), "", problems)
    assert problems == [] and isinstance(config, RftConfig)
    return config


def test_five_independent_errors_in_five_sections_are_five_lines_of_one_run(env):
    overrides = ["algorithm.optimizer.lr=-1", "buffer.batch_size=0", "explorer.max_timeout=0",
                 "synchronizer.sync_interval=0", "trainer.save_interval=-1"]
    result = subprocess.run([sys.executable, "-m", "rft.cli", "validate", str(BASE_CONFIG),
                             *overrides], capture_output=True, text=True, timeout=300)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "rft: algorithm.optimizer.lr: must be > 0, got -1.0",
        "rft: buffer.batch_size: must be > 0, got 0",
        "rft: explorer.max_timeout: must be > 0 seconds, got 0",
        "rft: synchronizer.sync_interval: must be > 0, got 0",
        "rft: trainer.save_interval: must be >= 0, got -1",
    ]


def test_an_unknown_algorithm_does_not_hide_the_optimizer_problem(env, registry):
    derived = derive(raw_config("algorithm.algorithm_type=nope",
                                "algorithm.optimizer.lr=-1"), registry)
    problems, _, plan = check(derived, registry)
    assert plan is None
    assert [p.split(":", 1)[0] for p in problems] == ["algorithm.algorithm_type",
                                                       "algorithm.optimizer.lr"]


def test_derive_returns_a_new_config_and_leaves_its_input_alone(env, registry):
    raw = raw_config("trainer.trainer_config={actor_rollout_ref: {actor: {optim: {lr: 0.5}}}}")
    before = copy.deepcopy(raw)
    derived = derive(raw, registry)
    assert raw == before
    assert raw.buffer.train_batch_size is None and raw.model.max_model_len is None
    c = derived.config
    assert (c.buffer.train_batch_size, c.model.max_model_len) == (16, 96)
    assert c.algorithm.optimizer.lr == 1e-5  # the user's lr wins over veRL's key …
    assert c.trainer.trainer_config is None  # … which leaves the tree (reconciled)
    assert derived.warnings == ("trainer.trainer_config.actor_rollout_ref.actor.optim.lr 0.5 "
                                "is overridden by algorithm.optimizer.lr 1e-05",)


def test_check_only_reads_the_derived_config(env, registry):
    derived = derive(raw_config(), registry)
    before = copy.deepcopy(derived.config)
    problems, _, plan = check(derived, registry)
    assert problems == [] and plan is not None
    assert derived.config == before and plan.config is derived.config


def test_the_derived_token_budget_is_a_fact_of_the_plan(env, registry):
    plan = check(derive(raw_config(), registry), registry).plan
    assert plan is not None and plan.token_budget is not None
    assert plan.config.trainer.max_token_len_per_gpu == plan.token_budget.tokens
    set_by_user = check(derive(raw_config("trainer.max_token_len_per_gpu=4096"), registry),
                        registry).plan
    assert set_by_user is not None and set_by_user.token_budget is None


def test_a_chained_stage_gets_a_new_checked_plan(env, registry):
    stage = load_config(BASE_CONFIG, registry=registry).stages[0]
    previous_model = env / "previous_final_model"
    previous_model.mkdir()
    chained = start_from(stage, str(previous_model), stage, registry, "stages[1].")
    assert chained.plan is not stage.plan
    assert chained.config.model.model_path == str(previous_model)
    assert chained.config.model.critic_model_path == str(previous_model)
    assert stage.config.model.model_path == str(env / "model")  # the built plan is unchanged
    with pytest.raises(ConfigError) as caught:
        start_from(stage, str(env / "gone"), stage, registry, "stages[1].")
    assert caught.value.problems == [f"stages[1].model.model_path: path "
                                     f"'{env / 'gone'}' does not exist"]


def test_check_takes_a_replaced_config_without_deriving_again(env, registry):
    derived = derive(raw_config(), registry)
    changed = Derived(replace(derived.config, buffer=replace(derived.config.buffer,
                                                             batch_size=-3)),
                      derived.token_budget)
    problems, _, plan = check(changed, registry)
    assert plan is None and problems == ["buffer.batch_size: must be > 0, got -3"]
