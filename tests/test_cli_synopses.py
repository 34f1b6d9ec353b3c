"""Every ``pikku-mongo`` command line the README and the documentation site show is one
the command accepts: each subcommand exists, each option it shows is in that
subcommand's ``--help``, each value it lists for an option with choices is one of them,
and it shows no more positional arguments than the command takes.

A command line is a line of a fenced block other than Python (``$ `` prompts and
environment assignments before the command allowed) that starts with ``pikku-mongo``;
indented lines after it that start with ``[`` continue it. Brackets mark what is
optional, ``a|b|c`` in an option's value lists choices (a value in capitals stands for
any value), ``a|b`` in a command's place
names several commands, and `` | `` between whole forms gives another form of the same
command (``schedules list | pause NAME``: the second form is ``schedules pause NAME``).
The help is the real one, from the installed ``pikku-mongo`` entry point.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from unittest import mock

import pytest

from tests.test_examples import BLOCKS, Block

PROMPT = re.compile(r"^\$\s+")
ENV = re.compile(r"""^(?:[A-Z_][A-Z0-9_]*=(?:\$\([^)]*\)|'[^']*'|"[^"]*"|\S+)\s+)+""")
#: A value that stands for any value (``--order O``, ``--app MODULE:ATTR``).
PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_:]*$")
OPTION_LINE = re.compile(r"^  (?:-\w, )?(?P<name>--[\w-]+)(?:[ =](?P<value>\S+))?")


@dataclass(frozen=True)
class Help:
    """What one command's ``--help`` says it takes."""

    options: dict[str, tuple[str, ...] | None] = field(default_factory=dict)  # value choices
    takes_value: frozenset[str] = frozenset()
    subcommands: tuple[str, ...] = ()
    positionals: int = 0


def _main() -> Callable[[list[str]], int]:
    """The installed ``pikku-mongo`` command's ``main``, wherever the package keeps it."""
    (point,) = entry_points(group="console_scripts", name="pikku-mongo")
    main: Callable[[list[str]], int] = point.load()
    return main


@functools.cache
def help_of(path: tuple[str, ...]) -> Help:
    """Parse ``pikku-mongo PATH --help``; KeyError when the command does not exist."""
    out = io.StringIO()
    err = io.StringIO()
    main = _main()
    with (
        mock.patch.dict(os.environ, {"COLUMNS": "250"}),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
        contextlib.suppress(SystemExit),
    ):
        main([*path, "--help"])
    text = out.getvalue()
    if not text.startswith("usage:"):
        raise KeyError(f"pikku-mongo {' '.join(path)}: {err.getvalue().strip()}")
    options: dict[str, tuple[str, ...] | None] = {}
    takes_value = set()
    subcommands: tuple[str, ...] = ()
    positionals = 0
    section = ""
    for line in text.splitlines():
        if line and not line.startswith(" "):
            section = line
            continue
        option = OPTION_LINE.match(line)
        if option:
            value = option.group("value")
            choices = re.fullmatch(r"\{(.*)\}", value or "")
            options[option.group("name")] = tuple(choices.group(1).split(",")) if choices else None
            if value:
                takes_value.add(option.group("name"))
        elif section.startswith("positional arguments") and re.match(r"^  \S", line):
            entry = line.split()[0]
            if entry.startswith("{"):
                subcommands = tuple(entry.strip("{}").split(","))
            else:
                positionals += 1
    return Help(options, frozenset(takes_value), subcommands, positionals)


def command_lines(block: Block) -> list[str]:
    """The ``pikku-mongo`` command lines of a block, each joined with its continuations."""
    lines = block.code.splitlines()
    found = []
    for i, raw in enumerate(lines):
        line = ENV.sub("", PROMPT.sub("", _uncommented(raw).strip()))
        if not re.match(r"^pikku-mongo(\s|$)", line):
            continue
        for more in lines[i + 1 :]:
            rest = _uncommented(more).strip()
            if not (more[:1].isspace() and rest.startswith("[")):
                break
            line += " " + rest
        found.append(line)
    return found


def _uncommented(line: str) -> str:
    return "" if line.lstrip().startswith("#") else re.split(r"\s#", line, maxsplit=1)[0]


def forms(synopsis: str) -> list[list[str]]:
    """The whole forms of a synopsis, as tokens after ``pikku-mongo``, brackets dropped."""
    rest = synopsis.removeprefix("pikku-mongo").strip()
    parts, depth, current = [], 0, ""
    for i, char in enumerate(rest):
        depth += char == "["
        depth -= char == "]"
        if char == "|" and depth == 0 and rest[i - 1 : i] == " ":
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return [re.sub(r"[\[\]]", " ", part).replace("'", "").split() for part in parts]


