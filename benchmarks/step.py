"""Training-step throughput: our model against the timm + transformers reference, and the levers.

Every figure is samples/s of a full step (forward, loss, backward, optimizer step, zero_grad) on
pre-collated batches, so the data pipeline is not in it. Contenders run in the same process, in
alternating rounds (the order flips every round), and each reports the median over rounds: on a
shared machine the load drifts, and alternation makes the drift hit every contender alike.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from benchmarks.flops import num_image_tokens, reference_step_flops, vitbert_step_flops
from benchmarks.reference import ReferenceModel
from vitbert.data.features import IMAGE_INDEX
from vitbert.data.masking import IGNORE_INDEX
from vitbert.lit.objectives import image_features, masked_lm_loss
from vitbert.lit.optim import OptimizerConfig, build_optimizer, parameter_groups
from vitbert.models import VitBertConfig, build_network

Batch = dict[str, Tensor]
DEFAULT_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "default.yaml"


# ------------------------------------------------------------------------------------------------
# Sizes and batches


def read_training_config(path: str | Path = DEFAULT_CONFIG) -> tuple[dict[str, Any], int]:
    """(``model.net`` as a dict, ``data.batch_size``) of a training YAML."""
    import yaml

    cfg = yaml.safe_load(Path(path).read_text())
    net = dict(cfg.get("model", {}).get("net", {}))
    batch_size = int(cfg.get("data", {}).get("batch_size", 64))
    return net, batch_size


def shapes_batches(config: VitBertConfig, batch_size: int, n_batches: int = 4, seed: int = 0,
                   workdir: str | Path | None = None) -> tuple[list[Batch], Any]:
    """Real batches of the embedded default (shapes pictures, its WordPiece, the MLM collator,
    per-batch padding) and the tokenizer; the vocabulary is the tokenizer's."""
    from vitbert.data.datamodule import CaptionDataModule
    from vitbert.shapes import ShapesSource

    with tempfile.TemporaryDirectory() as tmp:
        n = max(512, n_batches * batch_size)
        source = ShapesSource(root=str(workdir or tmp), num_train=n, num_val=64, num_test=64,
                              seed=seed)
        dm = CaptionDataModule(source=source, batch_size=batch_size, num_workers=0,
                               image_size=config.image.image_size,
                               max_length=config.text.max_len, persistent_workers=False)
        dm.setup("fit")
        torch.manual_seed(seed)
        it = iter(dm.train_dataloader())
        batches = [_step_keys(next(it)) for _ in range(n_batches)]
        return batches, dm.tokenizer


def synthetic_batches(config: VitBertConfig, batch_size: int, n_batches: int = 2,
                      mean_len: int = 16, seed: int = 0) -> list[Batch]:
    """Random ids with caption-like lengths (Flickr30k's are ~12–20 pieces), padded per batch,
    15% of the real pieces as targets; random uint8 pictures."""
    g = torch.Generator().manual_seed(seed)
    V, S = config.vocab_size, config.image.image_size
    batches = []
    for _ in range(n_batches):
        lengths = (torch.randn(batch_size, generator=g) * 4 + mean_len).round().long()
        lengths = lengths.clamp(4, config.text.max_len)
        T = int(lengths.max())
        keep = torch.arange(T)[None] < lengths[:, None]  # (B, T)
        ids = torch.randint(5, V, (batch_size, T), generator=g).masked_fill(~keep, 0)
        target = keep & (torch.rand(batch_size, T, generator=g) < 0.15)
        target[:, 1] = True  # at least one target per caption
        batches.append({
            "input_ids": ids, "attention_mask": keep,
            "labels": ids.masked_fill(~target, IGNORE_INDEX),
            "images": torch.randint(0, 256, (batch_size, 3, S, S), dtype=torch.uint8,
                                    generator=g),
        })
    return batches


def _step_keys(batch: dict[str, Tensor]) -> Batch:
    return {k: batch[k] for k in ("input_ids", "attention_mask", "labels", "images")}


def pad_batches(batches: list[Batch], length: int, pad_token_id: int = 0) -> list[Batch]:
    """Every caption padded to ``length`` (the fixed-length alternative to per-batch padding)."""
    out = []
    for b in batches:
        extra = length - b["input_ids"].shape[1]
        if extra < 0:
            raise ValueError(f"batch is longer ({b['input_ids'].shape[1]}) than {length}")
        out.append({**b,
                    "input_ids": F.pad(b["input_ids"], (0, extra), value=pad_token_id),
                    "attention_mask": F.pad(b["attention_mask"], (0, extra), value=False),
                    "labels": F.pad(b["labels"], (0, extra), value=IGNORE_INDEX)})
    return out


