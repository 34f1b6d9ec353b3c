"""Every Python code block of README.md runs, so an example cannot rot.

A block that defines ``main`` is a program: it runs as ``__main__``, on nx-27017 in
place of the MongoDB server it names. Any other block is a fragment of a session: it
runs (top-level ``await`` allowed) in a namespace holding what the text around it
assumes: ``engine``, a client on an in-memory store with the workflows the fragment
names registered, ``data``, and ``uri`` and ``db`` (nx-27017). A block the
README marks ``<!-- readme-test: skip, REASON -->`` on the line before it is not run;
the reason says why.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import io
import re
import runpy
import uuid
from pathlib import Path
from typing import Any

import pytest
from pymongo import AsyncMongoClient

from engine_core import Engine, WorkflowContext
from engine_core.memory import InMemoryStore
from tests.conftest import with_database

README = Path(__file__).resolve().parents[1] / "README.md"
SKIP = re.compile(r"<!-- readme-test: skip, (?P<reason>[^>]+?) -->")


def python_blocks() -> list[tuple[int, str, str | None]]:
    """(line, code, skip reason) of every ```python block."""
    lines = README.read_text().splitlines()
    blocks: list[tuple[int, str, str | None]] = []
    i = 0
    while i < len(lines):
        if lines[i].strip() == "```python":
            start = i + 1
            end = start
            while lines[end].strip() != "```":
                end += 1
            marker = SKIP.search(lines[i - 1]) if i > 0 else None
            reason = marker.group("reason") if marker else None
            blocks.append((start, "\n".join(lines[start:end]) + "\n", reason))
            i = end
        i += 1
    return blocks


BLOCKS = python_blocks()


def test_the_readme_has_python_blocks() -> None:
    assert len(BLOCKS) >= 5


def _fragment_namespace(code: str, uri: str) -> dict[str, Any]:
    engine = Engine(InMemoryStore())
    named = set(re.findall(r"\"([\w-]+)\"", code))
    for name in named:
        with contextlib.suppress(Exception):

            @engine.workflow(name)
            async def body(ctx: WorkflowContext, data: Any) -> Any:
                return data

    db = AsyncMongoClient(uri).get_default_database()
    return {"engine": engine, "data": {"n": 1}, "uri": uri, "db": db}


@pytest.mark.parametrize(
    ("line", "code", "skip"), BLOCKS, ids=[f"line-{line}" for line, _, _ in BLOCKS]
)
def test_a_readme_block_runs(
    line: int, code: str, skip: str | None, nx_uri: str, tmp_path: Path
) -> None:
    if skip is not None:
        pytest.skip(skip)
    uri = with_database(nx_uri, f"readme_{uuid.uuid4().hex[:10]}")
    if "def main(" in code:
        program = re.sub(r"mongodb://localhost:27017/\w+", uri, code)
        out = io.StringIO()
        # Run as a real ``__main__`` module (pydantic resolves a model's annotations in
        # the module the class says it belongs to).
        path = tmp_path / f"readme_{line}.py"
        path.write_text(program)
        with contextlib.redirect_stdout(out):
            runpy.run_path(str(path), run_name="__main__")
        assert out.getvalue().strip(), "the program printed nothing"
        return
    namespace = _fragment_namespace(code, uri)
    compiled = compile(code, f"README.md:{line}", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)

    async def run() -> None:
        result = eval(compiled, namespace)
        if asyncio.iscoroutine(result):
            await result

    asyncio.run(run())
