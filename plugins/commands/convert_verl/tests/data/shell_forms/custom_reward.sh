# GRPO with a custom reward function file.
set -x
reward_file=$HOME/rewards/my_reward.py
python3 -m verl.trainer.main_ppo \
    algorithm.adv_estimator=grpo \
    data.train_files=$HOME/data/countdown/train.parquet \
    data.val_files=$HOME/data/countdown/test.parquet \
    actor_rollout_ref.model.path=Qwen/Qwen2.5-3B \
    actor_rollout_ref.rollout.name=vllm \
    actor_rollout_ref.rollout.n=4 \
    custom_reward_function.path=$reward_file \
    custom_reward_function.name=compute_score \
    +custom_reward_function.reward_kwargs.format_score=0.1 \
    trainer.n_gpus_per_node=2
