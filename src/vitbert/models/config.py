"""The model's configuration: plain dataclasses of plain values.

They are saved inside checkpoints (:meth:`VitBertConfig.to_dict`) and must load back with
``torch.load(weights_only=True)``, so they hold only numbers, strings, tuples and nested dicts,
never modules or tensors. LightningCLI reads them from YAML through their type hints. Every
field carries a docstring, which ``train.py fit --help`` prints next to the setting. The
configurations the project trains are the files in ``configs/`` (their ``model.net``), not
defaults here: the defaults are the plain model.

A part that only one data set can use is not a field here: a :class:`NetworkExtension`, named by
class path in ``extension``, builds the network that has it.
"""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from torch import nn


class ConfigError(ValueError):
    """Settings that cannot work together, told in one line with the fix (the command line
    prints it without a traceback)."""


@dataclass
class TowerConfig:
    """The encoder stack both towers share: width, depth, heads, MLP width, regularisation."""

    dim: int = 128
    """Width of the tower's tokens (image tokens are projected to the text width)."""
    depth: int = 2
    """Number of encoder blocks."""
    num_heads: int = 4
    """Attention heads per block; ``dim`` must divide by it."""
    mlp_ratio: float = 4.0
    """Feed-forward hidden width as a multiple of ``dim``."""
    drop_path: float = 0.0
    """Stochastic depth at the last block (rises linearly from 0 at the first)."""
    norm_eps: float = 1e-6
    """LayerNorm epsilon."""


@dataclass
class ImageTowerConfig(TowerConfig):
    """The ViT: its encoder stack, which patch embedding, how to pool, which pixels it expects."""

    kind: Literal["vit", "hybrid", "conv_stem"] = "conv_stem"
    """Patch embedding: ``vit`` (a conv patchify), ``hybrid`` (a CNN's feature map: ResNetV2 as in
    R50+ViT, or ``backbone``) or ``conv_stem`` (two 3×3 convs then a patch conv, for small
    pictures)."""
    image_size: int = 32
    """Side of the square input picture in pixels."""
    patch_size: int = 4
    """Side of one patch token in pixels; for ``hybrid``, in feature-map cells (1 = every cell)."""
    in_chans: int = 3
    """Colour channels of the input."""
    class_token: bool = False
    """Prepend a learned class token (needed by ``pool: cls`` and by timm's ViT weights)."""
    pool: Literal["mean", "cls"] = "mean"
    """The one image vector: the mean of the patch tokens, or the class token."""
    backbone: str | None = None
    """The ``hybrid`` front end's CNN: null = the ViT paper's ResNetV2 (``hybrid_layers``); a timm
    CNN's name (``tf_efficientnet_lite0``, ``resnet50``, …) = that CNN's last feature map, one token
    per cell (``patch_size`` 1), its weights from ``pretrained``."""
    backbone_grid: int | None = None
    """``hybrid`` only: average the CNN's feature map to a grid of this many cells a side before
    the projection: 1 = one image token for the whole photo (the course's pooled token), 2 = four
    (its quarters, overlapping); null = every cell. A frozen backbone's cache then holds the
    averaged grid per photo instead of its map."""
    hybrid_layers: tuple[int, ...] = (3, 4, 9)
    """ResNetV2 stage depths of the ``hybrid`` front end without ``backbone``; () = the stem
    only."""
    stem_hidden_dim: int = 16
    """Channels of the two 3×3 convs of ``conv_stem``."""
    attention_radius: int | None = None
    """Each patch attends only to the patches at most this many rows and columns away (a
    (2r+1)² window), so its token stays about its own object; null = every patch, as in ViT and
    in every pretrained ViT's weights."""
    mean: tuple[float, float, float] = (0.5, 0.5, 0.5)
    """Per-channel pixel mean subtracted before the tower; it belongs to the pretrained weights."""
    std: tuple[float, float, float] = (0.5, 0.5, 0.5)
    """Per-channel pixel standard deviation divided out before the tower."""
    pretrained: str | None = None
    """Initial weights: a timm model name (downloads when online) or a local file; null = random."""

    def __post_init__(self) -> None:
        # YAML and JSON give lists; keep the declared tuples so configs compare equal.
        self.hybrid_layers = tuple(self.hybrid_layers)
        self.mean = tuple(self.mean)
        self.std = tuple(self.std)
        if self.pool == "cls" and not self.class_token:
            raise ConfigError("pool='cls' needs class_token=True")
        if (self.backbone or self.backbone_grid) and self.kind != "hybrid":
            raise ConfigError(f"image.backbone and image.backbone_grid set the hybrid front end: "
                              f"use kind: hybrid (not {self.kind})")
        if self.backbone_grid is not None and self.backbone_grid < 1:
            raise ConfigError(f"image.backbone_grid={self.backbone_grid}: the side of the grid the "
                              f"feature map is averaged to; use 1 or more, or null for every cell")
        if self.attention_radius is not None and self.attention_radius < 0:
            raise ConfigError(f"attention_radius={self.attention_radius}: a patch must see itself; "
                              f"use 0 or more, or null for every patch")


