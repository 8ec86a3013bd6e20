# PPO on GSM8K; ${VAR:+...} adds a logger and offload flags only when a variable is set.
set -x
ENABLE_WANDB=${ENABLE_WANDB:-1}
LOGGER="[\"console\"${ENABLE_WANDB:+,\"wandb\"}]"
OFFLOAD_ARGS=${OFFLOAD:+actor_rollout_ref.actor.fsdp_config.param_offload=True}
EXTRA=${EXTRA_ARGS:-}

python3 -m verl.trainer.main_ppo \
    algorithm.adv_estimator=gae \
    data.train_files=$HOME/data/gsm8k/train.parquet \
    data.val_files=$HOME/data/gsm8k/test.parquet \
    data.train_batch_size=512 \
    actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct \
    actor_rollout_ref.actor.ppo_mini_batch_size=128 \
    actor_rollout_ref.rollout.name=vllm \
    critic.model.path=Qwen/Qwen2.5-0.5B-Instruct \
    critic.optim.lr=1e-5 \
    trainer.logger="$LOGGER" \
    trainer.n_gpus_per_node=2 \
    trainer.total_epochs=5 $OFFLOAD_ARGS $EXTRA
