# A function launches veRL once per seed.
set -e
run() {
    local seed=$1
    shift
    python3 -m verl.trainer.main_ppo \
        algorithm.adv_estimator=grpo \
        data.train_files=$HOME/data/gsm8k/train.parquet \
        data.val_files=$HOME/data/gsm8k/test.parquet \
        data.seed=$seed \
        actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct \
        actor_rollout_ref.rollout.name=vllm \
        actor_rollout_ref.rollout.n=4 \
        trainer.experiment_name=seed_$seed \
        trainer.n_gpus_per_node=1 "$@"
}
for seed in 1 2 3; do
    run $seed trainer.total_epochs=1
done
