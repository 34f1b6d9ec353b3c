"""The repository explains itself: no file cites a design document kept outside it, the
README stays a short page that routes into docs/, and every module, name and file the
documentation cites exists (so a rename that forgets the docs fails here, not in a
reader's hands).

The site itself is built by ``mkdocs build --strict`` in ``.ci/run``, which fails on a
broken link or anchor; its examples run in ``tests/test_examples.py`` and its command
lines are checked in ``tests/test_cli_synopses.py``.
"""

from __future__ import annotations

import contextlib
import importlib
import re
from pathlib import Path

from tests.test_examples import PAGES

ROOT = Path(__file__).resolve().parents[1]

#: Folders that are not the repository's own text: tools, caches, built files.
NOT_OURS = {
    ".git",
    ".venv",
    ".cache",
    ".hypothesis",
    "site",
    "build",
    "dist",
    "node_modules",
    "out",
}
#: A citation of a design document: its name in capitals (as in "see the <name> 3d"),
#: or the words themselves.
CITATION = re.compile(r"\b" + "DES" + r"IGN\b|(?i:\bdesign[ -]doc)")
#: A Python name the docs cite in code: ``engine_core.x.y`` or ``pikku_mongo.x.y``.
DOTTED = re.compile(r"\b(?:engine_core|pikku_mongo)(?:\.[A-Za-z_]\w*)+")
#: A file of the repository the docs cite in code: a path with a folder and a suffix.
FILE = re.compile(r"`((?:[\w.-]+/)+[\w.-]+\.(?:py|sh|md|toml|yml|png))`")
README_MAX_LINES = 260


def _our_text_files() -> dict[Path, str]:
    """Every text file of the repository (not its tools, caches or built files)."""
    found = {}
    for path in sorted(ROOT.rglob("*")):
        parts = path.relative_to(ROOT).parts
        if not path.is_file() or any(
            p in NOT_OURS or p.endswith((".egg-info", "_cache")) or p == "__pycache__"
            for p in parts
        ):
            continue
        with contextlib.suppress(UnicodeDecodeError):  # images and other binary files
            found[path] = path.read_text()
    return found


def test_no_file_cites_a_design_document_outside_the_repository() -> None:
    files = _our_text_files()
    assert any(p.name == "store.py" for p in files)  # the walk found the code
    cited = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path, text in files.items()
        if path != Path(__file__).resolve()  # this file names what it looks for
        for number, line in enumerate(text.splitlines(), 1)
        if CITATION.search(line)
    ]
    assert not cited, "point to a page of docs/ instead:\n" + "\n".join(cited)


def test_the_citation_pattern_catches_what_it_should() -> None:
    assert CITATION.search("(" + "DES" + "IGN 3d)")
    assert CITATION.search("see the Design document, section 7")
    assert not CITATION.search("a design choice; designed for MongoDB")


def test_the_readme_is_short_and_keeps_the_test_command() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= README_MAX_LINES, "move the detail into docs/"
    assert "bash scripts/test.sh" in readme  # .ci/run runs the README's test command
    assert "mkdocs serve" in readme


def _loggers() -> set[str]:
    names = set()
    for package in ("engine_core", "pikku_mongo"):
        for path in (ROOT / package).rglob("*.py"):
            names.update(re.findall(r"getLogger\(\"([\w.]+)\"\)", path.read_text()))
    return names


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for name in parts[cut:]:
                target = getattr(target, name)
        except AttributeError:
            return False
        return True
    return False


def test_every_python_name_the_docs_cite_exists() -> None:
    loggers = _loggers()
    cited = {
        (path.relative_to(ROOT).as_posix(), name)
        for path in PAGES
        for code in re.findall(r"`([^`\n]+)`", path.read_text())
        for name in DOTTED.findall(code)
    }
    assert len(cited) >= 10
    missing = sorted(
        f"{page}: {name}" for page, name in cited if name not in loggers and not _resolves(name)
    )
    assert not missing, "\n".join(missing)


def test_every_file_the_docs_cite_exists() -> None:
    cited = {
        (path.relative_to(ROOT).as_posix(), name)
        for path in PAGES
        for name in FILE.findall(path.read_text())
    }
    assert len(cited) >= 10
    missing = sorted(
        f"{page}: {name}"
        for page, name in cited
        if not (ROOT / name).exists() and not name.startswith("benchmarks/out/")
    )
    assert not missing, "\n".join(missing)
