"""The run-service contract (``rft.services``) the Data-Juicer service plugs into: the
launcher's start / stop around a stage, the variables it hands the run, validation of
``service.*`` sections."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from rft.config import load_config
from rft.config.plan import Selected
from rft.errors import ConfigError
from rft.services import RunService, run_services, with_service_env
from rft.testing.runs import apply_overrides, tiny_run_config, write_taskset

EVENTS: list[str] = []


class Recorder(RunService):
    """A service that records its life and hands the run one variable."""

    def start(self) -> dict[str, str]:
        EVENTS.append(f"start {self.config}")
        if self.config == "broken":
            raise RuntimeError("cannot start")
        return {"RFT_TEST_SERVICE": f"url-of-{self.config}"}

    def close(self) -> None:
        EVENTS.append(f"close {self.config}")


def chosen(name: str) -> Selected[Any]:
    return Selected(f"service.{name}", name, Recorder, name)


def test_services_start_in_order_and_stop_in_reverse_even_on_error(monkeypatch):
    EVENTS.clear()
    monkeypatch.delenv("RFT_TEST_SERVICE", raising=False)
    with pytest.raises(ValueError):
        with run_services([chosen("a")], "/tmp") as variables:
            assert variables == {"RFT_TEST_SERVICE": "url-of-a"}
            assert os.environ["RFT_TEST_SERVICE"] == "url-of-a"
            raise ValueError("the stage failed")
    assert EVENTS == ["start a", "close a"]
    assert "RFT_TEST_SERVICE" not in os.environ  # restored
    EVENTS.clear()
    with pytest.raises(RuntimeError):
        with run_services([chosen("a"), chosen("broken")], "/tmp"):
            pass
    assert EVENTS == ["start a", "start broken", "close broken", "close a"]


def config_file(tmp_path: Path, model: Path, overrides: dict) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(apply_overrides(tiny_run_config(
        model, write_taskset(tmp_path / "tasks.jsonl", 2), tmp_path), overrides)))
    return path


def test_service_section_resolves_and_its_variables_reach_explorer_env_vars(tmp_path,
                                                                             tiny_model_dir):
    path = config_file(tmp_path, tiny_model_dir, {
        "service": {"data_juicer": {"auto_start": True}},
        "explorer.env_vars": {"MINE": "1"}})
    [stage] = load_config(path).stages
    [service] = stage.plan.services
    assert (service.key, service.name) == ("service.data_juicer", "data_juicer")
    assert service.args.auto_start is True and service.args.port is None
    moved = with_service_env(stage, {"RFT_DATA_JUICER_URL": "http://127.0.0.1:1"})
    assert moved.config.explorer.env_vars == {"RFT_DATA_JUICER_URL": "http://127.0.0.1:1",
                                              "MINE": "1"}
    assert stage.config.explorer.env_vars == {"MINE": "1"}  # the stage itself unchanged


def test_service_and_operator_mistakes_are_one_line_each(tmp_path, tiny_model_dir):
    path = config_file(tmp_path, tiny_model_dir, {
        "service": {"data_juicer": {"port": 5005}},
        "data_processor": {"experience_pipeline": {"operators": [
            {"name": "data_juicer", "args": {"config_path": "r.yaml"}}]}}})
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert caught.value.problems == [
        "service.data_juicer: set auto_start: true (the run starts a Data-Juicer server) "
        "or server_url (a running one)"]
    path = config_file(tmp_path, tiny_model_dir, {
        "data_processor": {"experience_pipeline": {"operators": [
            {"name": "data_juicer", "args": {"config_path": "r.yaml"}}]}}})
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert caught.value.problems == [
        "data_processor.experience_pipeline.operators[0].name: the data_juicer experience "
        "operator works through service.data_juicer, which is not set (e.g. service: "
        "{data_juicer: {auto_start: true}})"]


def test_data_processor_url_is_read_as_server_url(tmp_path, tiny_model_dir):
    url = "http://127.0.0.1:5005"
    path = config_file(tmp_path, tiny_model_dir, {"data_processor": {"data_processor_url": url}})
    loaded = load_config(path)
    assert loaded.stages[0].config.service.data_juicer.server_url == url
    assert f"data_processor.data_processor_url: Trinity-RFT's older form, read as " \
           f"service.data_juicer.server_url ({url!r})" in loaded.warnings
    path = config_file(tmp_path, tiny_model_dir, {
        "data_processor": {"data_processor_url": url},
        "service": {"data_juicer": {"server_url": "http://127.0.0.1:6006"}}})
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert caught.value.problems == [
        f"data_processor.data_processor_url: {url!r} differs from "
        "service.data_juicer.server_url 'http://127.0.0.1:6006'; set one of them"]


def test_dj_process_desc_is_one_data_juicer_task_operator(tmp_path, tiny_model_dir):
    path = config_file(tmp_path, tiny_model_dir, {
        "service": {"data_juicer": {"auto_start": True}},
        "data_processor": {"task_pipeline": {
            "inputs": [str(tmp_path / "tasks.jsonl")],
            "dj_process_desc": "Keep questions longer than 5 characters.",
            "agent_model_name": "http://127.0.0.1:8000/v1",
            "agent_model_config": {"model_name": "qwen-max"}}}})
    [stage] = load_config(path).stages
    [operator] = stage.plan.task_operators
    assert operator.name == "data_juicer"
    assert (operator.args.dj_process_desc, operator.args.agent_model_name,
            operator.args.agent_model_config) == (
        "Keep questions longer than 5 characters.", "http://127.0.0.1:8000/v1",
        {"model_name": "qwen-max"})


def test_an_agent_model_that_names_nothing_here_is_warned(tmp_path, tiny_model_dir):
    path = config_file(tmp_path, tiny_model_dir, {
        "service": {"data_juicer": {"auto_start": True}},
        "data_processor": {"task_pipeline": {
            "inputs": [str(tmp_path / "tasks.jsonl")], "dj_process_desc": "Drop short ones.",
            "agent_model_name": "qwen-max"}}})
    warnings = load_config(path).warnings
    assert "data_processor.task_pipeline.operators[0].args.agent_model_name: 'qwen-max' is " \
           "neither an auxiliary model of the run, an http(s) URL nor a local model folder " \
           "here: the pipeline stops when it runs unless it is one there" in warnings
    assert any(w.startswith("data_processor.task_pipeline: Trinity-RFT's older agent form")
               for w in warnings)
