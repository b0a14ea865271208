"""The core names no colour or shape: what the shapes data needs lives with the shapes data.

The model, the objectives, the decoder and the data path every source shares must work unchanged
on real captions, so no list of colour or shape words may steer them. In the core's code (docstrings
and comments may use such words as examples) no string literal holds a colour or shape word, and
no identifier holds "colour" or "color". The scan reads the code as Python does (``ast`` for the
string literals, ``tokenize`` for the names), so a comment or a docstring never counts.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "vitbert"
CORE = sorted([*(path for part in ("nn", "models", "lit", "decoding")
                 for path in (SRC / part).rglob("*.py")),
               *(SRC / "data" / f"{name}.py" for name in ("datamodule", "masking", "features"))])
# The shapes data's words, and the colours photos' captions name most.
_WORDS = """
    red green blue yellow purple orange black white pink brown grey gray cyan magenta violet
    circle circles square squares triangle triangles diamond diamonds cross crosses
"""
WORDS = frozenset(_WORDS.split())
NAME_PARTS = ("colour", "color")


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the string constants that stand alone as a statement: docstrings of modules,
    classes and functions, and the attribute docstrings under dataclass fields."""
    return {id(node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)}


def string_words(source: str) -> list[tuple[int, str]]:
    """(line, word) for every colour or shape word in a string literal of the code."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                and id(node) not in skip):
            found += [(node.lineno, word) for word in re.findall(r"[a-z]+", node.value.lower())
                      if word in WORDS]
    return found


def colour_names(source: str) -> list[tuple[int, str]]:
    """(line, name) for every identifier of the code that holds "colour" or "color"."""
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return [(token.start[0], token.string) for token in tokens
            if token.type == tokenize.NAME and any(p in token.string.lower() for p in NAME_PARTS)]


def test_the_core_is_what_the_rule_covers():
    names = {path.relative_to(SRC).as_posix() for path in CORE}
    assert {"lit/objectives.py", "models/multimodal.py", "decoding/generate.py",
            "nn/attention.py", "data/masking.py", "data/datamodule.py", "data/features.py"} <= names
    assert len(names) > 20


@pytest.mark.parametrize("path", CORE, ids=lambda path: path.relative_to(SRC).as_posix())
def test_no_colour_or_shape_word_in_the_cores_code(path: Path):
    source = path.read_text()
    assert not string_words(source), "a colour or shape word in a string literal"
    assert not colour_names(source), "an identifier naming a colour"


def test_the_scan_finds_what_it_must_and_skips_docstrings_and_comments():
    allowed = '''
"""A red circle, in the module's docstring."""
# a comment may say blue square
class Thing:
    """A green triangle in a class docstring."""
    size: int = 2
    """An attribute docstring: yellow cross."""
    def f(self, x):
        """A function docstring: purple diamond."""
        return x  # orange
'''
    assert string_words(allowed) == [] and colour_names(allowed) == []
    planted = '''
def f(x):
    """Fine."""
    words = ("a", "Red", f"the {x} Square")
    colour_ids = x
    return words, x.color, colour_ids
'''
    assert string_words(planted) == [(4, "red"), (4, "square")]
    assert [name for _, name in colour_names(planted)] == ["colour_ids", "color", "colour_ids"]
