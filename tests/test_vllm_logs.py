"""vLLM's INFO records are quiet unless ``log.level`` is DEBUG (issue #28, item 16)."""

from __future__ import annotations

import logging

import pytest

from rft.engines import vllm_logs
from rft.engines.vllm_logs import ENV, configure_vllm_logging, vllm_log_level


@pytest.fixture
def fresh(monkeypatch):
    """No VLLM_LOGGING_LEVEL in the environment, nothing set by rft yet; the vllm logger's
    level restored afterwards."""
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.setattr(vllm_logs, "_set_by_rft", None)
    logger = logging.getLogger("vllm")
    level = logger.level
    yield monkeypatch
    logger.setLevel(level)


def test_levels():
    assert vllm_log_level("INFO") == "WARNING"  # rft's default: vLLM quiet
    assert vllm_log_level("WARNING") == "WARNING"
    assert vllm_log_level("DEBUG") == "INFO"


def test_default_is_quiet_and_debug_shows_vllm_info(fresh):
    import os

    assert configure_vllm_logging("INFO") == "WARNING"
    assert os.environ[ENV] == "WARNING"  # read by vLLM at import, inherited by its workers
    assert not logging.getLogger("vllm").isEnabledFor(logging.INFO)
    assert configure_vllm_logging("DEBUG") == "INFO"  # a later stage with DEBUG
    assert os.environ[ENV] == "INFO" and logging.getLogger("vllm").isEnabledFor(logging.INFO)


def test_the_users_own_setting_wins(fresh):
    fresh.setenv(ENV, "debug")
    assert configure_vllm_logging("INFO") == "DEBUG"
    assert logging.getLogger("vllm").isEnabledFor(logging.DEBUG)


@pytest.mark.parametrize("level", ["INFO", "DEBUG"])
def test_the_engine_takes_the_runs_log_level(tmp_path, tiny_model_dir, monkeypatch, level):
    """``VLLMEngine.from_config`` hands ``log.level`` to the engine (its constructor is
    replaced by one that records its arguments: no vLLM engine is started)."""
    from fixtures_models import arithmetic_tasks
    from rft.config import load_config
    from rft.engines.vllm_engine import VLLMEngine
    from test_embedded_run import write_config

    seen = {}
    monkeypatch.setattr(VLLMEngine, "__init__", lambda self, *a, **kw: seen.update(kw))
    config = write_config(tmp_path, tiny_model_dir, arithmetic_tasks(tmp_path, 2),
                          log={"level": level})
    VLLMEngine.from_config(load_config(config).stages[0].config)
    assert seen["log_level"] == level
