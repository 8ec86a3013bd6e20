# Installs, downloads, then launches on every GPU nvidia-smi lists.
set -x
pip install -e . --no-deps
huggingface-cli download Qwen/Qwen2.5-1.5B-Instruct --local-dir $HOME/models/qwen
NGPUS=$(nvidia-smi --query-gpu=name --format=csv,noheader | wc -l)
python3 -m verl.trainer.main_ppo \
    algorithm.adv_estimator=reinforce_plus_plus \
    algorithm.gamma=0.99 \
    data.train_files=$HOME/data/gsm8k/train.parquet \
    data.val_files=$HOME/data/gsm8k/test.parquet \
    actor_rollout_ref.model.path=$HOME/models/qwen \
    actor_rollout_ref.rollout.name=vllm \
    trainer.n_gpus_per_node=$NGPUS
