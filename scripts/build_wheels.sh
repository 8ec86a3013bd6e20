#!/usr/bin/env bash
# Build a wheel of the core distribution (rft-framework, from the root pyproject.toml) and of
# every plugin distribution under plugins/ (each folder with a pyproject.toml) into OUTDIR
# (default: dist/), with `python -m build --wheel --no-isolation`: the venv's setuptools,
# nothing downloaded (`build` comes with the `test` extra).
#
#   scripts/build_wheels.sh [OUTDIR]        PYTHON=... to use another interpreter
#
# Each project is built from a clean copy in a temporary folder (no tests, no *.egg-info,
# no build/, no __pycache__), so nothing left over in the working tree or from an earlier
# build can end up in a wheel, and the working tree is left as it was.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-.venv/bin/python}
OUT=$(realpath -m "${1:-dist}")
mkdir -p "$OUT"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# copy SRC DEST PATHS...: PATHS of SRC into DEST, without build outputs, caches and tests.
copy() {
  local src=$1 dest=$2
  shift 2
  mkdir -p "$dest"
  tar -C "$src" -cf - --exclude='__pycache__' --exclude='*.pyc' --exclude='*.egg-info' \
      --exclude='./build' --exclude='./dist' --exclude='./tests' "$@" | tar -C "$dest" -xf -
}

build() {
  "$PYTHON" -m build --wheel --no-isolation --quiet --outdir "$OUT" "$1" >"$1.log" 2>&1 || {
    cat "$1.log" >&2
    echo "build_wheels.sh: building $2 failed" >&2
    exit 1
  }
}

copy . "$WORK/core" pyproject.toml README.md core
build "$WORK/core" "the core (pyproject.toml)"

while IFS= read -r project; do
  dir=$(dirname "$project")
  copy "$dir" "$WORK/$dir" .
  build "$WORK/$dir" "$dir"
done < <(find plugins -name pyproject.toml -not -path '*/tests/*' | sort)

ls -1 "$OUT"/*.whl
