"""``model.rope_scaling`` / ``model.rope_theta``: the trainer and the ``hf`` engine load
the checkpoint with the same RoPE overrides (rft.rope), so their log-probs agree."""

from __future__ import annotations

from pathlib import Path

import torch
from rft.config import schema
from rft.engines.engine_factory import build_engine
from rft.engines.hf_engine import HFEngine
from rft.rope import rope_overrides
from rft.testing.config_edit import replaced
from rft.trainer.models import load_causal_lm, load_value_model

SEQUENCE = [3, 17, 42, 8, 99, 5, 23, 61, 7, 11, 4, 30]
PROMPT_LEN = 4


def _trainer_logprobs(model: torch.nn.Module) -> torch.Tensor:
    """log π(y_t | y_<t) of the response tokens, from the model's logits."""
    ids = torch.tensor([SEQUENCE])  # (1, L)
    with torch.no_grad():
        logits = model(input_ids=ids).logits  # (1, L, V)
    log_probs = torch.log_softmax(logits[0, :-1].float(), dim=-1)  # (L-1, V)
    picked = log_probs.gather(-1, ids[0, 1:, None])[:, 0]  # (L-1,)
    return picked[PROMPT_LEN - 1:]


def test_rope_theta_changes_the_trainer_model_and_the_engine_agrees(rft_tiny_model: Path):
    path = str(rft_tiny_model)
    plain = _trainer_logprobs(load_causal_lm(path))
    changed = _trainer_logprobs(load_causal_lm(path, rope_theta=50.0))
    assert not torch.allclose(plain, changed, atol=1e-3)
    engine = HFEngine(path, rope_theta=50.0, max_model_len=64, seed=0)
    scored = engine.compute_logprobs([SEQUENCE], [PROMPT_LEN])[0]
    torch.testing.assert_close(scored.float(), changed, atol=1e-5, rtol=1e-5)


def test_rope_scaling_changes_log_probs_and_engine_agrees(rft_tiny_model: Path):
    path = str(rft_tiny_model)
    scaling = {"rope_type": "linear", "factor": 4.0}
    plain = _trainer_logprobs(load_causal_lm(path))
    scaled_model = load_causal_lm(path, rope_scaling=scaling)
    scaled = _trainer_logprobs(scaled_model)
    assert not torch.allclose(plain, scaled, atol=1e-3)
    params = scaled_model.config.rope_parameters
    assert params["rope_type"] == "linear" and params["factor"] == 4.0
    assert params["rope_theta"] == 10000.0  # the checkpoint's theta is kept
    engine = HFEngine(path, rope_scaling={"type": "linear", "factor": 4.0}, seed=0)
    torch.testing.assert_close(
        engine.compute_logprobs([SEQUENCE], [PROMPT_LEN])[0].float(), scaled,
        atol=1e-5, rtol=1e-5)


def test_engine_factory_passes_the_config_fields(rft_tiny_model: Path):
    config = replaced(schema.RftConfig(), {"model.model_path": str(rft_tiny_model),
                                           "model.rope_theta": 50.0,
                                           "explorer.rollout_model.dtype": "float32"})
    engine = build_engine(config, HFEngine)
    assert engine.model.config.rope_parameters["rope_theta"] == 50.0
    value_model = load_value_model(str(rft_tiny_model), rope_theta=50.0)
    assert value_model.config.rope_parameters["rope_theta"] == 50.0


def test_no_override_is_no_change():
    class Config:
        def __init__(self) -> None:
            self.rope_parameters = {"rope_type": "default", "rope_theta": 1e4}

    assert rope_overrides(Config(), None, None) == {}
    assert rope_overrides(Config(), {"type": "dynamic", "factor": 2.0}, 5e5) == {
        "rope_parameters": {"rope_type": "dynamic", "rope_theta": 5e5, "factor": 2.0}}
