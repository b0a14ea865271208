"""Which words the photo helps: per masked word, the true word's probability with its own photo,
with another image's photo and from the text alone, over one split of a checkpoint's data.

The checkpoint knows its data (Lightning saves the data module's settings beside the weights), so
``analyze(ckpt)`` rebuilds the same validation loader: same cache, same batches, same fixed masks
(``MLMCollator(deterministic=True)``), and so the same figures ``val/top5*`` that training logs.
The another-photo reading is the shared control (``vitbert.lit.conditions.another_photo``: each
caption meets the photo of a *different* image of its batch); captions whose batch holds no other
image are left out of every reading here, so all three readings cover the same targets.

Word classes (a small lexicon, not a tagger): ``colour`` (:data:`COLOUR_WORDS`), ``function``
(``masking.STOP_WORDS``), ``verb`` (ends in -ing, or in :data:`VERBS`), ``noun`` (every other
content word: mostly nouns, with the non-colour adjectives).
"""

from __future__ import annotations

import importlib
import inspect
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader

from vitbert.data.cache import SPLITS, CaptionDataset, DataError
from vitbert.data.datamodule import evaluation_mlm_probability
from vitbert.data.masking import IGNORE_INDEX, STOP_WORDS, MLMCollator
from vitbert.io import CheckpointError, load_model
from vitbert.lit.conditions import (
    ANOTHER_PHOTO,
    TEXT_ONLY,
    WITH_PHOTO,
    another_photo,
    select_captions,
)
from vitbert.lit.evaluation import images_and_references
from vitbert.lit.objectives import masked_logits
from vitbert.lit.retrieval import retrieval_scores, split_for_retrieval

# Colour words: the word class this analysis reports on (the model knows no word list).
_COLOUR_WORDS = """
    black white brown red blue green yellow orange pink purple grey gray tan blond blonde golden
    silver dark light colorful colourful
"""
COLOUR_WORDS = frozenset(_COLOUR_WORDS.split())
_VERBS = """
    sits stands runs jumps walks plays rides looks holds wears climbs swims throws catches
    sit stand run jump walk play ride look hold wear climb swim throw catch lays lies
"""
VERBS = frozenset(_VERBS.split())
CLASSES = ("colour", "noun", "verb", "function")
TOP_K = 5


def word_class(word: str) -> str:
    """colour, function, verb or noun (see the module docstring for the lexicon)."""
    word = word.lower()
    if word in COLOUR_WORDS:
        return "colour"
    if word in STOP_WORDS or not word.isalpha():
        return "function"
    if word in VERBS or (word.endswith("ing") and len(word) > 4):
        return "verb"
    return "noun"


@dataclass
class Readings:
    """One row per masked piece read in all three conditions."""

    words: list[str] = field(default_factory=list)  # the whole word the piece belongs to
    is_content: list[bool] = field(default_factory=list)  # the collator's content_mask
    p_with: list[float] = field(default_factory=list)  # probability of the true piece
    p_another: list[float] = field(default_factory=list)
    p_text: list[float] = field(default_factory=list)
    hit_with: list[bool] = field(default_factory=list)  # the true piece is in the top 5
    hit_another: list[bool] = field(default_factory=list)
    hit_text: list[bool] = field(default_factory=list)
    skipped_captions: int = 0  # no other image in their batch

    def arrays(self) -> dict[str, np.ndarray]:
        return {name: np.asarray(value) for name, value in vars(self).items()
                if isinstance(value, list)}


# Where the data sources that checkpoints name have moved since they were written.
MOVED_SOURCES = {"vitbert.data.Flickr30kSource": "vitbert.data.CaptionedPhotos",  # its first name
                 "vitbert.data.ShapesSource": "vitbert.shapes.ShapesSource",
                 "vitbert.data.sources.ShapesSource": "vitbert.shapes.ShapesSource",
                 "vitbert.data.StreamingSource": "vitbert.streaming.StreamingSource",
                 "vitbert.data.streaming.StreamingSource": "vitbert.streaming.StreamingSource"}