def batch_stats(batches: list[Batch]) -> dict[str, float]:
    return {"text_len": statistics.mean(b["input_ids"].shape[1] for b in batches),
            "targets": statistics.mean(int((b["labels"] != IGNORE_INDEX).sum()) for b in batches)}


def to_device(batches: list[Batch], device: torch.device | str) -> list[Batch]:
    return [{k: v.to(device) for k, v in b.items()} for b in batches]


# ------------------------------------------------------------------------------------------------
# Contenders


@dataclass
class Contender:
    """One way to run a training step: a model, its optimizer, its batches, its loss."""

    name: str
    model: nn.Module
    optimizer: torch.optim.Optimizer
    loss: Callable[[nn.Module, Batch], Tensor]
    batches: list[Batch]
    context: Callable[[], AbstractContextManager] = nullcontext
    autocast: Callable[[], AbstractContextManager] = nullcontext
    threads: int | None = None  # intra-op threads for this contender's steps (None: as set)
    _next: Iterator[int] = field(default=None, repr=False)  # type: ignore[assignment]

    def step(self) -> int:
        """One training step on the next batch; returns its batch size."""
        if self._next is None:
            self._next = _cycle(len(self.batches))
        batch = self.batches[next(self._next)]
        saved = torch.get_num_threads()
        if self.threads:
            torch.set_num_threads(self.threads)
        try:
            with self.context(), self.autocast():
                loss = self.loss(self.model, batch)
            with self.context():
                loss.backward()
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        finally:
            torch.set_num_threads(saved)
        return len(batch["input_ids"])


def _cycle(n: int) -> Iterator[int]:
    while True:
        yield from range(n)


def vitbert_loss(model: nn.Module, batch: Batch, full_logits: bool = False) -> Tensor:
    """The training loss (:func:`vitbert.lit.objectives.masked_lm_loss`), or, for the lever,
    logits at every word position and CE with ``ignore_index``."""
    features = image_features(model, batch)  # from the pixels, or a frozen tower's cache
    if not full_logits:
        return masked_lm_loss(model, batch, features)
    logits = model(batch["input_ids"], batch["attention_mask"], features,
                   batch.get(IMAGE_INDEX))
    return F.cross_entropy(logits.float().flatten(0, 1), batch["labels"].flatten(),
                           ignore_index=IGNORE_INDEX)


def reference_loss(model: nn.Module, batch: Batch) -> Tensor:
    return model(batch["input_ids"], batch["attention_mask"], batch["images"], batch["labels"])


def ours(config: VitBertConfig, batches: list[Batch], seed: int = 0, name: str = "ours",
         fused_optimizer: bool = True) -> Contender:
    """Our model with the training system's optimizer (fused AdamW, decay groups)."""
    torch.manual_seed(seed)
    model = build_network(config).to(batches[0]["input_ids"].device).train()
    return Contender(name, model, _our_optimizer(model, fused_optimizer), vitbert_loss, batches)


def _our_optimizer(model: nn.Module, fused: bool = True) -> torch.optim.Optimizer:
    if fused:
        return build_optimizer(model, OptimizerConfig())
    cfg = OptimizerConfig()
    return torch.optim.AdamW(parameter_groups(model, cfg), lr=cfg.lr, betas=cfg.betas,
                             eps=cfg.eps, foreach=True)


