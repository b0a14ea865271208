"""The model's configuration: plain dataclasses of plain values.

They are saved inside checkpoints (``dataclasses.asdict``) and must load back with
``torch.load(weights_only=True)``, so they hold only numbers, strings, tuples and nested dicts,
never modules or tensors. LightningCLI reads them from YAML through their type hints.

:data:`PRESETS` names the configurations the project talks about: ``default`` (the small model
``configs/default.yaml`` trains on the embedded shapes in CPU-minutes: the dataclass defaults
with a local attention window) and the Flickr30k models (the reference
pretrained ViT-B/16 → one image token → 6-block BERT, its R50 hybrid twin, and the
one-token-per-patch variant). Every field carries a docstring, which
``train.py fit --help`` prints next to the setting.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal


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
    """Patch embedding: ``vit`` (a conv patchify), ``hybrid`` (a ResNetV2 feature map, R50+ViT) or
    ``conv_stem`` (two 3×3 convs then a patch conv, for small pictures)."""
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
    hybrid_layers: tuple[int, ...] = (3, 4, 9)
    """ResNetV2 stage depths of the ``hybrid`` front end; () = the stem only."""
    stem_hidden_dim: int = 16
    """Channels of the two 3×3 convs of ``conv_stem``."""
    chroma_dim: int = 0
    """``conv_stem`` only; 0 = off. The convs and blocks read luminance (the channels' mean), and
    the last ``chroma_dim`` channels of each output token hold the patch's hue instead (1×1 convs
    over its pixels, averaged: :class:`vitbert.models.patch_embed.PatchChroma`), so a form's
    features cannot depend on its hue, and the neighbour lookup reads hue and form apart
    (docs/binding.md)."""
    chroma_place: bool = False
    """With ``chroma_dim``: the last two of its channels hold the patch's column and row, fixed
    and scaled to [-1, 1], instead of hue. A lookup head that finds an object by its form then
    reads where the object is with its hue, the step a relation word needs ("left of" compares
    two objects' places; docs/binding.md). Off by default."""
    attention_radius: int | None = None
    """Each patch attends only to the patches at most this many rows and columns away (a
    (2r+1)² window); null = every patch, as in ViT and in every pretrained ViT's weights. Local
    attention keeps a token about its own object: configs/default.yaml sets 2 for the embedded
    shapes, whose objects came out tied to their training colours with global attention
    (README)."""
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
            raise ValueError("pool='cls' needs class_token=True")
        if self.chroma_dim and self.kind != "conv_stem":
            place = " and chroma_place: false" if self.chroma_place else ""
            raise ValueError(f"chroma_dim={self.chroma_dim} needs kind: conv_stem (the "
                             f"{self.kind} front end reads every channel); set kind: conv_stem "
                             f"or chroma_dim: 0{place}")
        if not 0 <= self.chroma_dim < self.dim:
            raise ValueError(f"chroma_dim={self.chroma_dim}: the hue takes that many of the "
                             f"tokens' {self.dim} channels; use 0 (off) up to {self.dim - 1}")
        if self.chroma_place and self.chroma_dim < 3:
            raise ValueError(f"chroma_place needs chroma_dim of 3 or more (two channels for the "
                             f"place, the rest for the hue), got {self.chroma_dim}; set "
                             f"chroma_dim: 32 or chroma_place: false (and the net's "
                             f"lookup_place: false, which reads the place)")
        if self.attention_radius is not None and self.attention_radius < 0:
            raise ValueError(f"attention_radius={self.attention_radius}: a patch must see itself; "
                             f"use 0 or more, or null for every patch")


@dataclass
class TextTowerConfig(TowerConfig):
    """The BERT: its encoder stack, the longest caption in word pieces, dropout."""

    max_len: int = 32
    """Longest caption in word pieces, [CLS] and [SEP] included (rows of the position table)."""
    dropout: float = 0.0
    """Dropout on the embeddings, the attention weights and the block outputs."""


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
    photo and each caption embedded alone, so retrieval scores every pair by a dot product and
    re-ranks a short list with the matching head. 0 = no contrastive heads (a checkpoint written
    before they existed reads as 0); trained by ``--model.itc_weight``."""
    neighbour_lookup_heads: int = 0
    """Heads of the neighbour lookup (:mod:`vitbert.models.lookup`): each word's two neighbours
    ask the image tokens, in one step, and what they read joins the word's final hidden state,
    so a hidden word can read the object its neighbour names (binding, docs/binding.md). 0 = no
    lookup (a checkpoint written before it existed reads as 0)."""
    lookup_share_window: int = 0
    """Each word also hears what the lookup read for the words up to this many pieces away
    (only those to its left when writing): :class:`vitbert.models.lookup.ReadSharing`. A word
    whose neighbours name nothing ("left" in "a small red circle is to the left of ...") gets
    the reading of the words that do. 0 = off (a checkpoint written before it existed reads
    as 0)."""
    lookup_place: bool = False
    """The neighbour lookup's read also says where it looked (each head's mean patch column and
    row), in channels of its own; needs ``image.chroma_place``. The words that hear a read
    (``lookup_share_window``) then learn where the object another word names is
    (:mod:`vitbert.models.lookup`, docs/binding.md). Off: a checkpoint written before it existed
    reads as off."""

    def __post_init__(self) -> None:
        # Accept nested dicts (from_dict, jsonargparse) as well as the dataclasses themselves.
        if isinstance(self.image, dict):
            self.image = ImageTowerConfig(**self.image)
        if isinstance(self.text, dict):
            self.text = TextTowerConfig(**self.text)
        if self.neighbour_lookup_heads < 0:
            raise ValueError(f"neighbour_lookup_heads={self.neighbour_lookup_heads}: use 0 (no "
                             f"lookup) or a number of heads that divides text.dim")
        if self.lookup_share_window < 0 or (self.lookup_share_window
                                            and not self.neighbour_lookup_heads):
            raise ValueError(f"lookup_share_window={self.lookup_share_window} shares what the "
                             f"neighbour lookup reads: use 0, or a window of 1 or more with "
                             f"neighbour_lookup_heads (e.g. 4)")
        if self.lookup_place and not (self.neighbour_lookup_heads and self.image.chroma_place):
            raise ValueError("lookup_place reads the patch places the tower keeps beside the hue: "
                             "set neighbour_lookup_heads (e.g. 4) and image.chroma_place: true "
                             "(with image.chroma_dim, e.g. 32), or lookup_place: false")
        if self.itc_dim < 0:
            raise ValueError(f"itc_dim={self.itc_dim}: the contrastive space needs a width; use "
                             f"0 (no contrastive heads) or more, e.g. 128")

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict (tuples stay tuples; ``json`` writes them as lists)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> VitBertConfig:
        """Inverse of :meth:`to_dict`; lists where tuples are expected are fine.

        A stored image tower without ``attention_radius`` predates local attention: it attended
        globally, and loads so. A stored ``pointer`` (the word pointer, a decoding add-on for the
        shapes data, removed) is dropped (its weights: :func:`vitbert.io.drop_removed_weights`).
        """
        d = dict(d)
        d.pop("pointer", None)
        image = ImageTowerConfig(**{"attention_radius": None, **d.pop("image", {})})
        text = TextTowerConfig(**d.pop("text", {}))
        return cls(image=image, text=text, **d)


def _default() -> VitBertConfig:
    """The embedded default: the dataclass defaults, each patch attending to a 5×5 window, hue
    and place kept apart from form, and the neighbour lookup, which says where it looked and
    shares its reads over 6 pieces (binding, docs/binding.md)."""
    return VitBertConfig(image=ImageTowerConfig(attention_radius=2, chroma_dim=32,
                                                chroma_place=True),
                         neighbour_lookup_heads=4, lookup_share_window=6, lookup_place=True)


def _flickr30k() -> VitBertConfig:
    """The reference: pretrained ViT-B/16 at 224² → one pooled image token → 6-block BERT-base."""
    return VitBertConfig(
        image=ImageTowerConfig(
            kind="vit", image_size=224, patch_size=16, dim=768, depth=12, num_heads=12,
            class_token=True, pool="cls",
            pretrained="vit_base_patch16_224.augreg2_in21k_ft_in1k",
        ),
        text=TextTowerConfig(dim=768, depth=6, num_heads=12, max_len=64, dropout=0.1),
        vocab_size=8000,
        image_tokens="pooled",
        itc_dim=256,  # ALBEF's and BLIP's contrastive width at BERT-base (configs: itc_weight)
    )


def _flickr30k_hybrid() -> VitBertConfig:
    """The ViT paper's R50+ViT-B/16: a ResNetV2 (3, 4, 9) feature map, its 14×14 cells as tokens."""
    config = _flickr30k()
    config.image = dataclasses.replace(
        config.image, kind="hybrid", patch_size=1, hybrid_layers=(3, 4, 9),
        pretrained="vit_base_r50_s16_224.orig_in21k",
    )
    return config


def _flickr30k_patches() -> VitBertConfig:
    """The reference, but every one of the 196 patch tokens reaches the text (LayerNorm'd)."""
    config = _flickr30k()
    config.image_tokens = "patches"
    config.projector_norm = True
    return config


PRESETS = {
    "default": _default,
    "flickr30k": _flickr30k,
    "flickr30k_hybrid": _flickr30k_hybrid,
    "flickr30k_patches": _flickr30k_patches,
}


def preset(name: str) -> VitBertConfig:
    """A fresh copy of a named configuration (see :data:`PRESETS`)."""
    if name not in PRESETS:
        raise KeyError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}")
    return PRESETS[name]()
