"""A table of the validation figures, printed when a run ends."""

from __future__ import annotations

import lightning as L
from lightning.pytorch.utilities import rank_zero_only

from vitbert.lit.metrics import CONDITIONS, TOP_K


def format_figures(figures: dict[str, float], stage: str = "val") -> str:
    """Rows: with / without / mismatched photo; columns: loss and top-k (all, content words)."""
    columns = ["loss"] + [f"top{k}" for k in TOP_K] + [f"top{k}_content" for k in TOP_K]
    header = f"{'':<26}" + "".join(f"{c:>14}" for c in columns)
    lines = [header, "-" * len(header)]
    for suffix, description in CONDITIONS.items():
        cells = []
        for column in columns:
            base, _, content = column.partition("_")
            key = f"{stage}/{base}{suffix}" + (f"_{content}" if content else "")
            value = figures.get(key)
            cells.append("-" if value is None else f"{value:.4f}" if base == "loss" else
                         f"{100 * value:.1f}%")
        lines.append(f"{description:<26}" + "".join(f"{c:>14}" for c in cells))
    gains = [
        f"{100 * figures[f'{stage}/image_gain_top1{c}']:+.1f} points ({name})"
        for c, name in (("", "all pieces"), ("_content", "content words"))
        if f"{stage}/image_gain_top1{c}" in figures
    ]
    if gains:
        lines.append("image gain at top-1: " + ", ".join(gains))
    lines += format_caption_figures(figures, stage)
    return "\n".join(lines)


def format_caption_figures(figures: dict[str, float], stage: str = "val") -> list[str]:
    """One line each, with the photo and from no image: BLEU-4, CIDEr-D, colour and shape."""
    lines = []
    for suffix, description in (("", "captions, with the photo"), ("_text", "captions, no image")):
        if f"{stage}/cider{suffix}" not in figures:
            continue
        line = (f"{description:<26}BLEU-4 {100 * figures[f'{stage}/bleu4{suffix}']:.1f}   "
                f"CIDEr-D {100 * figures[f'{stage}/cider{suffix}']:.1f}")
        if f"{stage}/colour_shape{suffix}" in figures:
            line += (f"   colours and shapes all right "
                     f"{100 * figures[f'{stage}/colour_shape{suffix}']:.1f}%")
        lines.append(line)
    return lines


class ValidationSummary(L.Callback):
    """Prints the last validation's figures as a table when ``fit`` ends."""

    @rank_zero_only
    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        figures = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val/")}
        if figures:
            print(f"\nValidation after {trainer.global_step} steps:\n{format_figures(figures)}")
