"""The typed calls, checked by mypy itself: ``ctx.step`` checks the positional arguments
against the step callable and infers its result; so do ``dispatch`` and ``child`` given the
registered function, and ``returns=`` on them, ``wait_for_event`` and ``engine.result``."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

HEADER = """
from __future__ import annotations

from typing import Any

from engine_core import Engine, WorkflowContext
from engine_core.memory import InMemoryStore

engine = Engine(InMemoryStore())


async def charge(card: str, amount: int) -> dict[str, int]:
    return {"amount": amount}


def label(order: int, *, prefix: str = "#") -> str:
    return f"{prefix}{order}"


def needs_kw(order: int, note: str) -> float:
    return 1.0


@engine.step_function("send")
async def send(payload: str) -> bool:
    return True


@engine.workflow("child")
async def child(ctx: WorkflowContext, data: int) -> list[str]:
    return []
"""

CORRECT = """
@engine.workflow("order")
async def order(ctx: WorkflowContext, data: Any) -> None:
    reveal_type(await ctx.step("charge", charge, "card", 12, retries=2))  # L1
    reveal_type(await ctx.step("label", label, 7, prefix="n", timeout=5))  # L2
    reveal_type(await ctx.step("kw", needs_kw, 1, note="x"))  # L3
    reveal_type(await ctx.step("typed", label, 7, returns=int))  # L4
    reveal_type(await ctx.dispatch("send", send, "hello"))  # L5
    reveal_type(await ctx.dispatch("named", "send", "hello", returns=bool))  # L6
    reveal_type(await ctx.child("ship", child, 3))  # L7
    reveal_type(await ctx.child("ship2", "child", 3, returns=int))  # L8
    reveal_type(await ctx.wait_for_event("ok", returns=str))  # L9
    reveal_type(await engine.result("r", returns=float))  # L10
    for i in range(2):
        reveal_type(await ctx.step("bound", lambda i=i: i * 10, retries=1))  # L11
        reveal_type(await ctx.step("closure", lambda: i * 10))  # L12
"""

EXPECTED = {
    "L1": "dict[str, int]",
    "L2": "str",
    "L3": "float",
    "L4": "int",
    "L5": "bool",
    "L6": "bool",
    "L7": "list[str]",
    "L8": "int",
    "L9": "str | None",
    "L10": "float",
    "L11": "Any",  # a lambda with defaults is accepted, its result not inferred
    "L12": "int",
}

WRONG = """
@engine.workflow("order")
async def order(ctx: WorkflowContext, data: Any) -> None:
    await ctx.step("c", charge, 123)  # W1
    await ctx.step("c2", charge, "card", "12", retries=1)  # W2
    await ctx.step("c3", charge, "card")  # W3
    await ctx.dispatch("send", send, 5)  # W4
    await ctx.child("ship", child, "three")  # W5
    await ctx.step("c4", charge, retries=1)  # W6
"""


@pytest.fixture(scope="module")
def mypy_says(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """What mypy says about each sample, ``TAG severity: message`` per line: one run for
    both samples (a run checks engine_core from scratch: seconds of CPU)."""
    folder = tmp_path_factory.mktemp("typing")
    samples = {"correct": CORRECT, "wrong": WRONG}
    for name, body in samples.items():
        (folder / f"{name}.py").write_text(HEADER + body)
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental",
         *(str(folder / f"{name}.py") for name in samples)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )  # fmt: skip
    said: dict[str, list[str]] = {name: [] for name in samples}
    for line in done.stdout.splitlines():
        match = re.match(r".*\b(correct|wrong)\.py:(\d+): (\w+): (.*)", line)
        if match:
            lines = (HEADER + samples[match[1]]).splitlines()
            tag = re.search(r"# (\w+)$", lines[int(match[2]) - 1])
            said[match[1]].append(f"{tag[1] if tag else match[2]} {match[3]}: {match[4]}")
    return said


@pytest.mark.slow
def test_mypy_checks_step_arguments_and_infers_results(mypy_says: dict[str, list[str]]) -> None:
    found = mypy_says["correct"]
    revealed = {
        line.split()[0]: re.search(r'Revealed type is "(.*)"', line)[1]  # type: ignore[index]
        for line in found
        if "Revealed type" in line
    }
    assert revealed == EXPECTED
    assert [line for line in found if " error: " in line] == []


@pytest.mark.slow
def test_mypy_refuses_wrong_step_arguments(mypy_says: dict[str, list[str]]) -> None:
    found = mypy_says["wrong"]
    flagged = {line.split()[0] for line in found if " error: " in line}
    assert flagged == {"W1", "W2", "W3", "W4", "W5", "W6"}, found
