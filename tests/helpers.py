"""What several test folders share, imported as ``from helpers import ...``.

Pytest puts ``tests/`` on ``sys.path`` for ``tests/conftest.py`` (no ``__init__.py``: the default
"prepend" import mode), so every test module can import this one by its bare name.
"""

import importlib.util
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "scripts"


def load_script(name: str) -> ModuleType:
    """``scripts/<name>.py`` as a module, run afresh on every call.

    The scripts are entry points, not a package: loading the file is how a test calls their
    ``main(argv)`` in-process, and a fresh module keeps one test's monkeypatches from the next.
    """
    spec = importlib.util.spec_from_file_location(f"{name}_script", SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def train_cli(args: list[str]):
    """``scripts/train.py``'s LightningCLI with its real parsers built for ``args``, stopped
    before it parses, trains or loads anything: ``.parser`` (the main one), ``._parser(sub)``."""
    from vitbert.cli import VitBertCLI, _cli

    class ParsersBuiltError(Exception):
        def __init__(self, cli: VitBertCLI) -> None:
            self.cli = cli

    class ParsersOnly(VitBertCLI):
        def parse_arguments(self, parser, args) -> None:
            raise ParsersBuiltError(self)

    try:
        _cli(args, cli_class=ParsersOnly)
    except ParsersBuiltError as built:
        return built.cli
    raise AssertionError("the CLI ran instead of stopping at its parsers")
