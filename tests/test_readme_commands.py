"""The README and docs/ stay true (issue 35): every ``python scripts/…``, ``make …`` and config-file
command in README.md and docs/*.md (fenced code blocks, and inline code that starts with one)
parses, with the command's own parser in-process (``scripts/train.py``: the LightningCLI parser,
built and never run; the other scripts: their
``build_parser()``; ``make``: ``make -n``), and
every file of the repository the pages name exists. Paths outside the repository (``../shared``,
``/data/flickr30k``), a user's files (``picture.png``) and what runs write (git-ignored:
``runs/``, ``data/shapes/``) are examples and skipped.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import io
import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest
from helpers import train_cli

from vitbert.cli import CONFIG_FLAGS, DEFAULT_CONFIG

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
# Pages that open issues are writing now: linked already, checked once they exist.
PLACEHOLDER = "placeholder"  # stands for CKPT, DIR, <name> and the like in a command

# The core redesign (issue 53) removed or moved what these name; the README and docs are rewritten
# after it. Until then each is listed here: a command with one of these flags is expected not to
# parse (strictly: once the page is rewritten the entry must go), and each file is checked to be
# still named and still missing, so the lists only shrink.

# ---------------------------------------------------------------------------- reading the pages

FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.M | re.S)
INLINE = re.compile(r"`([^`]+)`")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def split_page(text: str) -> tuple[list[str], str]:
    """The fenced code blocks' contents, and the prose with them blanked out."""
    blocks = [m.group(1) for m in FENCE.finditer(text)]
    return blocks, FENCE.sub("", text)


def commands(text: str) -> list[str]:
    """Every ``python scripts/…`` and ``make …`` command of a page: the lines of its code blocks
    (continuations joined, a ``$`` prompt, an environment prefix or ``nice`` dropped, comments
    cut) and its inline code that starts with one."""
    blocks, prose = split_page(text)
    lines = []
    for block in blocks:
        lines += block.replace("\\\n", " ").splitlines()
    lines += [" ".join(span.split()) for span in INLINE.findall(prose)
              if span.lstrip().startswith(("python scripts/", "make "))]
    found = []
    for line in lines:
        line = line.strip().removeprefix("$ ")
        if "python scripts/" in line:
            found.append(line[line.index("python scripts/"):])
        elif line.startswith("make "):
            found.append(line)
    return found


def arguments(command: str) -> list[str]:
    """The command's words, comments cut and placeholders (``CKPT``, ``<name>``) filled in."""
    words = shlex.split(command, comments=True)
    return [PLACEHOLDER if re.fullmatch(r"[A-Z][A-Z_]+", w) or "<" in w else w for w in words]


# ---------------------------------------------------------------------------- parsing a command

@functools.cache
def train_parser():
    return train_cli(["fit"]).parser


@functools.cache
def script_parser(path: str):
    """``scripts/<path>``'s ``build_parser()``, loaded once."""
    spec = importlib.util.spec_from_file_location(
        "readme_" + path.replace("/", "_").removesuffix(".py"), REPO / path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.build_parser()


def train_arguments(args: list[str]) -> list[str]:
    """What ``vitbert.cli.main`` hands LightningCLI: ``--debug`` dropped, the embedded default's
    config when none is given."""
    args = [a for a in args if a != "--debug"]
    if args and args[0] in {"fit", "validate", "test", "predict"} and not any(
            a.split("=")[0] in CONFIG_FLAGS for a in args):
        args[1:1] = ["--config", str(DEFAULT_CONFIG)]
    return args


def command_problem(command: str) -> str | None:
    """Why ``command`` would not parse, or None when it does."""
    words = arguments(command)
    if words[0] == "make":
        run = subprocess.run(["make", "-n", *words[1:]], cwd=REPO, capture_output=True,
                             text=True)
        return None if run.returncode == 0 else run.stderr.strip() or run.stdout.strip()
    script = words[1]
    if not (REPO / script).is_file():
        return f"{script}: no such script"
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()), \
                contextlib.chdir(REPO):  # configs/… as the pages give them, from the root
            if script == "scripts/train.py":
                train_parser().parse_args(train_arguments(words[2:]))
            else:
                script_parser(script).parse_args(words[2:])
    except SystemExit as exited:
        if exited.code:  # the parser's own "error: ..." lines, without the usage before them
            said = err.getvalue().strip()
            return "\n".join(line for line in said.splitlines() if "error:" in line) or said \
                or f"exit status {exited.code}"
    return None


# ---------------------------------------------------------------------------- naming a file

def top_level() -> set[str]:
    return {p.name for p in REPO.iterdir() if p.name != ".git"}


SUBPACKAGES = {p.name for p in (REPO / "src" / "vitbert").iterdir() if p.is_dir()} - {
    "__pycache__"}
PATH_WORD = re.compile(r"(?<![\w.~/-])([A-Za-z_][\w.-]*(?:/[\w.*<>-]+)*/[\w.*<>-]*)")


@functools.cache
def ignored(path: str) -> bool:
    """Whether git ignores ``path`` (what runs write: checkpoints, generated data, logs)."""
    run = subprocess.run(["git", "check-ignore", "-q", "--no-index", path], cwd=REPO)
    return run.returncode == 0


