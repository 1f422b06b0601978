# bendserver: install, test, lint. TORCH_SPEC pins torch (override: make install TORCH_SPEC=torch==2.5.1).
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
BIN := $(VENV)/bin

.PHONY: install run render test test-all lint format bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# The tests build nn~-style streaming models from cached-conv and nn-tilde: installed without
# their dependencies (nn-tilde pins torch==2.5), so that nothing replaces the pinned torch.
# nn-tilde 1.5 (what acids-rave 2.3 exports with) goes into a folder of its own beside it, on
# the path only of the test's subprocess that builds a file with it.
TEST_MODELS ?= cached-conv==2.5.0 nn-tilde==1.6.0
LEGACY_NN_TILDE ?= nn-tilde==1.5.6

# The ray extra too, so that the suite's Ray test runs (a local 2-CPU cluster, about 10 s: marked
# slow, make test-all runs it); without it that test is skipped (make install EXTRAS=test).
EXTRAS ?= test,ray

install: $(BIN)/python
	$(BIN)/pip install -q "$(TORCH_SPEC)"
	$(BIN)/pip install -q -e ".[$(EXTRAS)]" "$(TORCH_SPEC)"
	$(BIN)/pip install -q --no-deps $(TEST_MODELS)
	$(BIN)/pip install -q --no-deps --upgrade --target $(VENV)/nn-tilde-1.5 $(LEGACY_NN_TILDE)

# Plays the default model on its demo (looped) with its preset, on the default audio device
# (a real-time null backend without a sound card); prints the OSC port and a message to try.
run: $(BIN)/python
	@$(BIN)/python -c "import bendserver" 2>/dev/null || $(MAKE) install
	$(BIN)/bendserver serve -m drive -p drive --input models/drive/demo.flac

# Renders the default model's demo with its preset into out/.
render: $(BIN)/python
	@$(BIN)/python -c "import bendserver" 2>/dev/null || $(MAKE) install
	$(BIN)/bendserver render models/drive/demo.flac -m drive -p drive -o out/drive_demo.wav --force

# The tests, less those marked slow (soaks, a cluster's start, repeats a faster test covers).
test: $(BIN)/python
	@$(BIN)/python -c "import bendserver" 2>/dev/null || $(MAKE) install
	$(BIN)/python -m pytest

# Every test, the slow ones too.
test-all: $(BIN)/python
	@$(BIN)/python -c "import bendserver" 2>/dev/null || $(MAKE) install
	$(BIN)/python -m pytest -m ""

lint: $(BIN)/python
	$(BIN)/ruff check bendserver tests scripts
	$(BIN)/ruff format --check bendserver tests scripts

format: $(BIN)/python
	$(BIN)/ruff check --fix bendserver tests scripts
	$(BIN)/ruff format bendserver tests scripts

bench: $(BIN)/python
	$(BIN)/python scripts/bench_core.py
	$(BIN)/bendserver bench -m drive --block 256,2048

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache
