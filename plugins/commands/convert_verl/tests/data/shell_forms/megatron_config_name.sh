# GRPO with veRL's Megatron config (--config-name) and Megatron parallelism settings.
set -x
export CUDA_DEVICE_MAX_CONNECTIONS=1
gen_tp=2
train_tp=2
train_pp=2

python3 -m verl.trainer.main_ppo --config-path=config \
    --config-name='ppo_megatron_trainer.yaml' \
    algorithm.adv_estimator=grpo \
    data.train_files=$HOME/data/gsm8k/train.parquet \
    data.val_files=$HOME/data/gsm8k/test.parquet \
    data.train_batch_size=1024 \
    data.max_prompt_length=1024 \
    data.max_response_length=1024 \
    actor_rollout_ref.model.path=Qwen/Qwen2-7B-Instruct \
    actor_rollout_ref.actor.ppo_mini_batch_size=256 \
    actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=$train_pp \
    actor_rollout_ref.actor.megatron.tensor_model_parallel_size=$train_tp \
    actor_rollout_ref.actor.use_kl_loss=True \
    actor_rollout_ref.rollout.tensor_model_parallel_size=$gen_tp \
    actor_rollout_ref.rollout.name=vllm \
    actor_rollout_ref.rollout.n=5 \
    actor_rollout_ref.ref.megatron.pipeline_model_parallel_size=$train_pp \
    trainer.logger='["console","wandb"]' \
    trainer.n_gpus_per_node=8 \
    trainer.nnodes=1 \
    trainer.total_epochs=15 $@