def repository_file(word: str) -> Path | None:
    """Where in the repository ``word`` points, or None for an example outside it, a user's own
    file, a placeholder or what a run writes."""
    word = word.rstrip(".,;:)")
    if any(c in word for c in "<>*{}") or word.startswith(("../", "/", "~")):
        return None
    head = word.split("/")[0]
    if head == "vitbert":
        return REPO / "src" / word
    if head in SUBPACKAGES and (word.endswith(".py") or head not in top_level()):
        return REPO / "src" / "vitbert" / word  # lit/module.py, data/shapes.py, nn/
    if head in top_level() and not ignored(word):
        return REPO / word
    return None


def named_files(page: Path) -> list[str]:
    """Repository paths the page names (in prose, code and commands), as the page gives them."""
    text = page.read_text()
    names = [w for w in PATH_WORD.findall(LINK.sub(" ", text)) if repository_file(w)]
    for target in LINK.findall(text):
        target = target.split("#")[0]
        if target and not target.startswith(("http://", "https://", "mailto:")):
            names.append(os.path.relpath((page.parent / target).resolve(), REPO))
    return names


def missing_files(page: Path) -> list[str]:
    missing = []
    for name in named_files(page):
        path = repository_file(name) or REPO / name
        if not path.exists():
            missing.append(name)
    return missing


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def missing_anchors(page: Path) -> list[str]:
    """Links ``page.md#anchor`` (or ``#anchor``) whose page has no such heading."""
    missing = []
    for target in LINK.findall(page.read_text()):
        if "#" not in target or target.startswith("http"):
            continue
        file, anchor = target.split("#", 1)
        linked = (page.parent / file).resolve() if file else page
        _, prose = split_page(linked.read_text())
        anchors = {slug(h) for h in re.findall(r"^#+ (.*)$", prose, re.M)}
        if anchor not in anchors:
            missing.append(target)
    return missing


# ---------------------------------------------------------------------------- the tests

ALL = [(page, command) for page in PAGES for command in commands(page.read_text())]


def test_the_pages_hold_the_commands_they_should():
    found = {command.split(" #")[0].strip() for _, command in ALL}
    for expected in ("make train", "make test", "python scripts/train.py fit",
                     "python scripts/train.py fit --config configs/flickr30k.yaml "
                     "--data.source.init_args.root /data/flickr30k"):
        assert expected in found
    scripts = {arguments(c)[1] for _, c in ALL if c.startswith("python")}
    assert scripts >= {"scripts/train.py", "scripts/predict.py", "scripts/caption.py",
                       "scripts/demo.py", "scripts/export.py", "scripts/analyze.py",
                       "scripts/prepare_data.py", "scripts/bench.py", "scripts/retrieve.py",
                       "scripts/experiments/position.py"}


@pytest.mark.parametrize(("page", "command"), ALL,
                         ids=[f"{p.name}:{c[:70]}" for p, c in ALL])
def test_every_command_parses(page, command):
    assert command_problem(command) is None, f"{page.name}: {command}\n{command_problem(command)}"


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_every_repository_file_named_exists(page):
    assert missing_files(page) == []


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_every_link_to_a_heading_finds_it(page):
    assert missing_anchors(page) == []


def test_the_readme_is_at_most_300_lines():
    assert len((REPO / "README.md").read_text().splitlines()) <= 300


# The checker itself: it must fail on what is wrong, or the tests above prove nothing.

@pytest.mark.parametrize(("command", "says"), [
    ("python scripts/train.py fit --model.no_such_flag 1", "no_such_flag"),
    ("python scripts/train.py fit --config configs/flickr30k.yaml --trainer.devcies 8",
     "devcies"),
    ("python scripts/train.py fitt", "fitt"),
    ("python scripts/export.py --ckpt runs/latest/checkpoints/last.ckpt --out x/ --no-such-flag",
     "--no-such-flag"),
    ("python scripts/predict.py --image a.png --text 'a [MASK]'", "--ckpt"),
    ("python scripts/experiments/heads.py --epochs two", "--epochs"),
    ("python scripts/no_such_script.py --ckpt CKPT", "no such script"),
    ("make no-such-target", "no-such-target"),
])
def test_the_checker_refuses_a_wrong_command(command, says):
    problem = command_problem(command)
    assert problem is not None and says in problem


def test_a_readme_with_a_flag_that_does_not_exist_fails(tmp_path):
    """A scratch copy of the README whose first Flickr30k command gains a flag: caught."""
    text = (REPO / "README.md").read_text()
    good = "python scripts/train.py fit --config configs/flickr30k.yaml"
    assert good in text
    bad = text.replace(good, good + " --model.no_such_flag 1", 1)
    problems = [c for c in commands(bad) if command_problem(c) is not None]
    assert len(problems) == 1 and "--model.no_such_flag 1" in problems[0]


def test_the_checker_finds_a_missing_file_and_skips_examples(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("Run `python scripts/train.py fit --config configs/no_such.yaml`; the owner\n"
                    "is `lit/no_such.py`, see [the page](no_such_page.md). Examples, skipped:\n"
                    "`../shared/data/flickr_dev`, `/data/flickr30k`, `picture.png`,\n"
                    "`runs/latest/checkpoints/last.ckpt`, `outputs/experiments/<name>/`,\n"
                    "`lit/module.py`.\n")
    assert sorted(missing_files(page)) == sorted([
        "configs/no_such.yaml", "lit/no_such.py",
        os.path.relpath(tmp_path / "no_such_page.md", REPO)])
    assert command_problem(commands(page.read_text())[0]) is not None  # the config is missing


def test_the_checker_finds_a_link_to_a_missing_heading(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n## What happens when…\n\n[a](#what-happens-when) [b](#nowhere)\n")
    assert missing_anchors(page) == ["#nowhere"]
