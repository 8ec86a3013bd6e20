# Waits for a Ray head node that never comes.
until ray status >/dev/null 2>&1 && false; do sleep 10; done
python3 -m verl.trainer.main_ppo trainer.nnodes=2
