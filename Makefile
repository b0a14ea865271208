# Two entry points: `make train` (the main job on the embedded default) and `make test`.
# Both create the virtual environment when it is missing and (re)install the package when the
# dependency list or the checkout's location changed. VENV can live outside the clone, so that
# repeated CI runs share one ~6 GB environment:  make test VENV=~/.cache/vitbert/venv
#
# Each installs what it needs and no more: `make train` the package and its dependencies (all
# that training, prediction and the scripts import), `make test` and `make lint` the `dev` extras
# as well (pytest, ruff, the demo's Gradio and Playwright, scikit-image's photos; pyproject.toml).
# A full install serves training too: after `make test`, `make train` installs nothing.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# A stamp names what the environment was installed from: pyproject.toml and this checkout, and
# for a training-only install "-train". The full install keeps the name it always had, so an
# environment installed before the two kinds existed is not installed again.
KEY := $(shell { cat pyproject.toml; echo $(CURDIR); } | sha256sum | cut -c1-16)
STAMP_FULL := $(VENV)/.installed-$(KEY)
STAMP_TRAIN := $(VENV)/.installed-$(KEY)-train
# Training is served by whichever is current: the full install when it is there.
TRAIN_STAMP := $(if $(wildcard $(STAMP_FULL)),$(STAMP_FULL),$(STAMP_TRAIN))
TRAIN_ARGS ?=
TEST_ARGS ?=
# `make tower`: the image tower pretrained on generated fractals (vitbert.pretraining), written
# where the config's model.export_to says; built once, again only when the config changes.
TOWER_CONFIG ?= configs/tower/fractal_small.yaml
TOWER_WEIGHTS := $(shell sed -n 's/^ *export_to: *//p' $(TOWER_CONFIG))

.PHONY: install install-train train tower test lint clean

install: $(STAMP_FULL)

install-train: $(TRAIN_STAMP)

$(STAMP_FULL): REQUIREMENT := .[dev]
$(STAMP_TRAIN): REQUIREMENT := .
$(STAMP_FULL) $(STAMP_TRAIN):
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e "$(REQUIREMENT)"
	rm -f $(VENV)/.installed-*
	touch $@

train: install-train
	$(BIN)/python scripts/train.py fit $(TRAIN_ARGS)

tower: $(TOWER_WEIGHTS)

$(TOWER_WEIGHTS): $(TOWER_CONFIG) | install-train
	$(BIN)/python scripts/pretrain_tower.py fit --config $(TOWER_CONFIG)

test: install
	HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
		$(BIN)/python -m pytest $(TEST_ARGS)

lint: install
	$(BIN)/ruff check .

clean:
	rm -rf .pytest_cache .ruff_cache lightning_logs
