"""``explorer.auxiliary_models[i].engine_num``: its GPUs are reserved in the cluster split;
in the one-process modes (colocate, bench) more than one engine is refused by name."""

from __future__ import annotations

import pytest
from rft.config import build_stages
from rft.errors import ConfigError
from test_config import base, registry  # noqa: F401  (fixtures)


def test_auxiliary_engines_reserve_tp_times_engine_num_gpus(base, registry):  # noqa: F811
    # 8 GPUs: rollout 2 engines × TP 2 = 4, judge 2 engines × TP 1 = 2, trainer the rest
    base["explorer"]["auxiliary_models"] = [{"name": "judge", "model_path": "judge",
                                             "engine_num": 2, "tensor_parallel_size": 1}]
    stage = build_stages(base, registry)
    cluster = stage.stages[0].config.cluster
    assert (cluster.explorer_gpu_num, cluster.auxiliary_gpu_num,
            cluster.trainer_gpu_num) == (4, 2, 2)
    assert any(w.startswith("explorer.auxiliary_models[0].engine_num: an auxiliary model "
                            "runs one engine") for w in stage.warnings), stage.warnings
    base["explorer"]["auxiliary_models"][0].update(engine_num=2, tensor_parallel_size=2)
    with pytest.raises(ConfigError, match="no GPU left for the trainer: cluster has 8, "
                                          "explorer uses 4, auxiliary models 4"):
        build_stages(base, registry)


@pytest.mark.parametrize("mode", ["colocate", "bench"])
def test_one_process_modes_refuse_several_auxiliary_engines(base, registry,  # noqa: F811
                                                            mode):
    base["mode"] = mode
    base["cluster"] = {"node_num": 1, "gpu_per_node": 0}
    base["explorer"]["rollout_model"].update(engine_num=1, tensor_parallel_size=1)
    base["synchronizer"]["sync_method"] = "checkpoint" if mode == "bench" else "memory"
    base["explorer"]["auxiliary_models"] = [{"name": "judge", "model_path": "judge",
                                             "engine_type": "hf", "engine_num": 3}]
    with pytest.raises(ConfigError) as caught:
        build_stages(base, registry)
    assert (f"explorer.auxiliary_models[0].engine_num: mode {mode!r} runs an auxiliary model "
            "as one engine in its process, got 3: use 1") in caught.value.problems