def check(tokens: list[str], path: tuple[str, ...] = ()) -> list[str]:
    """What is wrong with ``pikku-mongo PATH TOKENS``; empty when nothing is."""
    try:
        helped = help_of(path)
    except KeyError as exc:
        return [str(exc)]
    problems: list[str] = []
    given = 0
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token == "...":
            i += 1
        elif token.startswith("--"):
            name, _, inline = token.partition("=")
            top = help_of(()) if path else helped  # --uri and --version go before too
            if name not in helped.options and not (not path and name in top.options):
                problems.append(f"pikku-mongo {' '.join(path)}: no option {name}")
                i += 1
                continue
            value = inline
            if name in helped.takes_value and not inline:
                value = tokens[i + 1] if i + 1 < len(tokens) else ""
                i += 1
            choices = helped.options.get(name)
            if choices and value and not PLACEHOLDER.match(value):
                problems += [
                    f"pikku-mongo {' '.join(path)} {name}: {v!r} is not one of {choices}"
                    for v in value.split("|")
                    if v not in choices
                ]
            i += 1
        elif helped.subcommands:
            for name in token.split("|"):
                if name not in helped.subcommands:
                    problems.append(f"pikku-mongo {' '.join(path)}: no command {name!r}")
                else:
                    problems += check(tokens[i + 1 :], (*path, name))
            return problems
        else:
            given += 1
            i += 1
    if helped.subcommands:
        problems.append(f"pikku-mongo {' '.join(path)}: a command is missing")
    if given > helped.positionals:
        problems.append(
            f"pikku-mongo {' '.join(path)}: {given} arguments, it takes {helped.positionals}"
        )
    return problems


def check_synopsis(synopsis: str) -> list[str]:
    top = help_of(())
    whole = forms(synopsis)
    first = whole[0]
    parent = [t for t in first if not t.startswith("-")][:1]
    problems = check(first)
    for form in whole[1:]:
        if form and form[0] not in top.subcommands:
            form = [*parent, *form]  # `schedules list | pause NAME`
        problems += check(form)
    return problems


SYNOPSES = [
    (block, line) for block in BLOCKS if block.lang != "python" for line in command_lines(block)
]


def test_the_pages_show_command_lines() -> None:
    assert len(SYNOPSES) >= 20
    assert any(block.page == "README.md" for block, _ in SYNOPSES)


@pytest.mark.parametrize(
    ("block", "synopsis"),
    SYNOPSES,
    ids=[f"{block.id}:{'-'.join(line.split()[1:3])}" for block, line in SYNOPSES],
)
def test_a_command_line_matches_the_help(block: Block, synopsis: str) -> None:
    assert not check_synopsis(synopsis), f"{block.id}: {synopsis}"


@pytest.mark.parametrize(
    ("synopsis", "wrong"),
    [
        ("pikku-mongo runs list --colour red", "no option --colour"),
        ("pikku-mongo runs lisst", "no command 'lisst'"),
        ("pikku-mongo runs list [--order newest|random]", "'random' is not one of"),
        ("pikku-mongo schedules list | pause NAME EXTRA", "2 arguments, it takes 1"),
        (
            "pikku-mongo runs fork|cancel --workflow W [--compensate]",
            "fork: no option --compensate",
        ),
        ("pikku-mongo runs", "a command is missing"),
    ],
)
def test_a_wrong_command_line_is_caught(synopsis: str, wrong: str) -> None:
    assert any(wrong in problem for problem in check_synopsis(synopsis))


def test_placeholders_and_alternatives_are_read_as_the_docs_mean_them() -> None:
    assert not check_synopsis("pikku-mongo runs list [--order O] [--status S] [--limit N]")
    assert not check_synopsis("pikku-mongo --uri URI runs show RUN_ID")
    assert not check_synopsis("pikku-mongo runs suspend RUN_ID | runs resume RUN_ID")
    assert not check_synopsis("pikku-mongo schedules list | pause NAME | trigger NAME")


def test_an_uncommented_continuation_joins_its_command() -> None:
    block = Block(
        "x.md",
        1,
        "bash",
        "pikku-mongo runs list [--limit N]   # a comment\n"
        "                      [--order oldest]   # more\n"
        "$ MONGODB_URI=mongodb://h/app pikku-mongo doctor --json\n"
        "pikku-mongo: an error line, not a command\n",
        None,
    )
    assert command_lines(block) == [
        "pikku-mongo runs list [--limit N] [--order oldest]",
        "pikku-mongo doctor --json",
    ]
