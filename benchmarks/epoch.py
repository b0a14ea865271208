"""The whole-epoch benchmark: what a user feels, data loading included, against the obvious
pipeline.

Three ways to train the Flickr30k model (``configs/flickr30k.yaml``: ViT-B/16 → one pooled token →
6-block BERT) on the same photos and captions, Karpathy's layout, 500×375 JPEGs:

    obvious   what one writes first: a Dataset that opens each JPEG and applies torchvision's
              Resize + CenterCrop, captions tokenized to the maximum length (64), transformers'
              DataCollatorForLanguageModeling, timm's VisionTransformer + transformers'
              BertForMaskedLM (logits over the whole vocabulary at every position), AdamW
    ours      CaptionDataModule over the uint8 image cache (memmap), per-batch padding, logits
              only at the masked rows, fused AdamW; everything trainable; ``group_by_photo``:
              a photo's 5 captions share a batch and the image tower runs once per photo
    frozen    ours with ``freeze_image: {part: tower}``: the tower's output read from the feature
              cache (`vitbert.lit.frozen`), so a step runs the projector and the text side only

Each contender keeps its own DataLoader (same batch size and workers) and runs in alternating
rounds (the order flips every round; a shared machine's load drifts); samples/s is the total over
the timed steps. One-time costs (the image cache, the feature cache) are reported apart: they are
paid once per data set (and, for features, once per tower), not per epoch.

Where the time goes, per contender (seconds over the timed steps): ``data`` (waiting for the next
batch and moving it to the device), ``image_tower``, ``text_tower`` (the encoder), ``head`` (MLM
head and loss), each forward + backward, ``optimizer`` (step and zero_grad) and ``other`` (the
rest: embeddings, projector, autograd bookkeeping). Forward times come from module hooks; a part's
backward runs from the gradient's arrival at its output to its arrival at its input (or to the end
of ``backward()`` when its input needs none), observed with tensor hooks. On CUDA the hooks
synchronise, so the breakdown is taken only on eager runs.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from PIL import Image
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset

from benchmarks.data import make_jpeg_folder
from benchmarks.flops import reference_step_flops, vitbert_step_flops
from benchmarks.reference import ReferenceModel
from benchmarks.step import (
    IGNORE_INDEX,
    Batch,
    _our_optimizer,
    reference_loss,
    synchronize,
    vitbert_loss,
)
from vitbert.cli import config_net
from vitbert.data.features import FEATURES_KEY
from vitbert.models import VitBertConfig, build_network

PARTS = ("data", "image_tower", "text_tower", "head", "optimizer", "other")
MLM_PROBABILITY = 0.15  # configs/flickr30k.yaml's (BERT's), for every contender alike
FLICKR_VOCAB = 8000  # the Flickr30k config's vocabulary (its captions fill an 8000-piece WordPiece)


def cpu_config() -> VitBertConfig:
    """The Flickr30k model at ViT-Ti/16 widths (192, 3 heads), same depths, 224² pictures, one
    pooled token: the image tower does ~94% of the forward matmul work, as ViT-B/16 does in the
    full model (`work_shares` prints both)."""
    config = config_net("flickr30k")
    config.image = dataclasses.replace(config.image, dim=192, num_heads=3, pretrained=None)
    config.text = dataclasses.replace(config.text, dim=192, num_heads=3)
    return config


def work_shares(config: VitBertConfig, batch: int = 32, text_len: int = 20,
                targets: int = 3) -> dict[str, float]:
    """Fraction of our forward matmul FLOPs per part (image tower, text encoder, head)."""
    f = vitbert_step_flops(config, batch, text_len, targets * batch).forward
    total = sum(f.values())
    return {"image_tower": round((f["patch_embed"] + f["image_encoder"]) / total, 3),
            "text_tower": round(f["text_encoder"] / total, 3),
            "head": round(f["mlm_head"] / total, 4)}


# ------------------------------------------------------------------------------------------------
# The obvious pipeline's data: a Dataset that decodes every JPEG, padding to the maximum length


class JpegCaptionDataset(Dataset):
    """(JPEG, caption) pairs read from Karpathy's dataset_flickr30k.json, decoded every time."""

    def __init__(self, root: Path, tokenizer: Any, image_size: int = 224, max_length: int = 64):
        from torchvision import transforms as T

        data = json.loads((root / "dataset_flickr30k.json").read_text())
        self.items = [(root / "flickr30k-images" / im["filename"], s["raw"])
                      for im in data["images"] if im["split"] in ("train", "restval")
                      for s in im["sentences"]]
        self.tokenizer, self.max_length = tokenizer, max_length
        self.transform = T.Compose([T.Resize(image_size), T.CenterCrop(image_size),
                                    T.PILToTensor()])

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict[str, Any]:
        path, caption = self.items[i]
        image = self.transform(Image.open(path).convert("RGB"))  # (3, S, S) uint8
        enc = self.tokenizer(caption, padding="max_length", truncation=True,
                             max_length=self.max_length, return_token_type_ids=False)
        return {"image": image, **enc}


