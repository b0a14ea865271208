"""A pretrained BERT's training step in the project's text tower against transformers' own.

The Flickr8k BERT recipe fine-tunes all-MiniLM-L6-v2 (6 layers × 384, 30,522 pieces) inside the
project's encoder (:mod:`vitbert.io.bert`). This times one training step of that text tower
against ``transformers.BertForMaskedLM`` holding the same weights (ours written into it by
:func:`vitbert.io.bert.to_bert_names`), on the same masked captions: forward from the text
alone, cross-entropy at the hidden pieces in fp32, backward, AdamW. What differs is what each
computes: ours sends only the M hidden rows through the 30,522-wide vocabulary projection (the
sparse MLM head) and attends with ``scaled_dot_product_attention``; transformers' scores every
position of every caption, as its ``BertForMaskedLM`` does. Both under the recipe's precision
(bf16 autocast where the CPU has bf16, as ``bf16-mixed`` trains; fp32 otherwise) and the same
optimiser (``torch.optim.AdamW``), alternating rounds in one process
(:func:`benchmarks.step.alternate`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from benchmarks.step import Batch, Contender, alternate, batch_stats, synthetic_batches
from vitbert.data.masking import IGNORE_INDEX
from vitbert.io.bert import load_text_weights, text_tower_config, to_bert_names
from vitbert.lit.objectives import masked_lm_loss
from vitbert.models import TextTowerConfig, VitBert, VitBertConfig

# all-MiniLM-L6-v2's shape, for a run without its folder (random weights, the same step).
MINILM_SHAPE = TextTowerConfig(dim=384, depth=6, num_heads=12, mlp_ratio=4.0, norm_eps=1e-12,
                               max_len=40, dropout=0.1, layout="bert")
MINILM_VOCAB = 30522


def text_tower(folder: str | Path | None, seed: int = 0) -> tuple[VitBert, str]:
    """Our network with the recipe's text tower: all-MiniLM-L6-v2's weights from ``folder``, or
    its shape with random weights when there is none; and which it is."""
    torch.manual_seed(seed)
    if folder is not None and Path(folder, "config.json").is_file():
        text = text_tower_config(folder, TextTowerConfig(max_len=40, dropout=0.1))
        net = VitBert(VitBertConfig(text=text, vocab_size=MINILM_VOCAB))
        load_text_weights(net, folder)
        return net, str(folder)
    return VitBert(VitBertConfig(text=MINILM_SHAPE, vocab_size=MINILM_VOCAB)), "random weights"


def transformers_copy(net: VitBert) -> nn.Module:
    """``BertForMaskedLM`` holding ``net``'s text tower and MLM head, tensor for tensor."""
    from transformers import BertConfig, BertForMaskedLM

    text = net.config.text
    config = BertConfig(vocab_size=net.config.vocab_size, hidden_size=text.dim,
                        num_hidden_layers=text.depth, num_attention_heads=text.num_heads,
                        intermediate_size=round(text.dim * text.mlp_ratio),
                        max_position_embeddings=text.max_len, layer_norm_eps=text.norm_eps,
                        hidden_dropout_prob=text.dropout,
                        attention_probs_dropout_prob=text.dropout)
    model = BertForMaskedLM(config)
    missing, unexpected = model.load_state_dict(to_bert_names(net.state_dict(), text),
                                                strict=False)
    tied = ("cls.predictions.decoder.weight", "cls.predictions.decoder.bias")  # the words', bias
    left = [k for k in missing if k not in tied]
    if left or unexpected:
        raise RuntimeError(f"BertForMaskedLM did not take every tensor: {left} {unexpected}")
    return model


def ours_text_loss(net: nn.Module, batch: Batch) -> torch.Tensor:
    return masked_lm_loss(net, batch, None)  # text alone: no image features


def transformers_loss(model: nn.Module, batch: Batch) -> torch.Tensor:
    logits = model(input_ids=batch["input_ids"],
                   attention_mask=batch["attention_mask"].long()).logits  # (B, T, V)
    return F.cross_entropy(logits.float().flatten(0, 1), batch["labels"].flatten(),
                           ignore_index=IGNORE_INDEX)


def bert_benchmark(folder: str | Path | None, batch_size: int = 64, mean_len: int = 14,
                   rounds: int = 3, steps: int = 2) -> dict[str, Any]:
    """samples/s of a training step, ours and transformers', and their ratio (module doc)."""
    net, weights = text_tower(folder)
    reference = transformers_copy(net)
    net.train(), reference.train()
    batches = synthetic_batches(net.config, batch_size, n_batches=4, mean_len=mean_len)
    bf16 = torch.ops.mkldnn._is_mkldnn_bf16_supported()

    def autocast():
        return torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16)

    contenders = [  # the same optimiser for both: the step differs by the model alone
        Contender("ours", net, torch.optim.AdamW(net.parameters(), lr=5e-5),
                  ours_text_loss, batches, autocast=autocast),
        Contender("transformers", reference, torch.optim.AdamW(reference.parameters(), lr=5e-5),
                  transformers_loss, batches, autocast=autocast),
    ]
    timed = alternate(contenders, warmup=1, rounds=rounds, steps=steps)
    stats = batch_stats(batches)
    return {"weights": weights, "precision": "bf16 autocast" if bf16 else "fp32",
            "batch_size": batch_size, "text_len": round(stats["text_len"], 1),
            "targets_per_batch": round(stats["targets"], 1),
            "ours_samples_per_s": round(timed["ours"], 1),
            "transformers_samples_per_s": round(timed["transformers"], 1),
            "ratio": round(timed["ours"] / timed["transformers"], 2),
            "rounds": timed["rounds"]}
