# Two entry points: `make train` (the main job on the embedded default) and `make test`.
# Both create the virtual environment when it is missing and (re)install the package when the
# dependency list or the checkout's location changed. VENV can live outside the clone, so that
# repeated CI runs share one ~6 GB environment:  make test VENV=~/.cache/vitbert/venv
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The stamp names what the environment was installed from: pyproject.toml and this checkout.
STAMP := $(VENV)/.installed-$(shell { cat pyproject.toml; echo $(CURDIR); } | sha256sum | cut -c1-16)
TRAIN_ARGS ?=
TEST_ARGS ?=

.PHONY: install train test lint clean

install: $(STAMP)

$(STAMP):
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	rm -f $(VENV)/.installed-*
	touch $@

train: install
	$(BIN)/python scripts/train.py fit $(TRAIN_ARGS)

test: install
	HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
		$(BIN)/python -m pytest $(TEST_ARGS)

lint: install
	$(BIN)/ruff check .

clean:
	rm -rf .pytest_cache .ruff_cache lightning_logs