class JpegCollator:
    """transformers' DataCollatorForLanguageModeling for the words, a stack for the pictures."""

    def __init__(self, tokenizer: Any):
        from transformers import DataCollatorForLanguageModeling

        self.mlm = DataCollatorForLanguageModeling(tokenizer, mlm_probability=MLM_PROBABILITY)

    def __call__(self, items: list[dict[str, Any]]) -> Batch:
        batch = self.mlm([{k: v for k, v in it.items() if k != "image"} for it in items])
        return {"images": torch.stack([it["image"] for it in items]),
                "input_ids": batch["input_ids"], "labels": batch["labels"],
                "attention_mask": batch["attention_mask"].bool()}


# ------------------------------------------------------------------------------------------------
# Timing a part of the step with hooks


def now(device: torch.device) -> float:
    """perf_counter after the device's queued work is done."""
    synchronize(device)
    return time.perf_counter()


class PartClock:
    """Forward + backward seconds of named parts of a model (see the module docstring)."""

    def __init__(self, parts: dict[str, nn.Module], device: torch.device):
        self.device = device
        self.seconds: dict[str, float] = defaultdict(float)
        self._fwd_start: dict[str, float] = {}
        self._bwd_start: dict[str, float] = {}
        self._bwd_open: dict[str, bool] = {}
        self._handles = []
        for name, module in parts.items():
            self._handles.append(module.register_forward_pre_hook(self._pre(name)))
            self._handles.append(module.register_forward_hook(self._post(name)))

    def now(self) -> float:
        return now(self.device)

    def _pre(self, name: str) -> Callable:
        def hook(module: nn.Module, args: tuple) -> None:
            self._fwd_start[name] = self.now()
            x = args[0] if args else None
            if isinstance(x, Tensor) and x.requires_grad:  # its backward ends at its input
                x.register_hook(lambda g: self._close(name))
            else:
                self._bwd_open[name] = True  # ... or at the end of backward()
        return hook

    def _post(self, name: str) -> Callable:
        def hook(module: nn.Module, args: tuple, out: Any) -> None:
            self.seconds[name] += self.now() - self._fwd_start.pop(name)
            # A tensor, a tuple (our ViT) or a dict-like ModelOutput (transformers' encoder).
            outs = out.values() if isinstance(out, dict) else (
                out if isinstance(out, tuple | list) else (out,))
            for o in outs:
                if isinstance(o, Tensor) and o.requires_grad:
                    o.register_hook(lambda g: self._open(name))
        return hook

    def _open(self, name: str) -> None:
        self._bwd_start.setdefault(name, self.now())

    def _close(self, name: str) -> None:
        if name in self._bwd_start:
            self.seconds[name] += self.now() - self._bwd_start.pop(name)

    def backward_done(self) -> None:
        """Close every part whose backward runs to the end (an input that needs no grad)."""
        for name in list(self._bwd_start):
            if self._bwd_open.pop(name, False):
                self._close(name)
        self._bwd_start.clear()

    def remove(self) -> None:
        for h in self._handles:
            h.remove()


