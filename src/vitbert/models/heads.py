"""Heads of the training objectives beside masked-language modelling (word detection).

They are part of how the model is trained, not of the model that predicts words: a state dict
without them (a checkpoint trained without their objective) loads, strictly too, and the head
keeps its fresh weights. The objectives that use them are in :mod:`vitbert.lit.objectives`.
"""

from __future__ import annotations

from torch import Tensor, nn

from vitbert.models.vit import init_transformer_weights


def _keep_fresh_when_absent(module: nn.Module, state_dict: dict, prefix: str, *_) -> None:
    """Load pre-hook: a weight the state dict lacks is given the module's own, so it stays."""
    for name, value in module.state_dict().items():
        state_dict.setdefault(prefix + name, value)


class WordDetectorHead(nn.Module):
    """Which words the captions of a photo use, from the image tower's tokens alone:
    (P, N, D_img) → (P, V) logits over the vocabulary.

    Max over the tokens, then a linear classifier: a word is in the photo when some region shows
    it (multiple-instance learning, as the word detectors of Fang et al. 2015, "From captions to
    visual concepts and back", and the global max pooling of Oquab et al. 2015), so one token that
    sees a triangle is enough, wherever it is. With one pooled image token the max is that token.
    Trained by :func:`vitbert.lit.objectives.word_detection_loss`."""

    def __init__(self, dim: int, vocab_size: int) -> None:
        super().__init__()
        self.vocab_size = vocab_size
        self.classifier = nn.Linear(dim, vocab_size)
        init_transformer_weights(self)
        self.register_load_state_dict_pre_hook(_keep_fresh_when_absent)

    def forward(self, tokens: Tensor) -> Tensor:
        """(P, N, D_img) image tokens → (P, V) logits. A frozen tower's cached tokens are stored
        in fp16 (`vitbert.data.features`): they are read in the classifier's dtype."""
        pooled = tokens.amax(dim=1).to(self.classifier.weight.dtype)  # (P, D_img)
        return self.classifier(pooled)  # (P, V)
