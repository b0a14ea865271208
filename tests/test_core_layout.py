"""The core's layout, read from its import graph (issue 53; replaces the old "no colour word in the
core" scan): what only the shapes data needs lives in ``vitbert.shapes`` and plugs into the core
through its general interfaces, so the core never imports it, nor anything else built on it
(``vitbert.run``, the APIs, the CLI); the core's packages form layers,
``nn < models < data < decoding < io < lit``, each importing only its own package and lower ones;
no import cycle runs among the core's modules; no function takes more than
:data:`MAX_PARAMETERS` parameters (constructors excepted: a config class takes its settings);
``lit/`` stays small enough to read (:data:`MAX_LIT_FILES`); and no file under ``src/`` reads or
writes a private (underscore) attribute of one of Lightning's objects (:data:`LIGHTNING_OBJECTS`):
those change in any Lightning release without notice, and the training side reaches Lightning
through its public hooks and properties (issue 62: a frozen tower's cache was once attached by
resetting ``trainer.fit_loop._combined_loader``).

The source is read as Python reads it (``ast``), every import statement counted wherever it
stands: at the top, inside a function (a lazy import is still an import), or under
``TYPE_CHECKING`` (an annotation still ties the modules). Each checker is also run on small
synthetic sources with a planted violation, so a checker that finds nothing is known to look.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "vitbert"
# The core's packages, lowest layer first: a module may import its own package and lower ones.
LAYERS = ("nn", "models", "data", "decoding", "io", "lit")
SHAPES = "vitbert.shapes"
SHAPES_NAMED = re.compile(r"\bvitbert[./]shapes\b")  # by dotted name or by folder
MAX_PARAMETERS = 8  # besides self / cls; __init__ excepted
MAX_LIT_FILES = 14
# How the source names Lightning's objects (the trainer, its loops, its strategy, ...): a private
# attribute read or written through one of these names, or through getattr / setattr, is
# Lightning's internals. Besides, the attributes a LightningModule keeps of Lightning's own
# (``self._trainer``), whatever the name of the object they are read from.
LIGHTNING_OBJECTS = frozenset({
    "trainer", "fit_loop", "epoch_loop", "val_loop", "validate_loop", "test_loop",
    "predict_loop", "loop", "loops", "strategy", "accelerator", "precision_plugin",
    "lightning_module", "pl_module", "checkpoint_connector", "combined_loader"})
LIGHTNING_PRIVATE = frozenset({"_trainer", "_fabric", "_combined_loader", "_results"})


def lightning_private_methods() -> frozenset[str]:
    """The private names Lightning's own classes define (LightningCLI's ``_parse_ckpt_path``,
    ...), torch's excepted (``nn.Module._apply`` is overridden by design): a method of ours by
    one of these names overrides Lightning's internals."""
    from lightning.pytorch import Callback, LightningDataModule, LightningModule
    from lightning.pytorch.cli import LightningCLI

    return frozenset(name for base in (LightningCLI, LightningModule, LightningDataModule, Callback)
                     for klass in base.__mro__ if klass.__module__.startswith("lightning")
                     for name in vars(klass) if _private(name))


# ----------------------------------------------------------------------------- reading the tree


@dataclass(frozen=True)
class Module:
    name: str  # dotted: vitbert.lit.module; a package by its own name (vitbert.lit)
    source: str
    is_package: bool = False  # an __init__.py

    @property
    def package(self) -> str | None:
        """The top-level package under vitbert (``lit`` for vitbert.lit.module), or None."""
        return package_of(self.name)


@dataclass(frozen=True)
class Import:
    line: int
    names: tuple[str, ...]  # every dotted name the statement names: "X" and, from X, "X.n"
    target: str  # the module it loads: X.n when that is a module of the tree, else X


def package_of(dotted: str) -> str | None:
    parts = dotted.split(".")
    return parts[1] if parts[0] == "vitbert" and len(parts) > 1 else None


