# The two README commands: `make quickstart` (install + main job) and `make test`
# (install + whole test suite). Both create/refresh the repo-local .venv first.
.PHONY: setup setup-test quickstart test

setup:
	scripts/setup.sh

setup-test:
	scripts/setup.sh --test

quickstart: setup
	.venv/bin/rft run examples/quickstart.yaml

test: setup-test
	OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q -p no:cacheprovider
