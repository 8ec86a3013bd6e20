#!/usr/bin/env bash
# GRPO on GSM8K; paths from $(pwd) and the script's own directory, run name stamped
# with $(date). (Written for the converter's tests in the style of veRL's examples/.)
set -x
ulimit -n 65535

PROJECT_DIR="$(pwd)"
SCRIPT_DIR=$(cd $(dirname ${BASH_SOURCE[0]}) && pwd)
TIMESTAMP=$(date +%Y%m%d)
gsm8k_train_path=$HOME/data/gsm8k/train.parquet
gsm8k_test_path=$HOME/data/gsm8k/test.parquet

python3 -m verl.trainer.main_ppo \
    algorithm.adv_estimator=grpo \
    data.train_files=$gsm8k_train_path \
    data.val_files=$gsm8k_test_path \
    data.train_batch_size=256 \
    data.max_prompt_length=1024 \
    data.max_response_length=1024 \
    data.filter_overlong_prompts=True \
    actor_rollout_ref.model.path=Qwen/Qwen2.5-3B-Instruct \
    actor_rollout_ref.actor.optim.lr=1e-6 \
    actor_rollout_ref.actor.ppo_mini_batch_size=64 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16 \
    actor_rollout_ref.actor.use_kl_loss=True \
    actor_rollout_ref.actor.kl_loss_coef=0.001 \
    actor_rollout_ref.actor.kl_loss_type=low_var_kl \
    actor_rollout_ref.rollout.name=vllm \
    actor_rollout_ref.rollout.n=5 \
    actor_rollout_ref.rollout.tensor_model_parallel_size=2 \
    actor_rollout_ref.rollout.gpu_memory_utilization=0.6 \
    algorithm.use_kl_in_reward=False \
    trainer.logger='["console","tensorboard"]' \
    trainer.project_name='gsm8k_grpo' \
    trainer.experiment_name="qwen2.5-3b_${TIMESTAMP}" \
    trainer.default_local_dir=$PROJECT_DIR/checkpoints \
    trainer.rollout_data_dir=$SCRIPT_DIR/rollouts \
    trainer.n_gpus_per_node=8 \
    trainer.nnodes=1 \
    trainer.save_freq=20 \
    trainer.test_freq=5 \
    trainer.total_epochs=15 $@