# ------------------------------------------------------------------------------------------------
# Contenders


@dataclass
class EpochContender:
    """A model, its optimizer and loss, its own DataLoader, and the modules timed as parts."""

    name: str
    model: nn.Module
    optimizer: torch.optim.Optimizer
    loss: Callable[[nn.Module, Batch], Tensor]
    loader: DataLoader
    parts: dict[str, nn.Module]
    autocast: Callable[[], AbstractContextManager] = nullcontext
    one_time_s: dict[str, float] = field(default_factory=dict)
    samples: int = 0
    steps: int = 0
    text_len: int = 0  # summed over timed steps, for the FLOP count
    targets: int = 0
    photos: int = 0  # image tower inputs (the obvious pipeline: one per caption)
    seconds: float = 0.0
    by_part: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    _batches: Iterator[Batch] | None = field(default=None, repr=False)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def next_batch(self) -> Batch:
        if self._batches is None:
            self._batches = iter(self.loader)
        try:
            batch = next(self._batches)
        except StopIteration:  # a new epoch
            self._batches = iter(self.loader)
            batch = next(self._batches)
        return {k: v.to(self.device, non_blocking=True) for k, v in batch.items()
                if isinstance(v, Tensor)}

    def run(self, steps: int, timed: bool = True, breakdown: bool = True) -> None:
        """``steps`` training steps; when ``timed`` their samples, seconds and parts count.
        ``breakdown`` times the parts with hooks (eager models only)."""
        clock = PartClock(self.parts, self.device) if breakdown and self.parts else None
        device = self.device
        try:
            for _ in range(steps):
                t0 = now(device)
                batch = self.next_batch()
                t1 = now(device)
                with self.autocast():
                    loss = self.loss(self.model, batch)
                loss.backward()
                if clock:
                    clock.backward_done()
                t2 = now(device)
                self.optimizer.step()
                self.optimizer.zero_grad(set_to_none=True)
                t3 = now(device)
                if timed:
                    self.steps += 1
                    self.samples += len(batch["input_ids"])
                    self.text_len += batch["input_ids"].shape[1]
                    self.targets += int((batch["labels"] != IGNORE_INDEX).sum())
                    self.photos += len(batch.get(FEATURES_KEY, batch.get("images")))
                    self.seconds += t3 - t0
                    for part, s in (("data", t1 - t0), ("model", t2 - t1),
                                    ("optimizer", t3 - t2)):
                        self.by_part[part] += s
        finally:
            if clock:
                if timed:
                    for name, s in clock.seconds.items():
                        self.by_part[name] += s
                clock.remove()

    def figures(self) -> dict[str, Any]:
        parts = dict(self.by_part)
        model = parts.pop("model", 0.0)
        named = {p: round(parts[p], 2) for p in PARTS if p in parts}
        inside = [p for p in ("image_tower", "text_tower", "head") if p in parts]
        if inside:
            named["other"] = round(model - sum(parts[p] for p in inside), 2)
        else:
            named["model"] = round(model, 2)
        steps = max(self.steps, 1)
        return {"samples": self.samples, "seconds": round(self.seconds, 2),
                "samples_per_s": round(self.samples / max(self.seconds, 1e-9), 3),
                "mean_text_len": round(self.text_len / steps, 1),
                "mean_targets": round(self.targets / steps, 1),
                "mean_photos": round(self.photos / steps, 1),
                "seconds_by_part": named, "one_time_s": self.one_time_s}


def _loader(dataset: Dataset, batch_size: int, workers: int, collate: Callable) -> DataLoader:
    return DataLoader(dataset, batch_size=batch_size, shuffle=True, num_workers=workers,
                      collate_fn=collate, persistent_workers=workers > 0,
                      pin_memory=torch.cuda.is_available())


