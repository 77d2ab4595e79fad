# Two entry points, each doing its own set-up and safe to run again:
#   make demo   sets up, exports ResNet-18 (random weights), tunes its conv kernels for this
#               machine (BUDGET, default 3m) while compiling, runs it, and prints Woodpecker vs
#               ONNX Runtime vs OpenVINO vs PyTorch
#   make test   sets up and runs the whole test suite (lint included)
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml constraints.txt | sha1sum | cut -c1-12)
RUNS   ?= 30
BUDGET ?= 3m

.PHONY: setup demo test core-install bench clean

$(STAMP): pyproject.toml constraints.txt
	@command -v cc >/dev/null && command -v chromium >/dev/null || \
		(apt-get update -qq && apt-get install -y -qq gcc chromium)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[engines,zoo,bench,plot,tune,ray,test]'
	@rm -f $(VENV)/.installed-* && touch $@

setup: $(STAMP)

demo: $(STAMP)
	@mkdir -p build
	$(BIN)/woodpecker zoo export resnet18 -o build/resnet18.onnx
	$(BIN)/woodpecker compile build/resnet18.onnx -o build/resnet18.wpk --tune --budget $(BUDGET) \
		--tuning-log build/tuning.jsonl --resume
	$(BIN)/python -c "import numpy as np; np.save('build/input.npy', np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32))"
	$(BIN)/woodpecker run build/resnet18.wpk --input input=build/input.npy --output-dir build/out
	$(BIN)/woodpecker bench build/resnet18.wpk --runs $(RUNS) --json build/demo_bench.json

test: $(STAMP) core-install
	$(BIN)/ruff check woodpecker tests benchmarks
	$(BIN)/lint-imports
	$(BIN)/python -m pytest

# The core install alone (no torch, no extras) in a fresh venv: compile a model, tune its
# kernels briefly, run it and check it against ONNX Runtime (tests/core_install_check.py).
core-install:
	rm -rf build/core-venv
	$(PYTHON) -m venv build/core-venv
	build/core-venv/bin/python -m pip install --quiet -c constraints.txt .
	cd build && core-venv/bin/python ../tests/core_install_check.py

bench: $(STAMP)
	$(BIN)/python benchmarks/zoo_e2e.py --runs $(RUNS)

clean:
	rm -rf build .pytest_cache
