# A run name with an unbalanced quote inside an OmegaConf interpolation.
python3 -m verl.trainer.main_ppo \
    algorithm.adv_estimator=grpo \
    data.train_files=$HOME/data/gsm8k/train.parquet \
    data.val_files=$HOME/data/gsm8k/test.parquet \
    actor_rollout_ref.rollout.name=vllm \
    actor_rollout_ref.rollout.n=2 \
    trainer.experiment_name='run_${oc.env:USER,"me}' \
    trainer.n_gpus_per_node=1
