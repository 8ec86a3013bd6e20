"""Which ``trainer.trainer_config`` key paths reach veRL, and which rft fields replace the
others (the veRL alignment guide's tables).

``trainer.trainer_config`` is veRL's own tree (``actor_rollout_ref``, ``critic``,
``trainer``, …). With ``trainer_type: verl`` every key path set there is one of:

- a key of veRL 0.9.1's config (``verl/trainer/config/_generated_ppo_trainer.yaml``, or
  a field of the dataclass its ``_target_`` names): it is passed to veRL as it is —
  unless a rule below claims it;
- mirrored by an rft field as Trinity-RFT mirrors it (:data:`rft.config.verl_keys.
  MIRRORED`): reconciled by the core's validation before this plugin sees the tree (equal:
  quiet; different: a warning, rft's field wins or, where Trinity-RFT keeps veRL's value,
  it is read into rft's unset field), so it never reaches here; likewise the sections rft
  owns, when they come from ``trainer.trainer_config_path`` (one warning per section);
- claimed by rft otherwise (:data:`RFT_FIELDS`, :data:`RFT_SECTIONS`): the value comes
  from an rft field (the alignment guide's mapping; the loss terms from rft's loss
  plugins), and setting it here is a validation error naming that field;
- a legacy spelling the alignment guide uses (:data:`ALIASES`): moved to veRL 0.9.1's path;
- ``torch.*``: the native trainer's options, ignored here with a warning (one YAML may
  serve both backends);
- anything else: a validation error naming the key (with the closest veRL keys).
"""

from __future__ import annotations

from rft.config.verl_keys import HONOURED_DRIVER_KEYS, LOG_PROB_KEYS

A = "actor_rollout_ref.actor."
"""Prefix of veRL's actor keys."""

_LOSS = "@loss:{}"
"""Marks a key of the actor loss (:func:`owner` words its message)."""