def obvious(config: VitBertConfig, root: Path, tokenizer: Any, batch_size: int, workers: int,
            device: torch.device) -> EpochContender:
    """timm + transformers over JPEGs decoded every time, padded to the maximum length."""
    torch.manual_seed(0)
    model = ReferenceModel(config).to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
    data = JpegCaptionDataset(root, tokenizer, config.image.image_size, config.text.max_len)
    loader = _loader(data, batch_size, workers, JpegCollator(tokenizer))
    # ReferenceModel calls vit.forward_features, not vit(): the tower is timed from its patch
    # embedding's input to its final norm's output.
    parts = {"image_tower": Span(model.vit.patch_embed, model.vit.norm),
             "text_tower": model.bert.bert.encoder, "head": model.bert.cls}
    return EpochContender("obvious", model, optimizer, reference_loss, loader, parts)


def ours(config: VitBertConfig, datamodule: Any, device: torch.device, frozen: bool = False
         ) -> EpochContender:
    """Our model over the data module's loader; ``frozen``: the tower's output from the feature
    cache (built here, its time reported as a one-time cost), which the data module then serves
    to every training loader of its own (give this contender a data module of its own)."""
    from vitbert.lit.frozen import build_image_features

    torch.manual_seed(0)
    model = build_network(config).to(device).train()
    one_time: dict[str, float] = {}
    if frozen:
        model.image_tower.requires_grad_(False)
        t0 = time.perf_counter()
        datamodule.use_image_features(build_image_features(model, datamodule.cache_dir))
        one_time["feature_cache_build"] = round(time.perf_counter() - t0, 2)
    loader = datamodule.train_dataloader()
    parts = {"image_tower": model.image_tower, "text_tower": model.text.encoder,
             "head": model.mlm_head}
    return EpochContender("frozen" if frozen else "ours", model, _our_optimizer(model),
                          vitbert_loss, loader, parts, one_time_s=one_time)


class Span:
    """Two modules of a sequence timed as one part: PartClock's pre-hook goes on ``first``, its
    post-hook on ``last``."""

    def __init__(self, first: nn.Module, last: nn.Module):
        self.first, self.last = first, last

    def register_forward_pre_hook(self, hook: Callable) -> Any:
        return self.first.register_forward_pre_hook(hook)

    def register_forward_hook(self, hook: Callable) -> Any:
        return self.last.register_forward_hook(hook)


# ------------------------------------------------------------------------------------------------
# The benchmark


def step_flops(name: str, config: VitBertConfig, batch: int, text_len: int, targets: int,
               photos: int) -> int:
    """Matmul FLOPs of one step (benchmarks.flops); ours runs the tower on the batch's
    ``photos`` (each once), a frozen tower forward only once per photo, in the cache build, so
    its step has no image-tower work at all."""
    if name.startswith("obvious"):
        return reference_step_flops(config, batch, text_len).step_total
    f = vitbert_step_flops(config, batch, text_len, targets, photos=photos)
    if name.startswith("frozen"):
        for part in ("patch_embed", "image_encoder"):
            f.forward.pop(part)
    return f.step_total


