#!/usr/bin/env bash
# .venv-bench: the project venv plus TRL, for bench/grpo_vs_trl.py.
#
# TRL is not installed into .venv itself: veRL 0.9.1 (the verl trainer plugin) cannot
# build models while trl >= 1.13 is installed (it imports a class trl removed). This venv
# sees everything in .venv (a site .pth file) and adds requirements/bench.txt on top:
#
#     scripts/bench_venv.sh
#     .venv-bench/bin/python bench/grpo_vs_trl.py --grid
set -euo pipefail
cd "$(dirname "$0")/.."
test -x .venv/bin/python || { echo "bench_venv: run the README set-up first (.venv missing)" >&2; exit 1; }
.venv/bin/python -m venv --clear .venv-bench
project_site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
bench_site=$(.venv-bench/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "import site; site.addsitedir('$project_site')" > "$bench_site/zz_project_venv.pth"
.venv-bench/bin/python -m pip install -q --no-deps -r requirements/bench.txt
.venv-bench/bin/python -c "import trl, rft; print('bench venv: trl', trl.__version__)"
