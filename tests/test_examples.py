"""Every Python code block of README.md and of the documentation site (docs/) runs, so an
example cannot rot.

A block that defines ``main`` is a program: it runs as ``__main__``, on nx-27017 in
place of the MongoDB server it names, and must print something. Any other block is a
part of a session: it runs (top-level ``await`` allowed) in a namespace holding what
the text around it assumes: ``engine``, a client on an in-memory store (``store``) with
a workflow registered for every other name the block quotes, ``data``, and ``uri`` and
``db`` (nx-27017).

A block that defines ``test_`` functions is a pytest module (docs/guides/testing.md):
pytest runs it in a process of its own (``asyncio_mode = "auto"``), and every test in
it must pass.

A block that cannot run on its own (a part of a body whose steps stand for the reader's
own) is marked on the line before its fence, with the reason, which is required::

    <!-- example: fragment, REASON -->

No other marker exists: a comment that starts ``<!-- example`` and does not read so
fails the test, and so does one that marks no Python block.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import io
import os
import re
import runpy
import subprocess
import sys
import textwrap
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pymongo import AsyncMongoClient

from engine_core import Engine, WorkflowContext
from engine_core.memory import InMemoryStore
from tests.conftest import with_database

ROOT = Path(__file__).resolve().parents[1]
#: Every page whose examples run: the README and the documentation site.
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
MARKER = re.compile(r"<!--\s*example\b(?P<body>.*?)-->")
FRAGMENT = re.compile(r"^:\s*fragment,\s*(?P<reason>\S.*?)\s*$")
FENCE = re.compile(r"^(?P<indent>\s*)```(?P<lang>[\w+-]*)")
PYTEST_MODULE = re.compile(r"^(async )?def test_\w+\(", re.M)


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page."""

    page: str
    line: int  # of the first line of code, 1-based
    lang: str
    code: str
    marker: str | None  # the example marker on the line before the fence, if any

    @property
    def fragment(self) -> str | None:
        """The reason a fragment is not run, or None for a block that runs."""
        found = FRAGMENT.match(self.marker or "")
        return found.group("reason") if found else None

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def fenced_blocks(path: Path) -> list[Block]:
    """Every fenced code block of a Markdown page, indented ones (in lists) included."""
    lines = path.read_text().splitlines()
    page = path.relative_to(ROOT).as_posix()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if fence is None:
            i += 1
            continue
        end = i + 1
        while lines[end].strip() != "```":
            end += 1
        before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        marker = MARKER.search(before)
        code = textwrap.dedent("\n".join(lines[i + 1 : end])) + "\n"
        blocks.append(
            Block(page, i + 2, fence.group("lang"), code, marker.group("body") if marker else None)
        )
        i = end + 1
    return blocks


BLOCKS = [block for path in PAGES for block in fenced_blocks(path)]
PYTHON = [block for block in BLOCKS if block.lang == "python"]
RUN = [block for block in PYTHON if block.fragment is None]


def test_the_pages_have_python_examples() -> None:
    readme = [b for b in PYTHON if b.page == "README.md"]
    assert len(readme) >= 1
    assert len(PYTHON) >= 15


def test_every_marker_reads_fragment_with_a_reason_before_a_python_block() -> None:
    marked = {(b.page, b.line) for b in PYTHON if b.fragment is not None}
    problems = []
    for path in PAGES:
        page = path.relative_to(ROOT).as_posix()
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if "readme-test" in line:
                problems.append(f"{page}:{number}: the old marker; use <!-- example: ... -->")
            for marker in MARKER.finditer(line):
                if not FRAGMENT.match(marker.group("body")):
                    problems.append(f"{page}:{number}: not <!-- example: fragment, REASON -->")
    orphans = {
        (b.page, b.line)
        for b in BLOCKS
        if b.marker is not None and (b.lang != "python" or b.fragment is None)
    }
    problems += [f"{page}:{line}: a marker on a block that is not Python" for page, line in orphans]
    assert not problems, "\n".join(problems)
    # Every marker in the pages belongs to a Python block (none stray in the prose).
    total = sum(len(MARKER.findall(path.read_text())) for path in PAGES)
    assert total == len(marked)


def _session(code: str, uri: str) -> dict[str, Any]:
    """The namespace a session block runs in."""
    store = InMemoryStore()
    engine = Engine(store)
    own = set(re.findall(r"\.workflow\(\s*\"([\w-]+)\"", code))
    for name in set(re.findall(r"\"([\w-]+)\"", code)) - own:
        with contextlib.suppress(Exception):

            @engine.workflow(name)
            async def body(ctx: WorkflowContext, data: Any) -> Any:
                return data

    db: Any = AsyncMongoClient(uri).get_default_database()
    return {"engine": engine, "store": store, "data": {"n": 1}, "uri": uri, "db": db}


@pytest.mark.parametrize("block", RUN, ids=[block.id for block in RUN])
def test_an_example_runs(block: Block, nx_uri: str, tmp_path: Path) -> None:
    uri = with_database(nx_uri, f"example_{uuid.uuid4().hex[:10]}")
    if PYTEST_MODULE.search(block.code):
        _run_with_pytest(block, tmp_path)
        return
    if "def main(" in block.code:
        program = re.sub(r"mongodb://localhost:27017/\w+", uri, block.code)
        out = io.StringIO()
        # Run as a real ``__main__`` module (pydantic resolves a model's annotations in
        # the module the class says it belongs to).
        path = tmp_path / "example.py"
        path.write_text(program)
        with contextlib.redirect_stdout(out):
            runpy.run_path(str(path), run_name="__main__")
        assert out.getvalue().strip(), "the program printed nothing"
        return
    namespace = _session(block.code, uri)
    flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    compiled = compile(block.code, block.id, "exec", flags=flags)

    async def run() -> None:
        result = eval(compiled, namespace)
        if asyncio.iscoroutine(result):
            await result

    asyncio.run(run())


def _run_with_pytest(block: Block, tmp_path: Path) -> None:
    """Run ``block`` as a pytest module: each of its tests must pass."""
    path = tmp_path / "test_example.py"
    path.write_text(block.code)
    tests = len(PYTEST_MODULE.findall(block.code))
    # Not the suite's own configuration (its conftest, its xdist workers): the reader's.
    options = ["-q", "-p", "no:cacheprovider", "-p", "no:xdist", "-o", "asyncio_mode=auto"]
    alone = ["--rootdir", str(tmp_path), "-c", os.devnull]
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", str(path), *options, *alone],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0 and f"{tests} passed" in ran.stdout, ran.stdout + ran.stderr