def read_tree(root: Path = SRC) -> dict[str, Module]:
    """Every module under ``root`` (the ``vitbert`` package folder), by dotted name."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        is_package = parts[-1] == "__init__"
        name = ".".join(("vitbert", *(parts[:-1] if is_package else parts)))
        modules[name] = Module(name, path.read_text(), is_package)
    return modules


def tree_of(**sources: str) -> dict[str, Module]:
    """Synthetic modules: ``lit__module="..."`` is vitbert.lit.module; a name ending in
    ``__init`` is the package itself (``data__init`` is vitbert.data)."""
    modules = {}
    for key, source in sources.items():
        parts = key.split("__")
        is_package = parts[-1] == "init"
        name = ".".join(("vitbert", *(parts[:-1] if is_package else parts)))
        modules[name] = Module(name, source, is_package)
    return modules


def _absolute(module: Module, name: str | None, level: int) -> str:
    """The absolute dotted name of ``from <level dots><name> import ...`` in ``module``."""
    if not level:
        return name or ""
    package = module.name if module.is_package else module.name.rpartition(".")[0]
    parts = package.split(".")
    base = ".".join(parts[: len(parts) - (level - 1)])
    return f"{base}.{name}" if name else base


def imports(module: Module, known: set[str]) -> Iterator[Import]:
    """Every import statement of ``module``, wherever it stands (``ast.walk`` reaches function
    bodies and ``if TYPE_CHECKING:`` blocks alike)."""
    for node in ast.walk(ast.parse(module.source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(node.lineno, (alias.name,), alias.name)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(module, node.module, node.level)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                yield Import(node.lineno, (base, full), full if full in known else base)


def core(modules: dict[str, Module]) -> list[Module]:
    return [m for m in modules.values() if m.package in LAYERS]


# ----------------------------------------------------------------------------- the rules


def shapes_imports(modules: dict[str, Module]) -> list[str]:
    """(a) ``module:line name`` for each import of anything in vitbert.shapes by the core (the
    name as imported: ``from X import n`` is X.n)."""
    known = set(modules)
    return [f"{m.name}:{i.line} {i.names[-1]}" for m in core(modules) for i in imports(m, known)
            if any(name == SHAPES or name.startswith(SHAPES + ".") for name in i.names)]


def shapes_strings(modules: dict[str, Module]) -> list[str]:
    """(a'') ``module:line text`` for each string of the core that names the shapes package
    (``vitbert.shapes``, or its folder): a class path a core module would load by name, an entry
    point, a plug-in list, a docstring that sends the reader there; the core never names it."""
    found = []
    for m in core(modules):
        for node in ast.walk(ast.parse(m.source)):
            named = (SHAPES_NAMED.search(node.value)
                     if isinstance(node, ast.Constant) and isinstance(node.value, str) else None)
            if named:
                found.append(f"{m.name}:{node.lineno} {named[0]}")
    return found


def outside_imports(modules: dict[str, Module]) -> list[str]:
    """(a') ``module:line target`` for each import by the core of a vitbert package outside it
    (the run's files and console, the APIs, the CLI, the data sets' packages): those are built on
    the core, never under it."""
    known = set(modules)
    return [f"{m.name}:{i.line} {i.target}" for m in core(modules) for i in imports(m, known)
            if package_of(i.target) not in (None, *LAYERS)]


def upward_imports(modules: dict[str, Module]) -> list[str]:
    """(b) ``module:line target`` for each import of a higher layer of the core."""
    known = set(modules)
    found = []
    for m in core(modules):
        for i in imports(m, known):
            target = package_of(i.target)
            if target in LAYERS and LAYERS.index(target) > LAYERS.index(m.package):
                found.append(f"{m.name}:{i.line} {i.target} ({m.package} < {target})")
    return list(dict.fromkeys(found))  # two names from one module in one statement: once


def import_cycles(modules: dict[str, Module]) -> list[list[str]]:
    """(c) Each set of core modules that import one another round in a cycle (Tarjan's strongly
    connected components of more than one module, or a module importing itself), sorted. An
    edge goes to the module an import names, not to the parent packages Python runs first (else
    every package whose ``__init__`` gathers its modules would be a cycle)."""
    known = set(modules)
    nodes = {m.name for m in core(modules)}
    edges = {m.name: sorted({i.target for i in imports(m, known) if i.target in nodes})
             for m in core(modules)}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in edges[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in edges[node]:
                cycles.append(sorted(component))

    for node in sorted(nodes):
        if node not in index:
            visit(node)
    return sorted(cycles)


def _parameters(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    args = function.args
    names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
    names += [a.arg for a in (args.vararg, args.kwarg) if a is not None]
    if names and names[0] in ("self", "cls"):
        names = names[1:]
    return names


def long_signatures(modules: dict[str, Module]) -> list[str]:
    """(d) ``module:line Class.function (n parameters)`` for each function or method of the
    core taking more than :data:`MAX_PARAMETERS` besides self / cls (``__init__`` excepted)."""
    found = []

    def walk(node: ast.AST, qualname: str, module: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{qualname}.{child.name}" if qualname else child.name
                if not isinstance(child, ast.ClassDef) and child.name != "__init__":
                    count = len(_parameters(child))
                    if count > MAX_PARAMETERS:
                        found.append(f"{module}:{child.lineno} {name} ({count} parameters)")
                walk(child, name, module)
            else:
                walk(child, qualname, module)

    for m in core(modules):
        walk(ast.parse(m.source), "", m.name)
    return found


def _named(node: ast.AST) -> str | None:
    """The name an expression ends in: ``trainer`` for ``trainer`` and ``self.trainer``."""
    if isinstance(node, ast.Name):
        return node.id
    return node.attr if isinstance(node, ast.Attribute) else None


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _touches_lightning_privately(node: ast.AST, overridable: frozenset[str]) -> bool:
    """Whether ``node`` is ``<Lightning object>._name`` (or any ``x._trainer``), getattr /
    setattr / hasattr / delattr of such an attribute, ``super()._name``, or a method that
    overrides one of ``overridable`` (Lightning's private names)."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        return node.name in overridable
    if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Name) and node.value.func.id == "super"):
        return _private(node.attr)
    if isinstance(node, ast.Attribute):
        obj, name = node.value, node.attr
    elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
          and node.func.id in ("getattr", "setattr", "hasattr", "delattr")
          and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
          and isinstance(node.args[1].value, str)):
        obj, name = node.args[0], node.args[1].value
    else:
        return False
    return _private(name) and (_named(obj) in LIGHTNING_OBJECTS or name in LIGHTNING_PRIVATE)