def epoch_benchmark(config: VitBertConfig | None = None, n_images: int = 96, batch_size: int = 8,
                    workers: int = 2, steps: int = 30, rounds: int = 5, warmup: int = 2,
                    frozen_steps_factor: int = 4, workdir: str | Path | None = None,
                    compile: bool = True) -> dict[str, Any]:
    """The three contenders (and on CUDA, bf16-mixed and compiled variants of ours) over the
    same generated Karpathy-layout photos; samples/s, ratios to the obvious pipeline, parts.

    ``steps`` timed steps per contender, in ``rounds`` alternating rounds; the frozen
    contender, much faster, runs ``frozen_steps_factor`` times as many so its time is measurable.
    """
    from benchmarks.cuda import bf16_autocast, device_peak_tflops
    from vitbert.data import CaptionedPhotos
    from vitbert.data.datamodule import CaptionDataModule

    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    reduced = config is None and not cuda
    if config is None:
        config = cpu_config() if reduced else config_net("flickr30k")
        config.image.pretrained = None  # no download; the speed does not depend on the weights
    config = dataclasses.replace(config, vocab_size=FLICKR_VOCAB)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(workdir or tmp)
        t0 = time.perf_counter()
        root = make_jpeg_folder(work / "flickr30k", n_images, layout="karpathy")
        source = CaptionedPhotos(root=str(root), cache_dir=str(work / "cache"),
                                 prepare_workers=workers)
        jpeg_s = time.perf_counter() - t0

        def data_module() -> CaptionDataModule:
            dm = CaptionDataModule(source=source, batch_size=batch_size, num_workers=workers,
                                   image_size=config.image.image_size,
                                   max_length=config.text.max_len, persistent_workers=workers > 0,
                                   mlm_probability=MLM_PROBABILITY, group_by_photo=True)
            dm.prepare_data()
            dm.setup("fit")
            return dm

        t0 = time.perf_counter()
        dm = data_module()
        cache_s = time.perf_counter() - t0
        frozen_dm = data_module()  # its training split switches to the feature cache for good
        tokenizer = dm.tokenizer
        config = dataclasses.replace(config, pad_token_id=dm.pad_token_id)
        contenders = [obvious(config, root, tokenizer, batch_size, workers, device),
                      ours(config, dm, device), ours(config, frozen_dm, device, frozen=True)]
        for c in contenders[1:]:
            c.one_time_s["image_cache_build"] = round(cache_s, 2)
        if cuda:  # the GPU runs bf16-mixed, eager and compiled
            for c in contenders:
                c.autocast = bf16_autocast
            if compile:
                for base in contenders[1:]:
                    frozen = base.name == "frozen"
                    c = ours(config, frozen_dm if frozen else dm, device, frozen=frozen)
                    c.name, c.model, c.autocast = f"{base.name}_compiled", torch.compile(
                        c.model), bf16_autocast
                    t = time.perf_counter()
                    c.run(warmup + 3, timed=False, breakdown=False)  # compiles each length seen
                    c.one_time_s["compile"] = round(time.perf_counter() - t, 1)
                    contenders.append(c)
        for c in contenders:
            c.run(warmup, timed=False, breakdown=not cuda)
        per_round = max(steps // rounds, 1)
        for r in range(rounds):
            for c in (contenders if r % 2 == 0 else contenders[::-1]):
                n = per_round * (frozen_steps_factor if c.name.startswith("frozen") else 1)
                c.run(n, breakdown=not cuda)
        figures = {c.name: c.figures() for c in contenders}
    base = figures["obvious"]["samples_per_s"]
    out: dict[str, Any] = {
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "precision": "bf16-mixed" if cuda else "fp32",
        "config": "flickr30k (ViT-B/16 + 6-block BERT-base)" if not reduced else
        "flickr30k at ViT-Ti/16 widths (192 wide, 3 heads; depths 12 + 6): ViT-B/16 is too "
        "slow for a CPU epoch",
        "work_shares_ours": work_shares(config),
        "work_shares_full_size": work_shares(config_net("flickr30k")),
        "photos": n_images, "jpeg_size": [500, 375], "batch_size": batch_size,
        "num_workers": workers, "vocab_size": config.vocab_size, "tokenizer_size": len(tokenizer),
        "steps_per_contender": {c.name: c.steps for c in contenders},
        "generate_jpegs_s": round(jpeg_s, 2),
    }
    for name, fig in figures.items():
        fig["ratio_to_obvious"] = round(fig["samples_per_s"] / base, 2)
        if cuda:
            peak = device_peak_tflops(out["device"])
            flops = step_flops(name, config, batch_size, round(fig["mean_text_len"]),
                               round(fig["mean_targets"]), round(fig["mean_photos"]))
            if peak:
                fig["mfu"] = round(flops / batch_size * fig["samples_per_s"] / (peak * 1e12), 4)
        out[name] = fig
    out["targets"] = {"ours_ge_1.5x": figures["ours"]["samples_per_s"] >= 1.5 * base,
                      "frozen_ge_10x": figures["frozen"]["samples_per_s"] >= 10 * base}
    return out