@dataclass
class TextTowerConfig(TowerConfig):
    """The BERT: its encoder stack, the longest caption in word pieces, dropout, and the
    pretrained BERT it may start from."""

    max_len: int = 32
    """Longest caption in word pieces, [CLS] and [SEP] included (rows of the position table)."""
    dropout: float = 0.0
    """Dropout on the embeddings, the attention weights and the block outputs."""
    layout: Literal["pre-norm", "bert"] = "pre-norm"
    """``pre-norm``: ``x + Attn(LN(x))`` blocks and a final LayerNorm (ViT, ModernBERT), which
    train stably from scratch; ``bert``: BERT's own layout, post-norm blocks ``LN(x + Attn(x))``
    and a LayerNorm over the summed embeddings, which a pretrained BERT's weights need."""
    pretrained: str | None = None
    """A BERT to start from: a folder of transformers' files (``config.json`` and
    ``model.safetensors`` or ``pytorch_model.bin``, with its ``vocab.txt`` or ``tokenizer.json``)
    or a Hugging Face hub name (needs the hub). Its config.json sets the width, depth, heads, MLP
    width and LayerNorm epsilon (layout ``bert``), its tokenizer is the data's, and its weights
    are loaded when a fresh run starts (:mod:`vitbert.io.bert`); null = trained from scratch."""


class NetworkExtension:
    """A network built from outside the core: :meth:`build` returns the network to use instead
    of :class:`~vitbert.models.VitBert` for a config, usually a subclass of it with a part added
    or replaced, the way timm builds a model class named by a config.

    Its settings are its constructor's plain arguments, kept as attributes of the same names, so
    a config names one as ``{"class_path": ..., "init_args": {...}}`` (YAML and checkpoints
    alike) and the network is rebuilt from it."""

    def build(self, config: VitBertConfig) -> nn.Module:
        """The network for ``config`` (whose ``extension`` is this one)."""
        raise NotImplementedError

    def settings(self) -> dict[str, Any]:
        """``{"class_path", "init_args"}``: how a config and a checkpoint name this extension."""
        return {"class_path": f"{type(self).__module__}.{type(self).__name__}",
                "init_args": dict(vars(self))}

    # By settings, not identity: a config read back from a checkpoint or a YAML file equals the
    # one it was written from (VitBertConfig compares its fields, this one among them).
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, NetworkExtension):
            return NotImplemented
        return self.settings() == other.settings()

    def __hash__(self) -> int:
        return hash(repr(self.settings()))


def build_extension(spec: NetworkExtension | dict[str, Any] | None) -> NetworkExtension | None:
    """An extension from its ``{"class_path", "init_args"}`` (as a checkpoint stores it), or
    the extension itself."""
    if spec is None or isinstance(spec, NetworkExtension):
        return spec
    module, _, name = spec["class_path"].rpartition(".")
    return getattr(importlib.import_module(module), name)(**spec.get("init_args", {}))


@dataclass
class VitBertConfig:
    """Both towers, the vocabulary, and how the image reaches the text (1 pooled or all patches)."""

    image: ImageTowerConfig = field(default_factory=ImageTowerConfig)
    """The image tower (ViT)."""
    text: TextTowerConfig = field(default_factory=TextTowerConfig)
    """The text tower (BERT)."""
    vocab_size: int = 8000
    """Word pieces in the vocabulary; training takes it from the tokenizer."""
    pad_token_id: int = 0
    """Id of [PAD]; training takes it from the tokenizer."""
    image_tokens: Literal["pooled", "patches"] = "patches"
    """What of the image reaches the text: one pooled vector, or every patch token."""
    projector_norm: bool = False
    """LayerNorm the projected image tokens before they join the words."""
    itc_dim: int = 0
    """Width of the contrastive space (ALBEF's ITC, :mod:`vitbert.models.contrastive`): each
    photo and each caption embedded alone, so retrieval scores every pair by a dot product.
    0 = no contrastive heads; the contrastive
    objective (``vitbert.lit.contrastive.Contrastive``) trains them (128 or 256 are usual)."""
    itc_text_pool: Literal["cls", "mean"] = "cls"
    """How the contrastive score summarises a caption read alone: its [CLS] row (ALBEF), or the
    mean of its rows (what a sentence encoder such as all-MiniLM-L6-v2 was trained to give)."""
    extension: NetworkExtension | None = None
    """A network built from outside the core (class_path / init_args, :class:`NetworkExtension`);
    null = :class:`~vitbert.models.VitBert` itself."""

    def __post_init__(self) -> None:
        # Accept nested dicts (from_dict, jsonargparse) as well as the dataclasses themselves.
        if isinstance(self.image, dict):
            self.image = ImageTowerConfig(**self.image)
        if isinstance(self.text, dict):
            self.text = TextTowerConfig(**self.text)
        self.extension = build_extension(self.extension)
        if self.itc_dim < 0:
            raise ConfigError(f"itc_dim={self.itc_dim}: the contrastive space needs a width; use "
                              f"0 (no contrastive heads) or more, e.g. 128")

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict (tuples stay tuples; ``json`` writes them as lists), the extension
        as its ``{"class_path", "init_args"}``."""
        plain = dataclasses.asdict(dataclasses.replace(self, extension=None))
        plain["extension"] = self.extension.settings() if self.extension else None
        return plain

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> VitBertConfig:
        """Inverse of :meth:`to_dict`; lists where tuples are expected are fine."""
        d = dict(d)
        image = ImageTowerConfig(**d.pop("image", {}))
        text = TextTowerConfig(**d.pop("text", {}))
        return cls(image=image, text=text, **d)
