"""A veRL YAML (``trainer.trainer_config_path``) repeating keys rft owns, validated with both
trainer types: keys equal to rft's fields pass quietly, keys differing from a field the user
set are overridden with a warning, keys differing from a field left at its default are read
into it where Trinity-RFT keeps veRL's value, and the sections rft owns get one warning
each (rft.config.verl_keys). Nothing here builds a worker (fast)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from rft.config import build_stages
from rft.plugins import PluginRegistry
from rft.testing.runs import apply_overrides
from rft_plugin_verl import environment
from rft_plugin_verl.config import build_verl_config

VERL_YAML = """\
actor_rollout_ref:
  hybrid_engine: true
  actor:
    grad_clip: 0.5                   # = trainer.grad_clip (set): quiet
    ppo_max_token_len_per_gpu: 64    # != trainer.max_token_len_per_gpu 96 (set): overridden
    ulysses_sequence_parallel_size: 1  # = default: quiet
    use_dynamic_bsz: false           # != default true: read into trainer.use_dynamic_bsz
    clip_ratio_high: 0.28            # loss argument unset: rft's default wins
    ppo_epochs: 1                    # a veRL key both trainers read
    optim:
      lr: 1.0e-5                     # != algorithm.optimizer.lr 2e-6 (set): overridden
      weight_decay: 0.1              # = algorithm.optimizer.weight_decay (set): quiet
      lr_warmup_steps_ratio: 0.1     # != default 0.0: read in
  rollout:
    n: 2                             # = algorithm.repeat_times: quiet
    temperature: 0.7                 # != model.temperature (default), overwritten by rft
    gpu_memory_utilization: 0.5      # rft's explorer: one warning for the section
    log_prob_micro_batch_size_per_gpu: 2  # reaches veRL
trainer:
  critic_warmup: 0
  total_epochs: 3
  save_freq: 10
data:
  max_prompt_length: 16
"""

K = "trainer.trainer_config."
FROM = "(from trainer.trainer_config_path) not used; rft's fields decide them: "
WARNINGS = [
    (f"{K}actor_rollout_ref.actor.ppo_max_token_len_per_gpu 64 is overridden by "
    "trainer.max_token_len_per_gpu 96"),
    (f"{K}actor_rollout_ref.actor.use_dynamic_bsz False is read into trainer.use_dynamic_bsz "
    "(unset; Trinity-RFT keeps veRL's value there)"),
    (f"{K}actor_rollout_ref.actor.clip_ratio_high 0.28 is overridden by "
    "algorithm.policy_loss_fn_args.clip_range_high unset (rft's default)"),
    f"{K}actor_rollout_ref.actor.optim.lr 1e-05 is overridden by algorithm.optimizer.lr 2e-06",
    (f"{K}actor_rollout_ref.actor.optim.lr_warmup_steps_ratio 0.1 is read into "
    "algorithm.optimizer.lr_warmup_steps_ratio (unset; Trinity-RFT keeps veRL's value there)"),
    (f"{K}actor_rollout_ref.rollout.temperature 0.7 is overridden by model.temperature 1.0 "
    "(rft's default)"),
    f"{K}actor_rollout_ref.hybrid_engine: hybrid_engine {FROM}the rollout is rft's explorer",
    (f"{K}actor_rollout_ref.rollout: gpu_memory_utilization {FROM}the rollout is rft's explorer "
    "(explorer.rollout_model, model fields)"),
    (f"{K}trainer: total_epochs, save_freq {FROM}rft's project, name, cluster, trainer and "
    "explorer fields"),
    f"{K}data: max_prompt_length {FROM}rft's buffer.explorer_input and model token limits",
]
"""What validation says about :data:`VERL_YAML` (either trainer type)."""


def config(model: Path, verl_file: Path, trainer_type: str) -> dict[str, Any]:
    base = {
        "mode": "train", "checkpoint_root_dir": "/tmp/rft-verl-mirrored-tests",
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 2,
                      "optimizer": {"lr": 2e-6, "weight_decay": 0.1}},
        "model": {"model_path": str(model), "max_prompt_tokens": 16, "max_response_tokens": 8},
        "cluster": {"node_num": 1, "gpu_per_node": 0},
        "buffer": {"batch_size": 4, "total_steps": 5, "trainer_input": {"experience_buffer": {
            "name": "exp", "storage_type": "sql", "path": "/tmp/rft-verl-mirrored.db"}}},
        "synchronizer": {"sync_method": "checkpoint"},
        "trainer": {"trainer_type": trainer_type, "grad_clip": 0.5, "max_token_len_per_gpu": 96,
                    "trainer_config_path": str(verl_file)},
        "monitor": {"monitor_type": "jsonl"},
    }
    return apply_overrides(base, {})


@pytest.fixture
def verl_file(tmp_path: Path) -> Path:
    path = tmp_path / "verl.yaml"
    path.write_text(VERL_YAML)
    return path


@pytest.mark.parametrize("trainer_type", ["verl", "torch"])
def test_mirrored_keys_are_reconciled_as_trinity_does(trainer_type: str, rft_tiny_model: Path,
                                                      verl_file: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(environment, "problems", list)  # whatever veRL is installed here
    loaded = build_stages(config(rft_tiny_model, verl_file, trainer_type),
                          PluginRegistry.create())
    stage = loaded.stages[0]
    said = [w for w in stage.warnings if w.startswith(K)]
    for line in WARNINGS:
        assert line in said
    rest = [w for w in said if w not in WARNINGS]
    if trainer_type == "torch":  # the keys that reach veRL only: the torch trainer's warning
        assert sorted(rest) == sorted(
            f"{K}{p}: not honoured by the torch trainer; it has no effect"
            for p in ("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
                      "trainer.critic_warmup"))
    else:
        assert rest == []
    c = stage.config
    assert c.trainer.use_dynamic_bsz is False  # read from the file
    assert c.algorithm.optimizer.lr_warmup_steps_ratio == 0.1  # read from the file
    assert (c.algorithm.optimizer.lr, c.trainer.max_token_len_per_gpu, c.trainer.grad_clip,
            c.model.temperature) == (2e-6, 96, 0.5, 1.0)  # rft's fields win
    assert c.trainer.trainer_config == {
        "actor_rollout_ref": {"actor": {"ppo_epochs": 1},
                              "rollout": {"log_prob_micro_batch_size_per_gpu": 2}},
        "trainer": {"critic_warmup": 0}}
    if trainer_type == "verl":
        got = build_verl_config(model=c.model, algorithm=c.algorithm, trainer=c.trainer,
                                train_batch_size=c.buffer.train_batch_size,
                                total_steps=c.trainer.total_steps, cpu=True)
        a = "actor_rollout_ref.actor."
        assert not got.problems
        assert (got.get(a + "use_dynamic_bsz"), got.get(a + "ppo_max_token_len_per_gpu"),
                got.get(a + "optim.lr"), got.get(a + "optim.lr_warmup_steps_ratio"),
                got.get(a + "grad_clip")) == (False, 96, 2e-6, 0.1, 0.5)
        assert got.get("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu") == 2
        assert got.get("actor_rollout_ref.rollout.temperature") == 1.0
