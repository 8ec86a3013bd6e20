"""Which GPUs the actors of a run get (``rft.distributed.placement``), tested on this CPU machine
with GPUs *declared* to Ray (``ray.init(num_gpus=4)``): Ray then assigns them to actors and sets
each actor's ``CUDA_VISIBLE_DEVICES`` as it would on a GPU node; nothing of CUDA is faked — the
decisions are tested, with the facts they read (Ray's resources, the GPU ids Ray assigned,
``torch.cuda.is_available()``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from rft.config import load_config
from rft.device_check import refuse_cpu_fallback
from rft.distributed.placement import (actor_gpus, auxiliary_placement, detect_cluster_gpus,
                                       detect_from_ray, gpus_of_nodes)
from rft.errors import RftError
from rft.testing.runs import apply_overrides, tiny_run_config, write_taskset

DECLARED_GPUS = 4


@pytest.fixture(scope="module")
def ray_with_gpus():
    """A private loopback Ray cluster that declares 4 GPUs on this CPU machine."""
    import ray

    from rft.distributed.cluster import loopback_only

    restore = loopback_only()
    ray.init(num_cpus=2, num_gpus=DECLARED_GPUS, include_dashboard=False,
             _node_ip_address="127.0.0.1", namespace="rft-placement-tests")
    yield
    ray.shutdown()
    restore()


def both_config(tmp_path: Path, model: Path, **overrides):
    """A validated ``both`` config with ``cluster.gpu_per_node`` (and ``node_num``) unset and
    one auxiliary model (``hf``, one engine)."""
    config = apply_overrides(tiny_run_config(model, write_taskset(tmp_path / "t.jsonl"),
                                             tmp_path), {
        "mode": "both", "cluster": {"gpu_per_node": None, "node_num": None},
        "explorer.auxiliary_models": [{"model_path": str(model), "engine_type": "hf",
                                       "name": "judge"}], **overrides})
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return load_config(path).stages[0].config


def test_gpu_per_node_is_detected_and_actors_get_disjoint_gpus(ray_with_gpus, tmp_path,
                                                               tiny_model_dir):
    """gpu_per_node unset on a cluster of 4 GPUs: detected; the explorer (its one engine), the
    auxiliary model's engine actor and the trainer each get GPUs of their own — disjoint
    ``CUDA_VISIBLE_DEVICES`` — instead of 0 GPUs each (all of them seeing every GPU)."""
    import ray

    config = both_config(tmp_path, tiny_model_dir)
    assert config.cluster.gpu_per_node is None
    config = detect_from_ray(config)
    cl = config.cluster
    assert (cl.gpu_per_node, cl.node_num) == (DECLARED_GPUS, 1)
    assert (cl.explorer_gpu_num, cl.auxiliary_gpu_num, cl.trainer_gpu_num) == (1, 1, 2)
    gpus = actor_gpus(config)
    assert (gpus.explorer, gpus.trainer) == (1, 1)
    aux = config.explorer.auxiliary_models[0]
    # mode both: the auxiliary model is an actor of its own, not in the explorer actor
    replicas, each = auxiliary_placement(aux.engine_num, aux.tensor_parallel_size,
                                         remote=False, gpus=True, own_actors=True)
    assert (replicas, each) == (1, 1)

    @ray.remote(num_cpus=0)
    class Probe:
        def devices(self) -> tuple[list[str], str]:
            return ([str(g) for g in ray.get_gpu_ids()],
                    os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>"))

    probes = {"explorer": Probe.options(num_gpus=gpus.explorer).remote(),
              "trainer": Probe.options(num_gpus=gpus.trainer).remote(),
              "judge": Probe.options(num_gpus=each).remote()}
    seen = {role: ray.get(probe.devices.remote()) for role, probe in probes.items()}
    for role, (ids, visible) in seen.items():
        assert len(ids) == 1, (role, seen)
        assert visible == ids[0], (role, seen)
    assert len({ids[0] for ids, _ in seen.values()}) == 3, seen
    for probe in probes.values():
        ray.kill(probe)


def test_rollout_replicas_and_sharded_trainer_hold_the_gpus(ray_with_gpus, tmp_path,
                                                           tiny_model_dir):
    """engine_num 2: the replicas take the GPUs, the explorer actor none; no auxiliary model
    leaves 2 GPUs for the trainer."""
    config = both_config(tmp_path, tiny_model_dir, **{
        "explorer.auxiliary_models": [],
        "explorer.rollout_model": {"engine_type": "hf", "dtype": "float32", "engine_num": 2}})
    config = detect_from_ray(config)
    assert config.cluster.trainer_gpu_num == 2
    gpus = actor_gpus(config)
    assert (gpus.explorer, gpus.rollout_replica) == (0, 1)


def test_an_external_or_in_process_auxiliary_model_takes_no_gpu():
    assert auxiliary_placement(1, 1, remote=True, gpus=True, own_actors=True) == (0, 0)
    # explore mode: one engine stays in the explorer's process
    assert auxiliary_placement(1, 1, remote=False, gpus=True, own_actors=False) == (0, 0)
    assert auxiliary_placement(1, 2, remote=False, gpus=False, own_actors=True) == (0, 0)
    assert auxiliary_placement(3, 2, remote=False, gpus=True, own_actors=False) == (3, 2)
    assert auxiliary_placement(3, 2, remote=False, gpus=False, own_actors=False) == (3, 0)


def test_detection_refuses_what_it_cannot_split(tmp_path, tiny_model_dir):
    """Nodes with different GPU counts, or a split without a GPU for the trainer: one line
    naming the key; a cluster without GPUs runs on CPU."""
    config = both_config(tmp_path, tiny_model_dir)
    with pytest.raises(RftError, match=r"^cluster\.gpu_per_node: unset, and the Ray cluster's "
                                       r"nodes have 4, 8 GPUs"):
        detect_cluster_gpus(config, [8, 4])
    config = both_config(tmp_path, tiny_model_dir)
    with pytest.raises(RftError) as failed:
        detect_cluster_gpus(config, [2])  # engine 1 + judge 1: none left for the trainer
    assert "\n" not in str(failed.value)
    assert str(failed.value).startswith("cluster.gpu_per_node: no GPU left for the trainer")
    config = both_config(tmp_path, tiny_model_dir)
    config, line = detect_cluster_gpus(config, [0, 0])
    assert line is None
    assert config.cluster.gpu_per_node == 0
    assert actor_gpus(config).explorer == 0


def test_detection_builds_a_new_config_and_leaves_the_validated_one(tmp_path, tiny_model_dir):
    """The config is frozen: detection returns a new one (the split derived and checked
    again); the validated config it started from keeps ``gpu_per_node`` unset."""
    validated = both_config(tmp_path, tiny_model_dir)
    detected, line = detect_cluster_gpus(validated, [4])
    assert validated.cluster.gpu_per_node is None and validated.cluster.node_num is None
    assert validated.cluster.trainer_gpu_num is None
    cl = detected.cluster
    assert (cl.gpu_per_node, cl.node_num) == (4, 1)
    assert (cl.explorer_gpu_num, cl.auxiliary_gpu_num, cl.trainer_gpu_num) == (1, 1, 2)
    assert line is not None and line.startswith("cluster.gpu_per_node detected from Ray: 4 GPUs")
    assert detect_cluster_gpus(detected, [8]) == (detected, None)  # set: nothing to detect


def test_gpus_of_nodes_reads_alive_nodes_only():
    nodes = [{"Alive": True, "Resources": {"GPU": 8.0, "CPU": 64.0}},
             {"Alive": False, "Resources": {"GPU": 8.0}},
             {"Alive": True, "Resources": {"CPU": 8.0}}]
    assert gpus_of_nodes(nodes) == [8, 0]


@pytest.mark.parametrize(("assigned", "cuda", "refused"), [
    (["0"], False, True),  # a GPU from Ray, no CUDA: the silent CPU fallback
    (["0", "1"], False, True),
    ([], False, False),  # a CPU actor
    (["0"], True, False),  # a usable GPU
])
def test_no_silent_cpu_fallback(assigned, cuda, refused):
    # Ray's GPUs declared as labels only (RFT_RAY_GPUS_AS_LABELS=1, multi-node tests on CPU)
    refuse_cpu_fallback("trainer actor 'trainer'", assigned, cuda, gpus_as_labels=True)
    if not refused:
        refuse_cpu_fallback("trainer actor 'trainer'", assigned, cuda)
        return
    with pytest.raises(RftError) as failed:
        refuse_cpu_fallback("trainer actor 'trainer'", assigned, cuda)
    line = str(failed.value)
    assert "\n" not in line
    assert line.startswith(f"trainer actor 'trainer': Ray assigned GPU {', '.join(assigned)} "
                           "but torch.cuda.is_available() is False"), line
    assert "cluster.gpu_per_node: 0" in line


def test_a_both_run_on_declared_gpus_refuses_to_run_on_cpu(ray_with_gpus, tmp_path,
                                                           tiny_model_dir):
    """The whole decision in a real ``both`` run: gpu_per_node detected from Ray's 4 GPUs,
    the explorer actor gets one, finds no usable CUDA on this machine and the run ends in
    one line naming it (before: the actors asked for no GPU and ran on CPU)."""
    from rft.launcher import run

    config = apply_overrides(tiny_run_config(tiny_model_dir, write_taskset(tmp_path / "t.jsonl"),
                                             tmp_path), {
        "mode": "both", "cluster": {"gpu_per_node": None, "node_num": None}})
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    with pytest.raises(RftError) as failed:
        run(load_config(path))
    line = str(failed.value)
    assert "\n" not in line, line
    assert "explorer actor 'explorer': Ray assigned GPU " in line, line
    assert "but torch.cuda.is_available() is False" in line, line
