"""WordPiece tokenizer for captions: trained on the training captions, or loaded from disk.

The `tokenizers` library does the work (normalise, pre-tokenise, WordPiece, decode); this module
fixes the pipeline BERT uses, so that every tokenizer the project meets behaves the same way:

    "Two dogs playing."  --BertNormalizer(lowercase)-->  "two dogs playing."
                         --BertPreTokenizer-->           ["two", "dogs", "playing", "."]
                         --WordPiece-->                  ["two", "dogs", "play", "##ing", "."]
                         --post-processor-->             ["[CLS]", ..., "[SEP]"]

and wraps it in `transformers.PreTrainedTokenizerFast` (padding, truncation, batching, word ids).
The lit module stores the tokenizer inside checkpoints as the tokenizer.json string
(`tokenizer_to_json` / `tokenizer_from_json`), so a checkpoint is self-contained.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from tokenizers import (
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
    trainers,
)
from transformers import PreTrainedTokenizerFast

from .files import atomic_write
from .lock import build_lock

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
PAD, UNK, CLS, SEP, MASK = SPECIAL_TOKENS


def _set_pipeline(tok: Tokenizer) -> Tokenizer:
    """Give a WordPiece `Tokenizer` BERT's normaliser, pre-tokeniser, decoder and [CLS] x [SEP]."""
    tok.normalizer = normalizers.BertNormalizer(lowercase=True, clean_text=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    cls_id, sep_id = tok.token_to_id(CLS), tok.token_to_id(SEP)
    if cls_id is None or sep_id is None:
        raise ValueError(f"the vocabulary has no {CLS} or {SEP}; it needs all of {SPECIAL_TOKENS}")
    tok.post_processor = processors.TemplateProcessing(
        single=f"{CLS} $A {SEP}",
        pair=f"{CLS} $A {SEP} $B:1 {SEP}:1",
        special_tokens=[(CLS, cls_id), (SEP, sep_id)],
    )
    return tok


def _wrap(tok: Tokenizer, source: str = "tokenizer") -> PreTrainedTokenizerFast:
    """Wrap a `tokenizers.Tokenizer` as a `PreTrainedTokenizerFast`, special tokens named."""
    missing = [t for t in SPECIAL_TOKENS if tok.token_to_id(t) is None]
    if missing:
        raise ValueError(
            f"{source}: the vocabulary lacks the special tokens {missing}; a vitbert tokenizer"
            f" needs all of {SPECIAL_TOKENS} (see train_wordpiece)"
        )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token=UNK,
        pad_token=PAD,
        cls_token=CLS,
        sep_token=SEP,
        mask_token=MASK,
    )


def train_wordpiece(
    texts: Iterable[str], vocab_size: int = 8000, min_frequency: int = 2
) -> PreTrainedTokenizerFast:
    """Train a lower-casing WordPiece vocabulary on `texts`; the special tokens get ids 0..4.

    `vocab_size` is a ceiling: a small corpus (the shapes captions) gives a smaller vocabulary, and
    `len(tokenizer)` is the figure the model's embedding table must use.
    """
    tok = Tokenizer(models.WordPiece(unk_token=UNK, continuing_subword_prefix="##"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True, clean_text=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=SPECIAL_TOKENS,
        continuing_subword_prefix="##",
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return _wrap(_set_pipeline(tok), "trained tokenizer")


def load_tokenizer(path: str | Path) -> PreTrainedTokenizerFast:
    """Load a tokenizer.json file, a folder holding one, or a BERT vocab.txt (one piece a line)."""
    path = Path(path)
    if path.is_dir():
        if (path / "tokenizer.json").is_file():
            path = path / "tokenizer.json"
        elif (path / "vocab.txt").is_file():
            path = path / "vocab.txt"
        else:
            raise FileNotFoundError(
                f"{path}: no tokenizer.json or vocab.txt in this folder; pass the file itself, or "
                f"leave `tokenizer` unset to train one on the training captions"
            )
    if not path.is_file():
        raise FileNotFoundError(f"tokenizer file {path} does not exist")
    if path.suffix == ".json":
        tok = Tokenizer.from_file(str(path))
        # A released BERT's file may pad and cut every text to a fixed length (all-MiniLM-L6-v2:
        # 128); the collator pads each batch to its longest caption and cuts at max_length.
        tok.no_padding()
        tok.no_truncation()
        return _wrap(tok, str(path))
    # A vocab.txt: BERT's released vocabularies; pieces carry the "##" prefix.
    tok = Tokenizer(models.WordPiece.from_file(str(path), unk_token=UNK))
    return _wrap(_set_pipeline(tok), str(path))


def save_tokenizer(tok: PreTrainedTokenizerFast, path: str | Path) -> Path:
    """Write the tokenizer.json to `path` atomically (parallel ranks may race to write it)."""
    return atomic_write(path, tokenizer_to_json(tok))


def cached_wordpiece(texts: list[str], vocab_size: int, min_frequency: int,
                     path: str | Path) -> PreTrainedTokenizerFast:
    """The tokenizer at ``path``, trained on ``texts`` and saved there first if it is missing.
    One process trains it; others (DDP ranks) wait for the lock and load what it saved."""
    path = Path(path)
    if not path.is_file():
        with build_lock(path.parent):
            if not path.is_file():
                save_tokenizer(train_wordpiece(texts, vocab_size, min_frequency), path)
    return load_tokenizer(path)


def tokenizer_to_json(tok: PreTrainedTokenizerFast) -> str:
    """The tokenizer.json string: what checkpoints store."""
    return tok.backend_tokenizer.to_str()


def tokenizer_from_json(s: str) -> PreTrainedTokenizerFast:
    """Rebuild a tokenizer from the string `tokenizer_to_json` wrote."""
    return _wrap(Tokenizer.from_str(s), "tokenizer json string")

