"""The ``log`` section: level, one file per role under the job dir, grouped by node."""

from __future__ import annotations

import logging

from rft.config.schema import LogConfig
import pytest

from rft.logs import configure_logging, node_address, reset_logging


@pytest.fixture(autouse=True)
def _clean_logging():
    yield
    reset_logging()


def test_records_at_the_level_go_to_the_role_file(tmp_path):
    path = configure_logging(LogConfig(level="WARNING"), str(tmp_path), "launcher")
    assert path == str(tmp_path / "log" / "launcher.log")
    log = logging.getLogger("rft.test_logs")
    log.info("not written at level WARNING")
    log.warning("written")
    text = (tmp_path / "log" / "launcher.log").read_text()
    assert "written" in text and "not written" not in text


def test_group_by_node_and_a_second_stage_replaces_the_file(tmp_path):
    first = configure_logging(LogConfig(level="DEBUG"), str(tmp_path / "a"), "explorer")
    second = configure_logging(LogConfig(level="DEBUG", group_by_node=True),
                               str(tmp_path / "b"), "explorer")
    assert second == str(tmp_path / "b" / "log" / node_address() / "explorer.log")
    logging.getLogger("rft.test_logs").debug("stage two")
    assert "stage two" in (tmp_path / "b" / "log" / node_address() / "explorer.log").read_text()
    assert "stage two" not in (tmp_path / "a" / "log" / "explorer.log").read_text()
    assert first != second
    ours = [h for h in logging.getLogger("rft").handlers if getattr(h, "_rft_run_handler", False)]
    assert len(ours) == 2  # the file of stage two and stderr, nothing left from stage one


class FlagReward:
    """A reward plugin that reads ``explorer.env_vars`` from the environment."""

    from rft import hookimpl as _hookimpl

    @_hookimpl
    def register_reward_fns(self):
        import os

        def flag_reward(response, truth, args=None):
            return {"accuracy": float(os.environ.get("RFT_TEST_FLAG") == "on")}

        return {"flag_reward": flag_reward}


def test_explorer_env_vars_reach_the_workflows_and_are_restored(rft_run, monkeypatch):
    import os

    monkeypatch.delenv("RFT_TEST_FLAG", raising=False)
    outcome = rft_run({"explorer.env_vars": {"RFT_TEST_FLAG": "on"},
                       "buffer.explorer_input.taskset.default_reward_fn_type": "flag_reward"},
                      plugins=[FlagReward()], steps=1)
    assert outcome.rewards() == [1.0]
    assert "RFT_TEST_FLAG" not in os.environ