def _source_from(settings: dict[str, Any], root: str | None, cache_dir: str | None):
    class_path = MOVED_SOURCES.get(settings["class_path"], settings["class_path"])
    module, _, name = class_path.rpartition(".")
    init_args = dict(settings.get("init_args", {}))
    if root is not None:
        init_args["root"] = root
    if cache_dir is not None:
        key = "cache_dir" if "cache_dir" in init_args else "root"
        init_args[key] = cache_dir
    source_class = getattr(importlib.import_module(module), name)
    known = inspect.signature(source_class).parameters  # a setting since removed is dropped
    return source_class(**{k: v for k, v in init_args.items() if k in known})


def checkpoint_source(ckpt: str | Path, root: str | None = None, cache_dir: str | None = None
                      ) -> tuple[Any, dict[str, Any]]:
    """The data source a ``.ckpt`` was trained on (cache not yet built) and its data settings."""
    if Path(ckpt).is_dir():
        raise DataError(f"{ckpt}: an exported folder carries no data settings; pass the .ckpt "
                        f"written by scripts/train.py fit")
    checkpoint = torch.load(ckpt, map_location="cpu", weights_only=True)
    data = checkpoint.get("datamodule_hyper_parameters")
    if not data or "source" not in data:
        raise DataError(f"{ckpt}: holds no data settings (datamodule_hyper_parameters); "
                        f"pass a .ckpt written by scripts/train.py fit")
    return _source_from(data["source"], root, cache_dir), data


def checkpoint_split(ckpt: str | Path, split: str, root: str | None = None,
                     cache_dir: str | None = None) -> tuple[Any, dict[str, Any], CaptionDataset]:
    """The data source a ``.ckpt`` was trained on, its data settings, and ``split`` of its data
    (the cache built if it is not there)."""
    if split not in SPLITS:
        raise DataError(f"split {split!r} is not one of {SPLITS}")
    source, data = checkpoint_source(ckpt, root, cache_dir)
    source.build_cache(int(data["image_size"]))
    return source, data, CaptionDataset(source.cache_dir, split)


def rebuild_loader(ckpt: str | Path, split: str, root: str | None = None,
                   cache_dir: str | None = None) -> tuple[DataLoader, CaptionDataset]:
    """The loader validation used for `split`: the checkpoint's data settings, its tokenizer."""
    _, data, dataset = checkpoint_split(ckpt, split, root, cache_dir)
    _, tokenizer = load_model(ckpt)
    rate = evaluation_mlm_probability(data["mlm_probability"], data.get("eval_mlm_probability"))
    collator = MLMCollator(tokenizer, mlm_probability=rate,
                           whole_word=data.get("whole_word_masking", False), deterministic=True,
                           seed=data.get("mask_seed", 0), max_length=data["max_length"])
    loader = DataLoader(dataset, batch_size=data["batch_size"], shuffle=False,
                        collate_fn=collator)
    return loader, dataset


@torch.no_grad()
def read_split(ckpt: str | Path, split: str = "val", root: str | None = None,
               cache_dir: str | None = None) -> Readings:
    """Every masked piece of `split`, read with its photo, another image's photo, no photo."""
    model, tokenizer = load_model(ckpt)
    loader, dataset = rebuild_loader(ckpt, split, root, cache_dir)
    out = Readings()
    for batch in loader:
        _, has_other = another_photo(batch["image_id"])  # the shared control
        out.skipped_captions += int((~has_other).sum())
        if not has_other.any():
            continue
        batch = select_captions(batch, has_other)
        features = model.image_features(batch["images"])  # (P, N, D_img)
        ids = batch["input_ids"]  # (B', T)
        targets_at = batch["labels"] != IGNORE_INDEX  # (B', T)
        truth = batch["labels"][targets_at]  # (M,)
        for condition, name in ((WITH_PHOTO, "with"), (ANOTHER_PHOTO, "another"),
                                (TEXT_ONLY, "text")):
            shown, _ = condition.view(batch, features)  # the module's own readings of the batch
            logits = masked_logits(model, batch, shown).float()  # (M, V)
            p_true = logits.softmax(-1).gather(1, truth[:, None])[:, 0]  # (M,)
            top = logits.topk(min(TOP_K, logits.shape[-1]), dim=-1).indices  # (M, 5)
            getattr(out, f"p_{name}").extend(p_true.tolist())
            getattr(out, f"hit_{name}").extend((top == truth[:, None]).any(-1).tolist())
        out.is_content.extend(batch["content_mask"][targets_at].tolist())
        indices = batch["index"].tolist()
        rows, cols = targets_at.nonzero(as_tuple=True)
        for r, c in zip(rows.tolist(), cols.tolist(), strict=True):
            out.words.append(_word_at(tokenizer, dataset.captions[indices[r]], c,
                                      int(ids.shape[1])))
    if not out.words:
        raise DataError(f"split {split!r} gave no caption with another image in its batch")
    return out