def lightning_private_accesses(modules: dict[str, Module]) -> list[str]:
    """(f) ``module:line expression`` for each read or write, anywhere under src/, of a private
    attribute of a Lightning object: ``<object>._name`` where the object is named as one of
    :data:`LIGHTNING_OBJECTS` (``trainer.fit_loop._combined_loader = None``), ``getattr`` /
    ``setattr`` / ``hasattr`` / ``delattr`` of such an object with a private name, and the
    attributes of :data:`LIGHTNING_PRIVATE` on anything (``self._trainer``); and a private
    hook of a base class reached or replaced: ``super()._name``, or a method named as one of
    :func:`lightning_private_methods` (``def _parse_ckpt_path``)."""
    overridable = lightning_private_methods()
    found = []
    for m in modules.values():
        hits = [node for node in ast.walk(ast.parse(m.source))
                if _touches_lightning_privately(node, overridable)]
        hits.sort(key=lambda node: (node.lineno, node.col_offset))
        found += [f"{m.name}:{node.lineno} "
                  + (f"def {node.name}" if isinstance(node, ast.FunctionDef) else ast.unparse(node))
                  for node in hits]
    return found


def py_files(folder: Path) -> list[str]:
    """(e) The ``.py`` files of a folder, subfolders included."""
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*.py"))


# ----------------------------------------------------------------------------- the source


