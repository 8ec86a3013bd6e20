"""rft.config.verl_keys.reconcile on its own: veRL keys mirroring rft fields (Trinity-RFT's
synchronize_config directions), on schema objects (fast; the whole-file case with both
trainer types is plugins/trainers/verl/tests/test_verl_mirrored_keys.py)."""

from __future__ import annotations

from typing import Any

from rft.config.schema import RftConfig, TrainerConfig
from rft.config.verl_keys import reconcile

A = "actor_rollout_ref.actor."
K = "trainer.trainer_config."


def run(tree: dict, *, from_file: bool, **trainer: Any) -> tuple[RftConfig, list, list]:
    c = RftConfig(trainer=TrainerConfig(**trainer, trainer_config=tree))
    warnings: list[str] = []
    problems: list[str] = []
    reconciled = reconcile(c, warnings, problems, from_file=from_file)
    return reconciled, warnings, problems


def test_a_set_field_wins_an_unset_one_reads_veRL_s_value() -> None:
    tree = {"actor_rollout_ref": {"actor": {"grad_clip": 0.5, "ulysses_sequence_parallel_size": 2,
                                            "ppo_epochs": 2}}}
    c, warnings, problems = run(tree, from_file=False, grad_clip=1.0)
    assert problems == []
    assert warnings == [
        f"{K}{A}grad_clip 0.5 is overridden by trainer.grad_clip 1.0",
        (f"{K}{A}ulysses_sequence_parallel_size 2 is read into trainer."
        "ulysses_sequence_parallel_size (unset; Trinity-RFT keeps veRL's value there)")]
    assert (c.trainer.grad_clip, c.trainer.ulysses_sequence_parallel_size) == (1.0, 2)
    assert c.trainer.trainer_config == {"actor_rollout_ref": {"actor": {"ppo_epochs": 2}}}
    assert tree[  # the caller's mapping is left as it was
        "actor_rollout_ref"]["actor"]["grad_clip"] == 0.5


def test_unset_grad_clip_is_read_and_equal_values_are_quiet() -> None:
    tree = {"actor_rollout_ref": {"actor": {"grad_clip": 0.3, "use_dynamic_bsz": True,
                                            "optim": {"lr": 1e-6}}}}
    c, warnings, problems = run(tree, from_file=False)
    assert problems == []
    assert warnings == [(f"{K}{A}grad_clip 0.3 is read into trainer.grad_clip (unset; "
                        "Trinity-RFT keeps veRL's value there)")]
    assert c.trainer.grad_clip == 0.3 and c.trainer.trainer_config is None


def test_a_value_of_the_wrong_type_is_one_problem() -> None:
    _, warnings, problems = run({"actor_rollout_ref": {"actor": {"use_dynamic_bsz": "no"}}},
                                from_file=False)
    assert warnings == []
    assert problems == [(f"{K}{A}use_dynamic_bsz: cannot be read into trainer.use_dynamic_bsz: "
                        "'no' is not of its type")]


def test_rft_owned_sections_are_one_warning_each_from_a_file_only() -> None:
    tree = {"trainer": {"critic_warmup": 2, "save_freq": 5, "nnodes": 1},
            "actor_rollout_ref": {"rollout": {"gpu_memory_utilization": 0.4,
                                              "log_prob_micro_batch_size_per_gpu": 2}}}
    c, warnings, problems = run(tree, from_file=False)
    assert (warnings, problems) == ([], [])  # inline: left for the trainer's own check
    assert c.trainer.trainer_config == tree
    c, warnings, problems = run(tree, from_file=True)
    assert problems == []
    assert warnings == [
        (f"{K}trainer: save_freq, nnodes (from trainer.trainer_config_path) not used; rft's "
        "fields decide them: rft's project, name, cluster, trainer and explorer fields"),
        (f"{K}actor_rollout_ref.rollout: gpu_memory_utilization (from trainer.trainer_config_"
        "path) not used; rft's fields decide them: the rollout is rft's explorer "
        "(explorer.rollout_model, model fields)")]
    assert c.trainer.trainer_config == {
        "trainer": {"critic_warmup": 2},
        "actor_rollout_ref": {"rollout": {"log_prob_micro_batch_size_per_gpu": 2}}}
