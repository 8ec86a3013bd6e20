# GRPO on MATH; defaults that quote other variables (valid bash, wrong values before).
set -x
DATA_DIR=$HOME/data/math
TRAIN_FILE=${TRAIN_FILE:-"${DATA_DIR}/train.parquet"}
TEST_FILE=${TEST_FILE:-"${DATA_DIR}/test.parquet"}
OFFLOAD=True
PARAM_OFFLOAD=${PARAM_OFFLOAD:-"$OFFLOAD"}
OPTIM_OFFLOAD=${OPTIM_OFFLOAD:-$OFFLOAD}
MODEL=${MODEL:-"Qwen/Qwen2.5-Math-7B"}

python3 -m verl.trainer.main_ppo \
    algorithm.adv_estimator=grpo \
    data.train_files="$TRAIN_FILE" \
    data.val_files="$TEST_FILE" \
    actor_rollout_ref.model.path=$MODEL \
    actor_rollout_ref.actor.fsdp_config.param_offload=$PARAM_OFFLOAD \
    actor_rollout_ref.actor.fsdp_config.optimizer_offload=${OPTIM_OFFLOAD} \
    actor_rollout_ref.rollout.name=vllm \
    actor_rollout_ref.rollout.n=4 \
    trainer.n_gpus_per_node=4 \
    trainer.total_epochs=2