RFT_FIELDS: dict[str, str] = {
    "actor_rollout_ref.model.path": "model.model_path",
    "actor_rollout_ref.model.trust_remote_code": "model.trust_remote_code",
    "critic.model.path": "model.critic_model_path",
    "critic.model.trust_remote_code": "model.trust_remote_code",
    "actor_rollout_ref.model.lora_rank": "model.lora_configs[0].lora_rank",
    "actor_rollout_ref.model.lora_alpha": "model.lora_configs[0].lora_alpha",
    "actor_rollout_ref.model.target_modules": "model.lora_configs[0].target_modules",
    "actor_rollout_ref.model.exclude_modules": "model.lora_configs[0].exclude_modules",
    "actor_rollout_ref.model.lora_adapter_path": "model.lora_configs[0].path",
    "actor_rollout_ref.model.target_parameters": (
        "model.lora_configs[0].target_modules (rft's adapter adapts modules; LoRA on bare "
        "parameters is not wired)"),
    "actor_rollout_ref.model.lora": ("model.lora_configs (veRL's Megatron LoRA block; the "
                                     "adapter is synced by rft, never merged by veRL)"),
    "actor_rollout_ref.rollout.n": "algorithm.repeat_times",
    "actor_rollout_ref.rollout.temperature": "model.temperature",
    A + "optim": "algorithm.optimizer",
    A + "strategy": "trainer.trainer_strategy",
    "actor_rollout_ref.ref.strategy": "trainer.trainer_strategy",
    "critic.strategy": "trainer.trainer_strategy",
    A + "use_dynamic_bsz": "trainer.use_dynamic_bsz",
    A + "ppo_max_token_len_per_gpu": "trainer.max_token_len_per_gpu",
    A + "ulysses_sequence_parallel_size": "trainer.ulysses_sequence_parallel_size",
    A + "fsdp_config.ulysses_sequence_parallel_size": "trainer.ulysses_sequence_parallel_size",
    "actor_rollout_ref.ref.ulysses_sequence_parallel_size":
        "trainer.ulysses_sequence_parallel_size",
    "critic.ulysses_sequence_parallel_size": "trainer.ulysses_sequence_parallel_size",
    A + "grad_clip": "trainer.grad_clip",
    A + "loss_agg_mode": "algorithm.loss_agg_mode",
    "critic.loss_agg_mode": "algorithm.loss_agg_mode",
    A + "loss_scale_factor": "model.max_response_tokens (the seq-mean-token-sum-norm divisor)",
    A + "policy_loss": _LOSS.format("algorithm.policy_loss_fn"),
    A + "clip_ratio": _LOSS.format("algorithm.policy_loss_fn_args.clip_range"),
    A + "clip_ratio_low": _LOSS.format("algorithm.policy_loss_fn_args.clip_range_low"),
    A + "clip_ratio_high": _LOSS.format("algorithm.policy_loss_fn_args.clip_range_high"),
    A + "clip_ratio_c": _LOSS.format("algorithm.policy_loss_fn_args.clip_ratio_c"),
    A + "tau_pos": _LOSS.format("algorithm.policy_loss_fn / policy_loss_fn_args"),
    A + "tau_neg": _LOSS.format("algorithm.policy_loss_fn / policy_loss_fn_args"),
    A + "use_kl_loss": _LOSS.format("algorithm.kl_loss_fn (none: no KL loss)"),
    A + "kl_loss_type": _LOSS.format("algorithm.kl_loss_fn"),
    A + "kl_loss_coef": _LOSS.format("algorithm.kl_loss_fn_args.kl_coef"),
    A + "entropy_coeff": _LOSS.format("algorithm.entropy_loss_fn_args.entropy_coef"),
    A + "calculate_entropy": _LOSS.format("algorithm.entropy_loss_fn (entropies are always "
                                          "computed, for actor/entropy_loss)"),
    "algorithm.adv_estimator": "algorithm.advantage_fn",
    "algorithm.gamma": "algorithm.advantage_fn_args.gamma",
    "algorithm.lam": "algorithm.advantage_fn_args.lam",
    "algorithm.use_kl_in_reward": "algorithm.kl_penalty_fn (none: no KL in the reward)",
    "algorithm.kl_penalty": "algorithm.kl_penalty_fn",
    "algorithm.kl_ctrl": "algorithm.kl_penalty_fn_args (kl_coef)",
    "algorithm.norm_adv_by_std_in_grpo": "algorithm.advantage_fn_args.norm_adv_by_std_in_grpo",
    "data.train_files": "buffer.explorer_input.taskset.path",
    "data.val_files": "buffer.explorer_input.eval_tasksets[i].path",
    "data.prompt_key": "buffer.explorer_input.taskset.format.prompt_key",
    "data.response_key": "buffer.explorer_input.taskset.format.response_key",
    "data.train_batch_size": "buffer.batch_size (× synchronizer.sync_interval)",
    "data.max_prompt_length": "model.max_prompt_tokens",
    "data.max_response_length": "model.max_response_tokens",
    "data.filter_overlong_prompts": "model.enable_prompt_truncation",
    "data.shuffle": "buffer.explorer_input.taskset.task_selector.selector_type",
    "trainer.logger": "monitor.monitor_type",
    "trainer.project_name": "project",
    "trainer.experiment_name": "name",
    "trainer.default_local_dir": "checkpoint_root_dir",
    "trainer.n_gpus_per_node": "cluster.gpu_per_node",
    "trainer.nnodes": "cluster.node_num",
    "trainer.save_freq": "trainer.save_interval",
    "trainer.test_freq": "explorer.eval_interval",
    "trainer.total_epochs": "buffer.total_epochs",
    "trainer.total_training_steps": "trainer.total_steps",
    "trainer.val_before_train": "explorer.eval_on_startup",
    "trainer.resume_mode": "continue_from_checkpoint",
    "trainer.max_actor_ckpt_to_keep": "trainer.max_checkpoints_to_keep",
    "trainer.max_critic_ckpt_to_keep": "trainer.max_checkpoints_to_keep",
}
"""veRL key path (or a prefix of key paths) → the rft field that sets it."""

