"""``sync_method: nccl`` with vLLM's workers in processes of their own (the GPU default):
each worker joins the trainer's broadcast group as a rank of its own and receives the
weights where they are loaded — here with ``tensor_parallel_size: 2`` on this CPU (gloo
instead of NCCL, two worker processes, each loading its shard of the broadcast).

vLLM caches its environment once an engine starts in a process, so the scenario runs in a
fresh interpreter (this file as a script) and reports back as JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

REPORT = "RESULT "


def _pid_and_rank(worker) -> list[int]:
    return [os.getpid(), int(worker.rank)]


def scenario(workdir: Path) -> dict:
    """Rank 0 here, the engine's two workers as ranks 1 and 2: two broadcasts, each checked
    against the Hugging Face model holding the same weights."""
    import torch

    from rft.distributed.weight_broadcast import (Broadcast, BroadcastGroup, EngineEnd,
                                                  host_rendezvous, spec_of)
    from rft.engines.hf_engine import HFEngine
    from rft.engines.vllm_engine import VLLMEngine
    from rft.testing.tiny_model import build_tiny_model

    torch.manual_seed(0)
    model_dir = build_tiny_model(workdir / "tiny", seed=0, hidden_size=64, num_heads=2,
                                 num_kv_heads=2)
    engine = VLLMEngine(str(model_dir), dtype="float32", seed=0, tensor_parallel_size=2,
                        max_model_len=256,
                        llm_kwargs={"kv_cache_memory_bytes": 64 << 20,
                                    "distributed_executor_backend": "mp"})
    hf = HFEngine(str(model_dir), dtype="float32")
    end = EngineEnd(engine)
    report: dict = {"test_pid": os.getpid(), "workers": engine.llm.collective_rpc(_pid_and_rank),
                    "ranks": end.weight_group_ranks(), "diffs": [], "moved": []}
    store, address = host_rendezvous(1 + report["ranks"], torch.device("cpu"), timeout_s=120)
    joining = threading.Thread(target=end.join_weight_group, args=(address, 1))
    joining.start()
    sender = BroadcastGroup(address, 0, store=store)
    joining.join()

    sequence, prompt_length = [list(range(3, 60))], 12
    before = engine.compute_logprobs(sequence, [prompt_length])[0]
    generator = torch.Generator().manual_seed(1)
    base = [(k, v.detach().clone()) for k, v in hf.model.state_dict().items()
            if k != "lm_head.weight"]
    for version in (1, 2):
        new = [(name, t + 0.05 * version * torch.randn(t.shape, generator=generator))
               for name, t in base]
        hf.update_weights(new, version=version)
        receiving = threading.Thread(target=end.receive_broadcast,
                                     args=(Broadcast(spec_of(new)), version))
        receiving.start()
        sender.send([t for _, t in new])
        receiving.join()
        got = engine.compute_logprobs(sequence, [prompt_length])[0]
        want = hf.compute_logprobs(sequence, [prompt_length])[0]
        report["diffs"].append(float((got - want).abs().max()))
        report["moved"].append(float((got - before).abs().max()))
        report["version"] = engine.model_version
    end.close()
    sender.close()
    engine.close()
    return report


@pytest.mark.slow
def test_each_tensor_parallel_worker_is_a_rank_and_loads_the_broadcast(tmp_path: Path) -> None:
    cpus = sorted(os.sched_getaffinity(0))  # one core per worker (one NUMA node here)
    env = dict(os.environ, OMP_NUM_THREADS="1", VLLM_ENABLE_V1_MULTIPROCESSING="1",
               VLLM_CPU_OMP_THREADS_BIND=f"{cpus[0]}|{cpus[-1]}")
    done = subprocess.run([sys.executable, __file__, str(tmp_path)], env=env, text=True,
                          capture_output=True, timeout=600)
    lines = [line for line in done.stdout.splitlines() if line.startswith(REPORT)]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    report = json.loads(lines[-1][len(REPORT):])
    pids = {pid for pid, _ in report["workers"]}
    assert sorted(rank for _, rank in report["workers"]) == [0, 1]
    assert len(pids) == 2 and report["test_pid"] not in pids  # two processes of their own
    assert report["ranks"] == 2
    assert report["version"] == 2
    assert all(diff <= 1e-4 for diff in report["diffs"]), report["diffs"]
    assert all(moved > 1e-2 for moved in report["moved"]), report["moved"]


if __name__ == "__main__":
    print(REPORT + json.dumps(scenario(Path(sys.argv[1]))), flush=True)
