# Stops when the model is not downloaded yet.
MODEL=$HOME/models/Qwen2.5-7B-Instruct
if [ ! -d "$MODEL" ]; then
    echo "download $MODEL first" >&2
    exit 1
fi
python3 -m verl.trainer.main_ppo actor_rollout_ref.model.path=$MODEL
