"""vitbert: a masked-language model over captions that looks at the photo.

``import vitbert`` stays light (no torch); the public objects load on first use:

    from vitbert import Captioner, FillMask, Retriever
"""

from __future__ import annotations

_LAZY = {"FillMask": "vitbert.predict", "Captioner": "vitbert.captioner",
         "Retriever": "vitbert.retriever"}


def __getattr__(name: str):
    # PEP 562: import the heavy module only when one of its names is asked for.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'vitbert' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])


__all__ = ["Captioner", "FillMask", "Retriever"]
