set -euo pipefail
# reads a site configuration file that does not exist where the converter runs it
source_cfg=$(cat $HOME/.config/verl/site.env)
python3 -m verl.trainer.main_ppo trainer.project_name=$source_cfg
