"""``monitor.enable_ray_timeline``: Ray's timeline in ``<monitor dir>/timeline.json`` when a
run leaves its Ray cluster; a one-line warning in runs that do not use Ray."""

from __future__ import annotations

import json

import pytest
from config_corpus import BASE_CONFIG, prepare_environment
from rft.config import load_config, schema
from rft.config.ray_timeline import NO_RAY, uses_ray
from rft.distributed.cluster import ray_cluster
from rft.testing.config_edit import replaced


@pytest.fixture
def env(tmp_path, monkeypatch):
    prepare_environment(tmp_path, monkeypatch)
    monkeypatch.setenv("RFT_PLUGINS", "rft-plugin-grpo,rft-plugin-workflows,rft-plugin-rewards,"
                       "rft-plugin-selectors")  # what base.yaml uses
    return tmp_path


def test_a_run_without_ray_is_warned(env):
    loaded = load_config(BASE_CONFIG, ["monitor.enable_ray_timeline=true"])
    assert loaded.config.mode == "colocate" and not uses_ray(loaded.config)
    assert loaded.warnings == [f"monitor.enable_ray_timeline: {NO_RAY}"]
    assert load_config(BASE_CONFIG, []).warnings == []


def test_which_runs_use_ray():
    config = schema.RftConfig(mode="both")
    assert uses_ray(config)
    config = replaced(config, {"mode": "explore"})
    assert not uses_ray(config)
    config = replaced(config, {"explorer.rollout_model.engine_num": 2})
    assert uses_ray(config)
    config = replaced(config, {"mode": "bench"})
    assert not uses_ray(config)


@pytest.mark.slow
def test_timeline_is_written_when_the_run_leaves_ray(tmp_path):
    """A private local Ray cluster (``cluster.ray_address: local``), one remote task, then
    the timeline file: Chrome trace events, among them the task's."""
    import ray

    config = schema.RftConfig(cluster=schema.ClusterConfig(ray_address="local"))
    path = tmp_path / "job" / "monitor" / "timeline.json"

    @ray.remote(num_cpus=0)
    def marked_task() -> int:
        return 7

    with ray_cluster(config, timeline=str(path)):
        assert ray.get(marked_task.remote()) == 7
    assert not ray.is_initialized()
    events = json.loads(path.read_text())
    assert isinstance(events, list) and events
    assert any("marked_task" in str(event.get("name", "")) for event in events)