def reference(config: VitBertConfig, batches: list[Batch], seed: int = 0) -> Contender:
    """timm + transformers with ``torch.optim.AdamW``'s defaults (foreach on CPU and CUDA)."""
    torch.manual_seed(seed)
    model = ReferenceModel(config).to(batches[0]["input_ids"].device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
    return Contender("reference", model, optimizer, reference_loss, batches)


# ------------------------------------------------------------------------------------------------
# Timing


def synchronize(device: torch.device | str | None = None) -> None:
    if torch.cuda.is_available() and torch.device(device or "cpu").type == "cuda":
        torch.cuda.synchronize()


def alternate(contenders: list[Contender], warmup: int = 1, rounds: int = 3, steps: int = 1,
              probe: Callable[[], dict[str, float]] | None = None) -> dict[str, Any]:
    """samples/s per round for each contender, in alternating order; the median of each.

    ``probe`` (e.g. a matmul-peak measurement) runs once per round between the contenders, so
    that a figure meant to be compared against theirs is taken under the same load.
    """
    device = next(contenders[0].model.parameters()).device
    for c in contenders:
        for _ in range(warmup):
            c.step()
    synchronize(device)
    per_round: dict[str, list[float]] = {c.name: [] for c in contenders}
    probes: list[dict[str, float]] = []
    for r in range(rounds):
        order = contenders if r % 2 == 0 else contenders[::-1]
        for i, c in enumerate(order):
            if probe is not None and i == 1:
                probes.append(probe())
            t0, n = time.perf_counter(), 0
            for _ in range(steps):
                n += c.step()
            synchronize(device)
            per_round[c.name].append(n / (time.perf_counter() - t0))
    out: dict[str, Any] = {name: statistics.median(v) for name, v in per_round.items()}
    out["rounds"] = {name: [round(x, 2) for x in v] for name, v in per_round.items()}
    if probes:
        out["probe"] = {k: [p[k] for p in probes] for k in probes[0]}
    return out


def matmul_gflops(n: int = 2048, dtype: torch.dtype = torch.float32, device: str = "cpu",
                  reps: int = 3) -> float:
    """GFLOP/s of an n×n @ n×n matmul (2·n³ FLOPs), the best of ``reps`` after one warm-up."""
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    a @ b
    synchronize(device)
    best = 0.0
    for _ in range(reps):
        t0 = time.perf_counter()
        a @ b
        synchronize(device)
        best = max(best, 2 * n**3 / (time.perf_counter() - t0) / 1e9)
    return best


def gemm_gflops(m: int, k: int, n: int, reps: int = 5) -> float:
    """GFLOP/s of one (m × k) @ (k × n) matmul, best of ``reps``: what a given layer shape can
    reach at best on this machine (small widths stay far from the large-matmul peak)."""
    a, b = torch.randn(m, k), torch.randn(k, n)
    a @ b
    best = 0.0
    for _ in range(reps):
        t0 = time.perf_counter()
        a @ b
        best = max(best, 2 * m * k * n / (time.perf_counter() - t0) / 1e9)
    return best


# ------------------------------------------------------------------------------------------------
# The training-step comparison


def train_benchmark(config: VitBertConfig, batches: list[Batch], warmup: int = 1,
                    rounds: int = 3, steps: int = 1, peak_n: int = 2048) -> dict[str, Any]:
    """Ours vs the reference at ``config``'s sizes; FLOPs per step and the fraction of the
    matmul peak (measured once per round, between the contenders)."""
    contenders = [ours(config, batches), reference(config, batches)]
    stats = batch_stats(batches)
    B, T, M = len(batches[0]["input_ids"]), stats["text_len"], stats["targets"]
    # The MLP's first matmul at this size: what the model's own shapes can reach at best.
    mlp_shape = (B * (num_image_tokens(config) + round(T)), config.text.dim,
                 int(config.text.dim * config.text.mlp_ratio))

    def probe() -> dict[str, float]:
        return {"peak": matmul_gflops(peak_n, reps=2), "mlp_gemm": gemm_gflops(*mlp_shape)}

    res = alternate(contenders, warmup, rounds, steps, probe if peak_n else None)
    flops = vitbert_step_flops(config, B, round(T), round(M))
    ref_flops = reference_step_flops(config, B, round(T))
    ours_sps, ref_sps = res["ours"], res["reference"]
    out: dict[str, Any] = {
        "batch_size": B, "text_len": T, "targets_per_batch": M,
        "vocab_size": config.vocab_size,
        "params": sum(p.numel() for p in contenders[0].model.parameters()),
        "reference_params": sum(p.numel() for p in contenders[1].model.parameters()),
        "ours_samples_per_s": round(ours_sps, 2),
        "reference_samples_per_s": round(ref_sps, 2),
        "ratio": round(ours_sps / ref_sps, 3),
        "rounds": res["rounds"],
        "ours_gflop_per_step": round(flops.step_total / 1e9, 3),
        "reference_gflop_per_step": round(ref_flops.step_total / 1e9, 3),
        "forward_gflop_by_part": {k: round(v / 1e9, 3) for k, v in flops.forward.items()},
        "ours_gflops": round(flops.step_total / B * ours_sps / 1e9, 2),
        "reference_gflops": round(ref_flops.step_total / B * ref_sps / 1e9, 2),
    }
    if "probe" in res:
        peak = statistics.median(res["probe"]["peak"])
        out["peak_gflops"] = round(peak, 2)
        out["peak_gflops_samples"] = [round(x, 1) for x in res["probe"]["peak"]]
        out["fraction_of_peak"] = round(out["ours_gflops"] / peak, 3)
        out["mlp_gemm_shape"] = list(mlp_shape)
        out["mlp_gemm_gflops"] = round(statistics.median(res["probe"]["mlp_gemm"]), 2)
    return out


# ------------------------------------------------------------------------------------------------
# Levers: each measured before/after on our model at the same sizes


class SplitQKV(nn.Module):
    """Three separate q, k, v projections (what an unfused attention does), same output."""

    def __init__(self, fused: nn.Linear) -> None:
        super().__init__()
        D = fused.in_features
        self.q, self.k, self.v = (nn.Linear(D, D, bias=fused.bias is not None) for _ in range(3))
        with torch.no_grad():
            for i, lin in enumerate((self.q, self.k, self.v)):
                lin.weight.copy_(fused.weight[i * D:(i + 1) * D])
                if fused.bias is not None:
                    lin.bias.copy_(fused.bias[i * D:(i + 1) * D])

    def forward(self, x: Tensor) -> Tensor:
        return torch.cat((self.q(x), self.k(x), self.v(x)), dim=-1)


def split_qkv(model: nn.Module) -> nn.Module:
    from vitbert.nn import Attention

    for m in model.modules():
        if isinstance(m, Attention):
            m.qkv = SplitQKV(m.qkv)
    return model


def textbook_attention(q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None = None,
                       dropout_p: float = 0.0, scale: float | None = None,
                       is_causal: bool = False) -> Tensor:
    """softmax(Q Kᵀ · scale + M) V, materialising the (B, H, L, L) scores."""
    scores = (q @ k.transpose(-2, -1)) * (scale if scale is not None else q.shape[-1] ** -0.5)
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        else:
            scores = scores + attn_mask
    return F.dropout(scores.softmax(dim=-1), dropout_p) @ v


class _ManualF:
    """torch.nn.functional with SDPA replaced by :func:`textbook_attention`."""

    scaled_dot_product_attention = staticmethod(textbook_attention)

    def __getattr__(self, name: str) -> Any:
        return getattr(F, name)


@contextmanager
def manual_attention() -> Iterator[None]:
    """Inside: our attention layers (and the neighbour lookup's) compute attention by hand
    instead of calling SDPA."""
    from vitbert.nn import attention
    from vitbert.shapes import model as lookup

    modules = (attention, lookup)
    saved = [module.F for module in modules]
    for module in modules:
        module.F = _ManualF()
    try:
        yield
    finally:
        for module, functional in zip(modules, saved, strict=True):
            module.F = functional


LEVERS = ("mlm_head", "mlm_head_v8000", "padding", "attention", "qkv", "optimizer", "threads",
          "compile")


def lever_contenders(name: str, config: VitBertConfig, batches: list[Batch],
                     fixed_len: int) -> tuple[Contender, Contender, str, str]:
    """(before, after, what before is, what after is) for one lever; same initial weights."""
    if name == "mlm_head_v8000":  # the same batches, a Flickr30k-sized vocabulary
        config = dataclasses.replace(config, vocab_size=max(config.vocab_size, 8000))
    after = ours(config, batches, name="after")
    before_model = copy.deepcopy(after.model)
    before = Contender("before", before_model, _our_optimizer(before_model), vitbert_loss,
                       batches)
    if name in ("mlm_head", "mlm_head_v8000"):
        before.loss = lambda m, b: vitbert_loss(m, b, full_logits=True)
        return before, after, "logits at every word (B·T rows)", "logits at masked rows (M)"
    if name == "padding":
        before.batches = pad_batches(batches, fixed_len, config.pad_token_id)
        return before, after, f"padded to {fixed_len}", "padded per batch"
    if name == "attention":
        before.context = manual_attention
        return before, after, "textbook attention", "F.scaled_dot_product_attention"
    if name == "qkv":
        before.model = split_qkv(before_model)
        before.optimizer = _our_optimizer(before.model)
        return before, after, "separate q, k, v Linears", "one fused qkv Linear"
    if name == "optimizer":
        before.optimizer = _our_optimizer(before_model, fused=False)
        return before, after, "AdamW foreach", "AdamW fused"
    if name == "threads":
        cores = os.cpu_count() or 1
        before.threads, after.threads = cores, 1
        return before, after, f"{cores} intra-op threads (one per core)", "1 thread"
    if name == "compile":
        after.model = torch.compile(after.model)
        return before, after, "eager", "torch.compile (inductor)"
    raise ValueError(f"unknown lever {name!r}; choose from {LEVERS}")


def lever_benchmark(config: VitBertConfig, batches: list[Batch], levers: tuple[str, ...],
                    fixed_len: int, warmup: int = 1, rounds: int = 3,
                    steps: int = 1) -> dict[str, Any]:
    """Before/after samples/s of each lever, alternating rounds; gain = after / before."""
    out: dict[str, Any] = {}
    for name in levers:
        before, after, what_before, what_after = lever_contenders(name, config, batches,
                                                                  fixed_len)
        t0 = time.perf_counter()
        res = alternate([before, after], warmup, rounds, steps)
        out[name] = {"before": what_before, "after": what_after,
                     "before_samples_per_s": round(res["before"], 2),
                     "after_samples_per_s": round(res["after"], 2),
                     "gain": round(res["after"] / res["before"], 3),
                     "rounds": res["rounds"], "seconds": round(time.perf_counter() - t0, 1)}
    return out