def _word_at(tokenizer, caption: str, position: int, max_length: int) -> str:
    enc = tokenizer(caption, truncation=True, max_length=max_length)
    span = enc.word_to_chars(enc.word_ids()[position])
    return caption[span.start : span.end].lower()


def summarise(readings: Readings, top: int = 20, min_count: int = 3) -> dict[str, Any]:
    """Headline top-5 accuracies (all and content), the class table, the words the photo helps."""
    a = readings.arrays()
    content = a["is_content"]
    gain = a["p_with"] - a["p_another"]
    summary: dict[str, Any] = {"targets": len(gain), "content_targets": int(content.sum()),
                               "skipped_captions": readings.skipped_captions}
    for name in ("with", "another", "text"):
        summary[f"top5_{name}"] = float(a[f"hit_{name}"].mean())
        summary[f"top5_{name}_content"] = float(a[f"hit_{name}"][content].mean())
    summary["gain_top5_content"] = summary["top5_with_content"] - summary["top5_another_content"]
    classes = np.array([word_class(w) for w in readings.words])
    summary["classes"] = {
        c: {"count": int((classes == c).sum()),
            "mean_gain_p": float(gain[classes == c].mean()) if (classes == c).any() else 0.0,
            "top5_with": float(a["hit_with"][classes == c].mean()) if (classes == c).any() else 0.0,
            "top5_another": (float(a["hit_another"][classes == c].mean())
                             if (classes == c).any() else 0.0)}
        for c in CLASSES
    }
    per_word: dict[str, list[int]] = defaultdict(list)
    for i, w in enumerate(readings.words):
        per_word[w].append(i)
    rows = [{"word": w, "class": word_class(w), "count": len(ix),
             "p_with": float(a["p_with"][ix].mean()), "p_another": float(a["p_another"][ix].mean()),
             "gain": float(gain[ix].mean())}
            for w, ix in per_word.items() if len(ix) >= min_count]
    summary["words"] = sorted(rows, key=lambda r: -r["gain"])[:top]
    return summary


def format_summary(summary: dict[str, Any]) -> str:
    """The printed report: headline, classes with counts, top words."""
    lines = [
        f"{summary['targets']} masked pieces ({summary['content_targets']} of content words); "
        f"{summary['skipped_captions']} captions skipped (no other image in their batch)",
        f"top-5, content words: with the photo {100 * summary['top5_with_content']:.1f}%, "
        f"another photo {100 * summary['top5_another_content']:.1f}%, "
        f"text only {100 * summary['top5_text_content']:.1f}%  "
        f"(gain {100 * summary['gain_top5_content']:+.1f} points)",
        "",
        f"{'class':<10}{'count':>7}{'top5 photo':>12}{'top5 other':>12}{'mean Δp':>10}",
    ]
    for name, c in summary["classes"].items():
        lines.append(f"{name:<10}{c['count']:>7}{100 * c['top5_with']:>11.1f}%"
                     f"{100 * c['top5_another']:>11.1f}%{c['mean_gain_p']:>+10.3f}")
    lines += ["", f"{'word':<14}{'class':<10}{'count':>6}{'p photo':>9}{'p other':>9}{'Δp':>8}"]
    for r in summary["words"]:
        lines.append(f"{r['word']:<14}{r['class']:<10}{r['count']:>6}{r['p_with']:>9.3f}"
                     f"{r['p_another']:>9.3f}{r['gain']:>+8.3f}")
    return "\n".join(lines)


