"""Copy stored weights into a model that may differ from the one that wrote them.

One function, :func:`transfer_weights`, serves every start from stored weights: pretrained timm
weights into the image tower (:mod:`vitbert.io.timm` renames their keys first) and our own
checkpoints into a new run (fine-tuning). What may differ, and what happens:

* rows indexed by token id (:data:`VOCAB_ROWS`): matched by token text when both tokenizers are
  known, else by id, so a grown or rebuilt vocabulary keeps every row it can;
* an image position table on another grid: resampled (bicubic, timm's
  ``resample_abs_pos_embed``), its class-token row kept, dropped or left at its init to match;
* a longer or shorter text position table: the common prefix is kept;
* anything else of another shape: skipped and named, or with ``strict=True`` an error before
  anything is written;
* the training heads that live beside the network (``word_head``: :data:`HEADS`),
  given as ``heads``: copied like the rest, or named with the objective that explains them when
  only one side has the head (the source's is not used, or ours is left as initialised).

Nothing moves in silence: the report names every source tensor not used and every tensor of ours
left as initialised.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from vitbert.data.tokenizer import tokenizer_from_json
from vitbert.io.files import HEADS, TIED_KEY, StoredModel
from vitbert.models.vit import ViT

# Rows of these tensors are indexed by token id: on a vocabulary change they are matched by text.
VOCAB_ROWS = ("text.embeddings.word.weight", "mlm_head.decoder.bias",
              "word_head.classifier.weight", "word_head.classifier.bias")
TEXT_POSITIONS = "text.embeddings.position.weight"  # (max_len, D)
CONTRASTIVE = "itc"  # VitBert.itc, the contrastive heads: present when net.itc_dim > 0


@dataclass
class TransferReport:
    """What :func:`transfer_weights` did, tensor by tensor."""

    source: str
    copied: list[str] = field(default_factory=list)  # same shape, copied as is
    resized: list[str] = field(default_factory=list)  # fitted, with how
    skipped: list[str] = field(default_factory=list)  # source tensors not used, with why
    missing: list[str] = field(default_factory=list)  # our tensors left as initialised
    notes: list[str] = field(default_factory=list)
    vocabulary: str = ""

    def __str__(self) -> str:
        lines = [f"from {self.source}: copied {len(self.copied)} tensors{_by_part(self.copied)}"]
        if self.vocabulary:
            lines.append(f"  vocabulary: {self.vocabulary}")
        for title, names in (("resized", self.resized), ("not used", self.skipped),
                             ("left as initialised", self.missing)):
            if names:
                lines.append(f"  {title} ({len(names)}): {_summarise(names)}")
        lines += [f"  note: {note}" for note in self.notes]
        return "\n".join(lines)


def _by_part(names: list[str]) -> str:
    """" (image_tower 9, text 17, word_head 2)": how many tensors of each top-level part, so the
    heads beside the network can be seen to have moved."""
    counts: dict[str, int] = {}
    for name in names:
        part = name.split(".", 1)[0]
        counts[part] = counts.get(part, 0) + 1
    return f" ({', '.join(f'{part} {n}' for part, n in counts.items())})" if counts else ""


def _summarise(entries: list[str], limit: int = 8) -> str:
    """Entries ("name" or "name (why)") grouped by their reason, so each reason is said once:
    "a, b (why); c (other why)", at most ``limit`` names shown a reason."""
    groups: dict[str, list[str]] = {}
    for entry in entries:
        name, _, why = entry.partition(" (")
        groups.setdefault(why, []).append(name)
    shown = []
    for why, names in groups.items():
        more = f", … ({len(names) - limit} more)" if len(names) > limit else ""
        shown.append(", ".join(names[:limit]) + more + (f" ({why}" if why else ""))
    return "; ".join(shown)


def _head_weights(heads: dict[str, nn.Module]) -> dict[str, Tensor]:
    """The heads' tensors under their module-level names (``word_head.classifier.bias``): the
    heads of :data:`HEADS`, which carry learnt weights (a run's other parts, such as a running
    statistic, start anew)."""
    return {f"{name}.{key}": value for name, head in heads.items() if name in HEADS
            for key, value in head.state_dict(keep_vars=True).items()}


def _why_not_in_model(name: str, heads: dict[str, nn.Module] | None) -> str:
    """Why a source tensor has no place in the model: a head this run does not train, named with
    the objective that would give it one, or a tensor the architecture lacks."""
    head = name.split(".", 1)[0]
    if head == CONTRASTIVE:
        return "this model has no contrastive heads: its --model.net.itc_dim is 0"
    if head not in HEADS:
        return "not in this model"
    if heads is None:
        return f"a training head ({head}); only the network was given"
    return f"this run has no {head}: its model.objectives have no {_short(HEADS[head])}"


def _short(class_path: str) -> str:
    return class_path.rsplit(".", 1)[-1]


def _note_fresh_heads(source: StoredModel, heads: dict[str, nn.Module],
                      report: TransferReport) -> None:
    """Say which of our heads the source had none of: they start from their initialisation."""
    for head in heads:
        if head in HEADS and not any(n.startswith(head + ".") for n in source.heads):
            report.notes.append(f"the source has no {head} (trained without "
                                f"{_short(HEADS[head])}): this run's {head} starts from its "
                                f"initialisation")


def transfer_weights(model: nn.Module, source: StoredModel, tokenizer=None, *,
                     strict: bool = False,
                     heads: dict[str, nn.Module] | None = None) -> TransferReport:
    """Copy ``source``'s weights into ``model`` (a VitBert or an image tower) in place, and its
    training heads' into ``heads`` (name → head, the ones this run trains).

    Every value is fitted before anything is written, so ``strict=True`` (a shape that does not
    fit is an error) leaves the model untouched when it raises. Parameters keep their identity;
    a tied decoder stays tied.
    """
    report = TransferReport(source.source)
    target = model.state_dict(keep_vars=True) | _head_weights(heads or {})
    image_positions = {
        f"{name}.pos_embed.weight".lstrip("."): tower
        for name, tower in model.named_modules() if isinstance(tower, ViT)
    }
    row_map = _vocabulary_row_map(source, tokenizer, target, report)
    updates: dict[str, tuple[Tensor, Tensor | None]] = {}  # name → (value, rows or None = all)
    misfits = []
    for name, value in (source.state_dict | source.heads).items():
        if name == TIED_KEY:
            continue  # the decoder shares the word embedding's matrix: it moves through that
        if name not in target:
            report.skipped.append(f"{name} ({_why_not_in_model(name, heads)})")
            continue
        current, rows, how = target[name], None, ""
        if name in VOCAB_ROWS and row_map is not None:
            rows, old_rows = row_map
            value, how = value[old_rows], "rows matched by token"
        elif name in image_positions and current.shape != value.shape:
            value, how = fit_image_positions(value, image_positions[name], report)
        elif (name == TEXT_POSITIONS and current.shape != value.shape
              and current.shape[1:] == value.shape[1:]):
            n = min(len(current), len(value))  # a longer table keeps the trained prefix
            value, rows, how = value[:n], torch.arange(n), f"first {n} positions"
        wanted = current.shape if rows is None else (len(rows), *current.shape[1:])
        if value.shape != wanted:
            misfits.append(f"{name} (shape {tuple(value.shape)} → {tuple(current.shape)})")
            continue
        updates[name] = (value, rows)
        if how:
            report.resized.append(f"{name} ({how})")
        else:
            report.copied.append(name)
    if misfits and strict:
        raise ValueError(f"these tensors from {source.source} do not fit the model (check its "
                         "config: width, depth, patch size, kind):\n  " + "\n  ".join(misfits))
    report.skipped += misfits
    with torch.no_grad():
        for name, (value, rows) in updates.items():
            if rows is None:
                target[name].copy_(value)
            else:
                target[name][rows] = value.to(target[name].dtype)
    report.missing = [name for name in target if name not in updates and name != TIED_KEY]
    _note_fresh_heads(source, heads or {}, report)
    if hasattr(model, "tie_weights"):
        model.tie_weights()
    return report


def fit_image_positions(table: Tensor, tower: ViT, report: TransferReport) -> tuple[Tensor, str]:
    """A (1, prefix + S², D) table of a square grid → the tower's (1, prefix' + R·C, D).

    The source's prefix is read from the table itself: a square number of rows has no class-token
    row, one more has one (register rows are taken out by the caller).
    """
    from timm.layers import resample_abs_pos_embed

    side = math.isqrt(table.shape[1])
    source_prefix = table.shape[1] - side * side
    if source_prefix > 1:
        return table, "not a square grid"  # the shape check names it
    prefix, grid = table[:, :source_prefix], table[:, source_prefix:]
    ours = tower.pos_embed.weight
    if tower.num_prefix_tokens and not source_prefix:
        prefix = ours[:, :1].detach()
        report.notes.append("the source has no class-token position; ours kept its init")
    elif source_prefix and not tower.num_prefix_tokens:
        prefix = prefix[:, :0]
        report.notes.append("class-token position dropped (class_token=False)")
    how = "class-token row fitted"
    if (side, side) != tuple(tower.grid_size):
        grid = resample_abs_pos_embed(grid.to(ours.dtype), new_size=list(tower.grid_size),
                                      old_size=[side, side], num_prefix_tokens=0)
        how = f"resampled from {side}×{side} to {tower.grid_size[0]}×{tower.grid_size[1]}"
    return torch.cat((prefix.to(ours.dtype), grid.to(ours.dtype)), dim=1), how


def _vocabulary_row_map(source: StoredModel, tokenizer, target, report: TransferReport):
    """(new ids, old ids) of the tokens both vocabularies share, or None when nothing changed."""
    if VOCAB_ROWS[0] not in source.state_dict or VOCAB_ROWS[0] not in target:
        return None
    old_size = source.state_dict[VOCAB_ROWS[0]].shape[0]
    new_size = target[VOCAB_ROWS[0]].shape[0]
    if tokenizer is not None and source.tokenizer_json is not None:
        old_vocab = tokenizer_from_json(source.tokenizer_json).get_vocab()
        new_vocab = tokenizer.get_vocab()
        if old_vocab == new_vocab:
            return None
        shared = sorted(set(old_vocab) & set(new_vocab))
        report.vocabulary = (
            f"{old_size} → {new_size} pieces; {len(shared)} matched by text, "
            f"{new_size - len(shared)} new rows initialised"
        )
        return (
            torch.tensor([new_vocab[t] for t in shared], dtype=torch.long),
            torch.tensor([old_vocab[t] for t in shared], dtype=torch.long),
        )
    if old_size == new_size:
        return None
    common = min(old_size, new_size)
    report.vocabulary = f"{old_size} → {new_size} pieces; first {common} rows copied by id"
    ids = torch.arange(common)
    return ids, ids
