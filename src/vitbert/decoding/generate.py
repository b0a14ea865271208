"""Writing a caption: greedy and beam search under the seq2seq mask, and Mask-Predict.

Left to right (Unified VLP, Zhou et al. 2020). The model was trained to predict a [MASK] from the
image and the words to its left, so the next word of ``[CLS] w1 … wt`` is the prediction at a
[MASK] placed after wt. Nothing ever sees a later position under the seq2seq mask, so the keys and
values of the image tokens and of the words already written never change: :class:`_NextWord`
computes them once (a :class:`vitbert.nn.KVCache`) and feeds each step only the word just chosen
and the new [MASK], whose own keys are then dropped. ``use_cache=False`` re-reads the whole
sequence every step through ``VitBert.forward(mode="seq2seq")``: the same tokens, slower, and
the reference the cached path is tested against, and the path of a network whose ``encode`` is its
own (a subclass of ``VitBert`` built by a config's extension), which the cache would bypass.

Mask-Predict (Ghazvininejad et al. 2019) needs no generation training: write N [MASK]s between
[CLS] and [SEP], predict them all under the bidirectional mask, re-mask the least confident and
predict again, T times, for several lengths N; keep the length whose words are most probable.

Sampling draws each piece from the next-piece distribution (at a temperature), N captions per
image: the candidates :mod:`vitbert.decoding.rerank` chooses among.

Scores are log-probabilities: the sum over the written pieces (the closing [SEP] included) divided
by ``length ** length_penalty``; Mask-Predict's is the mean over its pieces.
Shapes: B images (or captions), K beams, R = B·K rows decoded together, t pieces written, V vocab.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from vitbert.data.masking import STOP_WORDS
from vitbert.models import VitBert
from vitbert.nn import AttentionContext, KVCache

NEG_INF = float("-inf")


@dataclass(frozen=True)
class CaptionTokens:
    """The ids decoding needs: the prompt, the end, the placeholder, and what is never written."""

    cls: int
    sep: int
    mask: int
    banned: tuple[int, ...]  # [PAD], [UNK], [CLS], [MASK]: never part of a caption
    # The function words' pieces (vitbert.data.masking.STOP_WORDS): not scored by the
    # pseudo-log-likelihood that reranking adds (the grammar's, not the photo's).
    function: tuple[int, ...] = ()

    @classmethod
    def from_tokenizer(cls, tokenizer) -> CaptionTokens:
        specials = set(tokenizer.all_special_ids) - {tokenizer.sep_token_id}
        vocab = tokenizer.get_vocab()
        function = sorted(vocab[word] for word in STOP_WORDS if word in vocab)
        return cls(tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.mask_token_id,
                   tuple(sorted(specials)), tuple(function))


@dataclass
class Generated:
    """One caption: its word pieces (no [CLS], no [SEP]), its score (see the module doc) and, once
    reranked (:mod:`vitbert.decoding.rerank`), its contrastive similarity to the photo and the
    pseudo-log-likelihood of its content pieces with the photo."""

    token_ids: list[int]
    score: float
    similarity: float | None = None
    likelihood: float | None = None


class _NextWord:
    """Log-probabilities of the next piece after each row's written pieces, with or without a cache.

    Rows may be reordered (beams that survive) with :meth:`select`; the pieces passed to
    :meth:`__call__` must extend those of the previous call by one piece per row. The image tower
    runs once, here, whichever path.
    """

    def __init__(self, model, tokens: CaptionTokens, images: Tensor | None,
                 use_cache: bool) -> None:
        self.model, self.tokens = model, tokens
        self.features = None if images is None else model.image_features(images)  # (R, N, D_img)
        use_cache = use_cache and type(model).encode is VitBert.encode  # else read it whole
        self.cache = KVCache(len(model.text.encoder.blocks)) if use_cache else None
        self.written = 0  # text pieces whose keys and values the cache holds
        if self.cache is not None and self.features is not None:
            # Image tokens see only image tokens: read them once, keep their keys and values.
            model.text.encoder(model.image_tokens(self.features), cache=self.cache)  # (R, N, D)
        self.num_rows = 1 if images is None else len(images)

    def select(self, index: Tensor) -> None:
        """Keep rows ``index`` (R',) in that order."""
        self.num_rows = len(index)
        if self.features is not None:
            self.features = self.features[index]
        if self.cache is not None:
            self.cache.select(index)

    def __call__(self, written: Tensor) -> Tensor:
        """written (R, t) pieces from [CLS] on → (R, V) log-probabilities of piece t + 1."""
        R, t = written.shape
        mask_column = written.new_full((R, 1), self.tokens.mask)
        if self.cache is None:
            ids = torch.cat((written, mask_column), dim=1)  # (R, t + 1)
            logits = self.model(ids, torch.ones_like(ids, dtype=torch.bool), self.features,
                                mode="seq2seq")[:, -1]  # (R, V)
            return logits.float().log_softmax(dim=-1)
        new = torch.cat((written[:, self.written:], mask_column), dim=1)  # (R, n): unread + [MASK]
        n, past = new.shape[1], len(self.cache)
        x = self.model.text.embeddings(new, start=self.written)  # (R, n, D)
        # The new pieces see everything cached and, among themselves, what is at or left of them.
        causal = torch.ones(n, n, dtype=torch.bool, device=new.device).tril()
        mask = torch.cat((causal.new_ones(n, past), causal), dim=1)[None, None]  # (1, 1, n, P+n)
        hidden = self.model.text.encoder(x, AttentionContext(mask), cache=self.cache)  # (R, n, D)
        self.cache.crop(past + n - 1)  # the [MASK] was read only to be predicted
        self.written = t
        hidden = hidden[:, -1]  # (R, D): the [MASK]'s row
        return self.model.mlm_head(hidden).float().log_softmax(dim=-1)  # (R, V)


def _restrict(log_probs: Tensor, tokens: CaptionTokens, step: int) -> Tensor:
    """No special piece but [SEP], and not [SEP] first: a caption has at least one piece."""
    log_probs[:, list(tokens.banned)] = NEG_INF
    if step == 0:
        log_probs[:, tokens.sep] = NEG_INF
    return log_probs


def _limit(model, max_new_tokens: int | None) -> int:
    """[CLS] + the pieces + the [MASK] after them must fit the text positions."""
    room = model.config.text.max_len - 1
    return room if max_new_tokens is None else max(1, min(max_new_tokens, room))


def _write(next_word: _NextWord, tokens: CaptionTokens, rows: int, steps: int,
           choose: Callable[[Tensor], Tensor], length_penalty: float = 1.0) -> list[Generated]:
    """Write ``rows`` captions one piece at a time, ``choose`` picking each row's next piece from
    its log-probabilities (R, V) → (R,), until every row has written [SEP] (finished rows idle
    on it) or ``steps`` run out."""
    device = next(next_word.model.parameters()).device
    written = torch.full((rows, 1), tokens.cls, dtype=torch.long, device=device)  # (R, 1)
    total = torch.zeros(rows, device=device)
    length = torch.zeros(rows, dtype=torch.long, device=device)
    done = torch.zeros(rows, dtype=torch.bool, device=device)
    for step in range(steps):
        log_probs = _restrict(next_word(written), tokens, step)  # (R, V)
        piece = choose(log_probs)  # (R,)
        total += log_probs.gather(1, piece[:, None]).squeeze(1).masked_fill(done, 0.0)
        length += (~done).long()
        piece = piece.masked_fill(done, tokens.sep)
        written = torch.cat((written, piece[:, None]), dim=1)
        done |= piece == tokens.sep
        if done.all():
            break
    results = []
    for row, score, n in zip(written[:, 1:].tolist(), total.tolist(), length.tolist(),
                             strict=True):
        pieces = row[:n]
        if pieces and pieces[-1] == tokens.sep:
            pieces = pieces[:-1]
        results.append(Generated(pieces, score / n**length_penalty))
    return results


@torch.no_grad()
def greedy(model, tokens: CaptionTokens, images: Tensor | None,
           max_new_tokens: int | None = None, length_penalty: float = 1.0,
           use_cache: bool = True) -> list[Generated]:
    """The most probable next piece at every step, until [SEP]; one caption per image.

    ``images`` uint8 (B, 3, S, S) on the model's device, or None to write one caption from no
    image (the text-only control).
    """
    next_word = _NextWord(model, tokens, images, use_cache)
    return _write(next_word, tokens, next_word.num_rows, _limit(model, max_new_tokens),
                  lambda log_probs: log_probs.max(dim=-1).indices, length_penalty)


@torch.no_grad()
def sample(model, tokens: CaptionTokens, images: Tensor | None, num_samples: int = 16,
           temperature: float = 1.0, max_new_tokens: int | None = None, seed: int = 0,
           use_cache: bool = True) -> list[list[Generated]]:
    """``num_samples`` captions per image, each piece drawn from the next-piece distribution at
    ``temperature`` (the same ``seed``, the same captions). Their scores are greedy's: the
    log-probability per piece, untempered. Arguments otherwise as :func:`greedy`'s."""
    if num_samples < 1 or temperature <= 0:
        raise ValueError(f"num_samples={num_samples}, temperature={temperature}: use at least "
                         "one sample and a temperature above 0")
    device = next(model.parameters()).device
    generator = torch.Generator(device=device).manual_seed(seed)

    def draw(log_probs: Tensor) -> Tensor:  # (R, V) → (R,)
        drawn = (log_probs / temperature).softmax(dim=-1)
        return torch.multinomial(drawn, 1, generator=generator).squeeze(1)

    next_word = _NextWord(model, tokens, images, use_cache)  # the tower runs once per image
    B, K = next_word.num_rows, num_samples
    next_word.select(torch.arange(B, device=device).repeat_interleave(K))  # R = B·K rows
    captions = _write(next_word, tokens, B * K, _limit(model, max_new_tokens), draw)
    return [captions[b * K:(b + 1) * K] for b in range(B)]


@torch.no_grad()
def beam_search(model, tokens: CaptionTokens, images: Tensor | None, num_beams: int = 3,
                max_new_tokens: int | None = None, length_penalty: float = 1.0,
                num_return_sequences: int = 1, use_cache: bool = True) -> list[list[Generated]]:
    """Keep the ``num_beams`` best partial captions per image; per image the best finished ones.

    A caption finishes when [SEP] is among the best ``num_beams`` next pieces of a beam; an image
    is done when it has ``num_beams`` finished captions (or at ``max_new_tokens``, when the
    unfinished beams count too). Returns per image ``num_return_sequences`` captions, best first.
    """
    if not 1 <= num_return_sequences <= num_beams:
        raise ValueError(f"num_return_sequences={num_return_sequences}: between 1 and "
                         f"num_beams={num_beams}")
    device = next(model.parameters()).device
    next_word = _NextWord(model, tokens, images, use_cache)
    B, K = next_word.num_rows, num_beams
    next_word.select(torch.arange(B, device=device).repeat_interleave(K))  # R = B·K rows
    written = torch.full((B * K, 1), tokens.cls, dtype=torch.long, device=device)  # (R, 1)
    # Only the first beam is live at the start, or all K would propose the same pieces.
    beam_scores = torch.full((B, K), NEG_INF, device=device)
    beam_scores[:, 0] = 0.0
    finished: list[list[Generated]] = [[] for _ in range(B)]
    done = [False] * B
    steps = _limit(model, max_new_tokens)
    for step in range(steps):
        log_probs = _restrict(next_word(written), tokens, step)  # (R, V)
        V = log_probs.shape[-1]
        candidates = (beam_scores.view(-1, 1) + log_probs).view(B, K * V)
        top_scores, top_index = candidates.topk(2 * K, dim=1)  # (B, 2K)
        sources, pieces, scores = [], [], []
        for b in range(B):
            kept: list[tuple[int, int, float]] = []  # (source row, piece, score)
            for rank, (score, index) in enumerate(zip(top_scores[b].tolist(),
                                                      top_index[b].tolist(), strict=True)):
                if done[b] or len(kept) == K:
                    break
                beam, piece = divmod(index, V)
                if piece == tokens.sep:
                    if rank < K and score > NEG_INF:
                        prefix = written[b * K + beam, 1:].tolist()
                        finished[b].append(Generated(prefix, score / (step + 1)**length_penalty))
                    continue
                kept.append((b * K + beam, piece, score))
            done[b] = done[b] or len(finished[b]) >= K
            if done[b] or not kept:  # idle rows keep shapes; their scores never matter again
                kept = [(b * K, tokens.sep, NEG_INF)] * K
            kept += [(kept[0][0], kept[0][1], NEG_INF)] * (K - len(kept))
            for source, piece, score in kept:
                sources.append(source)
                pieces.append(piece)
                scores.append(score)
        if all(done):
            break
        source = torch.tensor(sources, device=device)
        next_word.select(source)
        written = torch.cat((written[source], torch.tensor(pieces, device=device)[:, None]), 1)
        beam_scores = torch.tensor(scores, device=device).view(B, K)
    for b in range(B):  # out of room: unfinished beams count as they stand
        if not done[b]:
            for k in range(K):
                if beam_scores[b, k] > NEG_INF:
                    pieces_ = written[b * K + k, 1:].tolist()
                    score = float(beam_scores[b, k]) / len(pieces_)**length_penalty
                    finished[b].append(Generated(pieces_, score))
    return [sorted(found, key=lambda g: g.score, reverse=True)[:num_return_sequences]
            for found in finished]


@torch.no_grad()
def mask_predict(model, tokens: CaptionTokens, images: Tensor | None,
                 lengths: Sequence[int] = (8, 10, 12, 14), iterations: int = 6
                 ) -> list[Generated]:
    """Mask-Predict under the bidirectional (MLM) mask; the best length per image.

    For each N in ``lengths``: ``[CLS] [MASK]×N [SEP]``; predict every [MASK]; then ``iterations
    - 1`` times re-mask the N·(T - i)/T least confident pieces and predict those again. A piece's
    confidence is its probability when it was last predicted. No piece is written twice in a
    row.
    """
    features = None if images is None else model.image_features(images)  # the tower runs once
    B = 1 if images is None else len(images)
    device = next(model.parameters()).device
    room = model.config.text.max_len - 2
    best: list[Generated | None] = [None] * B
    for N in sorted({min(max(1, n), room) for n in lengths}):
        ids = torch.full((B, N + 2), tokens.mask, dtype=torch.long, device=device)  # (B, N + 2)
        ids[:, 0], ids[:, -1] = tokens.cls, tokens.sep
        confidence = torch.zeros(B, N, device=device)  # log-probabilities of the pieces
        keep = torch.ones_like(ids, dtype=torch.bool)
        for i in range(iterations):
            hidden = ids[:, 1:-1] == tokens.mask  # (B, N)
            logits = model(ids, keep, features)[:, 1:-1]  # (B, N, V)
            log_probs = logits.float().log_softmax(dim=-1)
            log_probs[..., [*tokens.banned, tokens.sep]] = NEG_INF
            # Left to right, each hidden piece is the likeliest that repeats neither the piece
            # before it nor a known one after it: an MLM unsure of a span gives every position
            # of it the same word ("a dog dog is").
            pieces = ids[:, 1:-1]  # (B, N), a view: filled in place
            for t in range(N):
                rows = hidden[:, t]  # (B,)
                if t > 0:
                    log_probs[rows, t, pieces[rows, t - 1]] = NEG_INF
                if t + 1 < N:
                    known = rows & ~hidden[:, t + 1]
                    log_probs[known, t, pieces[known, t + 1]] = NEG_INF
                confidence[rows, t], pieces[rows, t] = log_probs[rows, t].max(dim=-1)
            remask = N * (iterations - 1 - i) // iterations
            if remask == 0:
                break
            worst = confidence.topk(remask, dim=1, largest=False).indices  # (B, remask)
            ids[:, 1:-1] = ids[:, 1:-1].scatter(1, worst, tokens.mask)
        mean = confidence.mean(dim=1).tolist()
        for b, (row, score) in enumerate(zip(ids[:, 1:-1].tolist(), mean, strict=True)):
            if best[b] is None or score > best[b].score:
                best[b] = Generated(row, score)
    return best  # type: ignore[return-value]