# HONOURED_DRIVER_KEYS (``trainer.critic_warmup``: the actor is not updated during the
# first ``critic_warmup`` steps) and LOG_PROB_KEYS (the rollout keys that reach veRL) are
# shared with the core's reconciliation (rft.config.verl_keys)

RFT_SECTIONS: dict[str, str] = {
    "actor_rollout_ref.rollout.": (
        "the rollout is rft's explorer: set explorer.rollout_model / model fields (veRL "
        "alignment guide, 'Actor, Rollout, and Critic'); only actor_rollout_ref.rollout."
        + "/".join(LOG_PROB_KEYS) + " reach veRL"),
    "data.": "veRL's data section is rft's buffer.explorer_input (veRL alignment guide, 'Data')",
    "trainer.": ("veRL's driver (RayPPOTrainer) does not run under rft; only trainer."
                 "critic_warmup is honoured (the others map to rft fields, see the veRL "
                 "alignment guide, 'Trainer')"),
    "algorithm.": ("veRL's algorithm section is rft's algorithm section (veRL alignment "
                   "guide, 'Algorithm')"),
    "reward_model.": "reward models are explorer.auxiliary_models (veRL alignment guide)",
    "reward.": "rewards are computed by rft's workflows and reward functions",
    "custom_reward_function.": "rewards are computed by rft's reward functions "
                               "(buffer.explorer_input.taskset.default_reward_fn_type)",
    "sandbox_fusion.": "rewards are computed by rft's workflows and reward functions",
    "distillation.": "distillation is an rft algorithm (algorithm.algorithm_type)",
    "transfer_queue.": "rft's buffer moves the experiences",
    "global_profiler.": "not wired by the verl trainer",
    "ray_kwargs.": "Ray is started by rft (cluster section)",
    "skip.": "not used by the verl trainer",
    "actor_rollout_ref.hybrid_engine": "the rollout is rft's explorer",
}
"""Prefixes of veRL key paths that rft does not pass to veRL, and why."""

HYBRID_ENGINE = "actor_rollout_ref.hybrid_engine"
"""veRL's actor-is-the-rollout switch: ``true`` (what rft does: its explorer is the
rollout) is a warning that it has no effect; ``false`` is refused like the section."""

ALIASES: dict[str, str] = {
    "critic.model.fsdp_config.": "critic.fsdp.",
}
"""Key-path prefixes the veRL alignment guide (and Trinity-RFT configs) spell in veRL's
legacy layout → veRL 0.9.1's."""

NATIVE_ONLY = "torch"
"""``trainer_config.torch.*``: the native trainer's options."""


def owner(path: str) -> str | None:
    """Why ``path`` (a veRL key path) is not set in ``trainer_config``: the rft field that
    sets it, worded for the message; ``None`` when no rft field does."""
    for key, field_name in RFT_FIELDS.items():
        if path == key or path.startswith(key + "."):
            if field_name.startswith("@loss:"):
                return ("the verl trainer computes the actor loss with rft's loss functions "
                        f"(veRL's worker calls them): set {field_name[len('@loss:'):]} instead")
            return f"set by rft's {field_name}, not here (veRL alignment guide)"
    return None


def rft_section(path: str) -> str | None:
    """Why a key path under an rft-owned section does not reach veRL, or ``None``."""
    if path in HONOURED_DRIVER_KEYS:
        return None
    if path.startswith("actor_rollout_ref.rollout."):
        name = path[len("actor_rollout_ref.rollout."):]
        if name in LOG_PROB_KEYS:
            return None
    for prefix, reason in RFT_SECTIONS.items():
        if path.startswith(prefix) or path == prefix.rstrip("."):
            return reason
    return None


def alias(path: str) -> str:
    """``path`` in veRL 0.9.1's layout."""
    for old, new in ALIASES.items():
        if path.startswith(old):
            return new + path[len(old):]
    return path
