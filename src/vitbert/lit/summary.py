"""A table of the validation figures, printed when a run ends."""

from __future__ import annotations

import lightning as L
from lightning.pytorch.utilities import rank_zero_only

from vitbert.lit.conditions import ANOTHER_PHOTO, CONDITIONS, TEXT_ONLY
from vitbert.lit.metrics import SKIPPED, TOP_K

# Table columns: (metric name before the condition's suffix, after it).
COLUMNS = [("loss", "")] + [(f"top{k}", "") for k in TOP_K] + [
    (f"top{k}", "_content") for k in TOP_K]
GAINS = (("image_gain_top1", ANOTHER_PHOTO), ("image_gain_vs_text_top1", TEXT_ONLY))


def format_figures(figures: dict[str, float], stage: str = "val") -> str:
    """Rows: the conditions; columns: loss and top-k (all pieces, content words); then the gains.

    The headline gain is with the photo minus another image's photo (what the photo's content
    adds); with the photo minus text only follows on its own line.
    """
    header = f"{'':<26}" + "".join(f"{base + content:>14}" for base, content in COLUMNS)
    lines = [header, "-" * len(header)]
    for condition in CONDITIONS:
        cells = []
        for base, content in COLUMNS:
            value = figures.get(f"{stage}/{base}{condition.suffix}{content}")
            cells.append("-" if value is None else f"{value:.4f}" if base == "loss"
                         else f"{100 * value:.1f}%")
        lines.append(f"{condition.description:<26}" + "".join(f"{c:>14}" for c in cells))
    for name, against in GAINS:
        gains = [f"{100 * figures[f'{stage}/{name}{c}']:+.1f} points ({what})"
                 for c, what in (("", "all pieces"), ("_content", "content words"))
                 if f"{stage}/{name}{c}" in figures]
        if gains:
            lines.append(f"image gain at top-1 against {against.description}: " + ", ".join(gains))
    skipped = int(figures.get(f"{stage}/{SKIPPED}", 0))
    if skipped:
        lines.append(f"({skipped} captions had no other image in their batch and are not in the "
                     f"'{ANOTHER_PHOTO.description}' row)")
    return "\n".join(lines)


class ValidationSummary(L.Callback):
    """Prints the last validation's figures as a table when ``fit`` ends."""

    @rank_zero_only
    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        figures = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val/")}
        if figures:
            print(f"\nValidation after {trainer.global_step} steps:\n{format_figures(figures)}")