def plot(summary: dict[str, Any], out: str | Path, title: str = "") -> Path:
    """Two panels: the words with the largest gain, and the mean gain by word class (counts)."""
    import matplotlib
    import matplotlib.patches

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = {"colour": "tab:orange", "noun": "tab:blue", "verb": "tab:green",
               "function": "tab:gray"}
    words = summary["words"][::-1]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, max(4.0, 0.28 * len(words) + 1.5)),
                                      gridspec_kw={"width_ratios": [3, 2]})
    left.barh([f"{r['word']} ({r['count']})" for r in words], [r["gain"] for r in words],
              color=[colours[r["class"]] for r in words])
    left.axvline(0, color="black", linewidth=0.8)
    left.set_xlabel("p(true word | its photo) − p(true word | another photo)")
    left.set_title("words the photo helps most (occurrences)")
    left.legend(handles=[matplotlib.patches.Patch(color=c, label=n) for n, c in colours.items()],
                loc="lower right", fontsize="small")
    names = list(summary["classes"])
    right.bar([f"{n}\nn={summary['classes'][n]['count']}" for n in names],
              [summary["classes"][n]["mean_gain_p"] for n in names],
              color=[colours[n] for n in names])
    right.axhline(0, color="black", linewidth=0.8)
    right.set_ylabel("mean gain in p(true word)")
    right.set_title("by word class (masked pieces)")
    fig.suptitle(title or (f"top-5 content words: photo {100 * summary['top5_with_content']:.1f}%"
                           f" vs another photo {100 * summary['top5_another_content']:.1f}%"))
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


@torch.no_grad()
def analyse_binding(ckpt: str | Path, split: str = "test", num_images: int | None = None,
                    root: str | None = None, cache_dir: str | None = None) -> dict[str, float]:
    """The shapes data's binding swap tests (:mod:`vitbert.shapes.binding`) of a ``.ckpt``
    trained on it, on ``num_images`` pictures of ``split`` (a fixed sample; None: all), every
    caption of each."""
    from vitbert.shapes import ShapesSource
    from vitbert.shapes.binding import binding_scores

    source, data, dataset = checkpoint_split(ckpt, split, root, cache_dir)
    if not isinstance(source, ShapesSource):
        raise CheckpointError(f"{ckpt}: trained on {type(source).__name__}; the binding swap "
                              f"tests swap the shapes data's colours, shapes and relations, so "
                              f"they read a checkpoint trained on it")
    net, tokenizer = load_model(ckpt)
    _, firsts, captions = images_and_references(dataset, num_images)
    images = torch.stack([dataset[i]["image"] for i in firsts])  # (P, 3, S, S)
    return binding_scores(net, tokenizer, images, captions, max_length=int(data["max_length"]))


@torch.no_grad()
def analyse_retrieval(ckpt: str | Path, split: str = "test", num_images: int | None = None,
                      root: str | None = None, cache_dir: str | None = None
                      ) -> dict[str, float]:
    """Image-text retrieval (:mod:`vitbert.lit.retrieval`) of a ``.ckpt`` on ``num_images``
    photos of ``split`` (a fixed sample; None: all) against all their captions, every pair by
    the contrastive score."""
    net, tokenizer = load_model(ckpt)
    if not net.has_itc:
        raise CheckpointError(f"{ckpt}: this model has no contrastive heads, which retrieval "
                              f"ranks by; train one with the contrastive objective")
    _, data, dataset = checkpoint_split(ckpt, split, root, cache_dir)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    split_data = split_for_retrieval(dataset, tokenizer, int(data["max_length"]), num_images)
    return retrieval_scores(net.to(device), split_data)