@pytest.fixture(scope="module")
def tree() -> dict[str, Module]:
    return read_tree()


def test_the_tree_holds_the_core_and_the_shapes_package(tree):
    assert {m.package for m in core(tree)} == set(LAYERS)
    assert {"vitbert.lit.module", "vitbert.models.multimodal", "vitbert.data.datamodule",
            "vitbert.decoding.generate", "vitbert.io.transfer", "vitbert.nn.attention",
            "vitbert.lit", "vitbert.data"} <= set(tree)
    assert "vitbert.shapes" in tree and tree["vitbert.shapes"].is_package
    assert len(core(tree)) > 40


def test_the_core_imports_nothing_of_the_shapes_data(tree):
    found = shapes_imports(tree)
    assert not found, "the core imports vitbert.shapes:\n  " + "\n  ".join(found)


def test_the_core_names_the_shapes_package_in_no_string(tree):
    found = shapes_strings(tree)
    assert not found, "the core names vitbert.shapes:\n  " + "\n  ".join(found)


def test_the_core_imports_nothing_built_on_it(tree):
    found = outside_imports(tree)
    assert not found, "the core imports a package outside it:\n  " + "\n  ".join(found)


def test_each_layer_imports_only_itself_and_lower_ones(tree):
    found = upward_imports(tree)
    assert not found, f"upward imports ({' < '.join(LAYERS)}):\n  " + "\n  ".join(found)


def test_no_import_cycle_in_the_core(tree):
    cycles = import_cycles(tree)
    assert not cycles, "import cycles:\n  " + "\n  ".join(" ↔ ".join(c) for c in cycles)


def test_no_function_of_the_core_takes_more_than_eight_parameters(tree):
    found = long_signatures(tree)
    assert not found, (f"more than {MAX_PARAMETERS} parameters besides self/cls:\n  "
                       + "\n  ".join(found))


def test_no_file_touches_a_private_attribute_of_lightnings_objects(tree):
    found = lightning_private_accesses(tree)
    assert not found, ("Lightning's private attributes, read or written (use its public hooks "
                       "and properties):\n  " + "\n  ".join(found))


def test_lit_stays_small():
    files = py_files(SRC / "lit")
    assert len(files) <= MAX_LIT_FILES, f"lit/ holds {len(files)} .py files: {files}"


# ----------------------------------------------------------------------------- the checkers


