# Prepares the data; the training command is only printed.
python3 examples/data_preprocess/gsm8k.py --local_dir ~/data/gsm8k
echo "now run: python3 -m verl.trainer.main_ppo data.train_files=~/data/gsm8k/train.parquet"