def test_the_shapes_check_finds_every_kind_of_import():
    tree = tree_of(
        shapes__init="",
        shapes__model="",
        lit__objectives="from vitbert.shapes.model import BindingReader\n",  # at the top
        lit__module="def f():\n    import vitbert.shapes.model\n",  # inside a function
        models__config=("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                        "    from vitbert.shapes import BindingLevers\n"),  # for annotations
        data__sources="from vitbert import shapes\n",  # the package, by name
        io__files="from ..shapes import model\n",  # relative
        nn__attention="import vitbert.shapesish\nfrom vitbert.models import shapes_free\n",
        cli="from vitbert.shapes import ShapesSource\n",  # not the core: allowed
    )
    assert shapes_imports(tree) == [
        "vitbert.lit.objectives:1 vitbert.shapes.model.BindingReader",
        "vitbert.lit.module:2 vitbert.shapes.model",
        "vitbert.models.config:3 vitbert.shapes.BindingLevers",
        "vitbert.data.sources:1 vitbert.shapes",
        "vitbert.io.files:1 vitbert.shapes.model",
    ]


def test_the_string_check_finds_the_shapes_package_named_in_any_string():
    tree = tree_of(
        io__files='UPGRADES = ("vitbert.shapes.model.read_levers",)\n',  # a path loaded by name
        models__config='"""The levers (:class:`vitbert.shapes.BindingLevers`)."""\n',
        data__sources=("import importlib.metadata\n"
                       "found = importlib.metadata.entry_points(name='vitbert.shapes')\n"),
        lit__module="PATH = 'src/vitbert/shapes/model.py'\n",  # by its folder
        nn__attention="NOTE = 'shapes of tensors; vitbert.shapesish is another name'\n",
        cli="EMBEDDED = 'vitbert.shapes.ShapesSource'\n",  # not the core: allowed
    )
    assert shapes_strings(tree) == [
        "vitbert.io.files:1 vitbert.shapes",
        "vitbert.models.config:1 vitbert.shapes",
        "vitbert.data.sources:2 vitbert.shapes",
        "vitbert.lit.module:1 vitbert/shapes",
    ]


def test_the_outside_check_finds_the_run_the_cli_and_the_shapes():
    tree = tree_of(
        run__init="", run__console="", shapes__init="",
        lit__module="from vitbert.run.console import LogProgress\nimport vitbert\n",
        io__load="def f():\n    from vitbert import cli\n",
        data__sources="from vitbert import shapes\nfrom vitbert.nn import x\n",
        cli="from vitbert.run import console\n",  # built on the core: allowed
    )
    assert outside_imports(tree) == ["vitbert.lit.module:1 vitbert.run.console",
                                     "vitbert.io.load:2 vitbert.cli",
                                     "vitbert.data.sources:1 vitbert.shapes"]


def test_the_layer_check_finds_an_upward_import_and_allows_the_rest():
    tree = tree_of(
        nn__init="", models__init="", data__init="", lit__init="", lit__module="",
        decoding__generate="",
        models__vit=("import torch\nfrom vitbert.nn import Block\nfrom . import config\n"
                     "def f():\n    from vitbert.lit.module import MaskedLMModule\n"),
        data__sources="from ..decoding import generate\nfrom .cache import x\n",
        lit__binding="from vitbert.data import x\nfrom vitbert.nn import y\nfrom . import module\n",
        io__load="from vitbert import cli\nfrom vitbert.lit.module import a, b\n",
    )
    assert upward_imports(tree) == [
        "vitbert.models.vit:5 vitbert.lit.module (models < lit)",
        "vitbert.data.sources:1 vitbert.decoding.generate (data < decoding)",
        "vitbert.io.load:2 vitbert.lit.module (io < lit)",
    ]


def test_the_cycle_check_finds_a_cycle_through_a_type_checking_import():
    tree = tree_of(
        lit__a="from vitbert.lit.b import B\n",
        lit__b=("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                "    from vitbert.lit.c import C\n"),
        lit__c="def f():\n    from .a import A\n",
        lit__d="from vitbert.lit import a\n",  # into the cycle, not part of it
        # A package's __init__ gathering its modules, which import each other: no cycle.
        data__init="from .sources import S\nfrom .cache import C\n",
        data__sources="from . import cache\n",
        data__cache="import numpy\n",
        nn__self="import vitbert.nn.self\n",
    )
    assert import_cycles(tree) == [["vitbert.lit.a", "vitbert.lit.b", "vitbert.lit.c"],
                                   ["vitbert.nn.self"]]
    del tree["vitbert.lit.b"]
    assert import_cycles(tree) == [["vitbert.nn.self"]]


def test_the_signature_check_counts_parameters_besides_self():
    nine = ", ".join(f"p{i}" for i in range(9))
    eight = ", ".join(f"p{i}" for i in range(8))
    tree = tree_of(lit__module=f"""
def nine({nine}): pass
def eight({eight}): pass
def starred(a, b, c, d, e, f, g, *args, **kwargs): pass
def keywords(a, *, b, c, d, e, f, g, h, i): pass
class Thing:
    def __init__(self, {nine}, more): pass
    def method(self, {eight}): pass
    @classmethod
    def build(cls, {eight}): pass
    def wide(self, {nine}): pass
    def outer(self):
        async def inner({nine}): pass
""", cli=f"def elsewhere({nine}): pass\n")  # not the core
    assert long_signatures(tree) == [
        "vitbert.lit.module:2 nine (9 parameters)",
        "vitbert.lit.module:4 starred (9 parameters)",
        "vitbert.lit.module:5 keywords (9 parameters)",
        "vitbert.lit.module:11 Thing.wide (9 parameters)",
        "vitbert.lit.module:13 Thing.outer.inner (9 parameters)",
    ]


def test_the_lightning_check_finds_private_reads_and_writes_and_allows_the_public():
    tree = tree_of(
        data__features=("def attach(trainer, datamodule):\n"
                        "    datamodule.use_image_features(None)\n"
                        "    trainer.fit_loop._combined_loader = None\n"),  # a write, via a loop
        run__checkpoints=("def on_train_start(self, trainer, pl_module):\n"
                          "    loaders = trainer.fit_loop._combined_loader\n"  # a read
                          "    return pl_module.trainer.strategy._launcher\n"),
        lit__module=("class M:\n    def setup(self, stage):\n"
                     "        return self.trainer.datamodule if self._trainer else None\n"),
        lit__frozen=("def f(trainer, loop):\n"
                     "    getattr(trainer, '_results', None)\n"
                     "    setattr(loop, '_restarting', True)\n"
                     "    return loop._data_fetcher\n"),
        run__console=("class CLI(LightningCLI):\n"
                      "    def _parse_ckpt_path(self):\n"  # a private hook replaced
                      "        return super()._prepare_subcommand_parser\n"  # ... or reached
                      "    def _apply(self, fn):\n"  # torch's, not Lightning's: allowed
                      "        return super().parse_arguments\n"),  # public: allowed
        cli=("def f(trainer, self, cache):\n"  # public, or not Lightning's: allowed
             "    trainer.strategy.barrier('features')\n"
             "    cache._features = None\n"
             "    self._batch = trainer.train_dataloader\n"
             "    getattr(trainer, 'datamodule', None)\n"
             "    return trainer.__class__, trainer.is_global_zero\n"),
    )
    assert lightning_private_accesses(tree) == [
        "vitbert.data.features:3 trainer.fit_loop._combined_loader",
        "vitbert.run.checkpoints:2 trainer.fit_loop._combined_loader",
        "vitbert.run.checkpoints:3 pl_module.trainer.strategy._launcher",
        "vitbert.lit.module:3 self._trainer",
        "vitbert.lit.frozen:2 getattr(trainer, '_results', None)",
        "vitbert.lit.frozen:3 setattr(loop, '_restarting', True)",
        "vitbert.lit.frozen:4 loop._data_fetcher",
        "vitbert.run.console:2 def _parse_ckpt_path",
        "vitbert.run.console:3 super()._prepare_subcommand_parser",
    ]


def test_the_file_count_includes_subfolders(tmp_path):
    (tmp_path / "sub").mkdir()
    for i in range(13):
        (tmp_path / f"m{i}.py").write_text("")
    (tmp_path / "notes.md").write_text("")
    (tmp_path / "sub" / "deep.py").write_text("")
    assert len(py_files(tmp_path)) == MAX_LIT_FILES
    (tmp_path / "sub" / "deeper.py").write_text("")
    assert len(py_files(tmp_path)) == MAX_LIT_FILES + 1 and "sub/deeper.py" in py_files(tmp_path)


def test_the_tree_reader_names_modules_as_python_does(tmp_path):
    (tmp_path / "lit").mkdir()
    (tmp_path / "__init__.py").write_text("")
    (tmp_path / "lit" / "__init__.py").write_text("from .module import M\n")
    (tmp_path / "lit" / "module.py").write_text("from ..models import VitBert\n")
    tree = read_tree(tmp_path)
    assert sorted(tree) == ["vitbert", "vitbert.lit", "vitbert.lit.module"]
    assert tree["vitbert.lit"].is_package and not tree["vitbert.lit.module"].is_package
    [imported] = imports(tree["vitbert.lit.module"], set(tree))
    assert imported.names == ("vitbert.models", "vitbert.models.VitBert")
    [gathered] = imports(tree["vitbert.lit"], set(tree))
    assert gathered.target == "vitbert.lit.module"
