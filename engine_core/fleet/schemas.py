"""Input schemas in the registry of workers: a client without a workflow's code checks
an input before it records a run.

A serving engine publishes, for each workflow whose input parameter declares a type,
that type's JSON Schema (pydantic's; none without pydantic) in its registry record
(:func:`input_schemas`). A client that starts the workflow by name checks the input
against the schema of the worker it chose (:func:`check_input_schema`), raising
:class:`~engine_core.InvalidInputError` with what does not fit, so that a bad input is
refused at the call, recording nothing, as it is on an engine that has the code.

The check is the lenient half of pydantic's: it refuses only what the worker's own
check (pydantic, lax mode) would refuse as well: a missing required field, an unknown
field where the model forbids extras, a value of the wrong kind (a string where an
object or a number is due, say), a value outside an enum or a bound. What it cannot
judge (a string's format, a pattern it cannot compile, custom validators) it lets
through: the worker checks the input again before the first step, and fails the run
with ``InvalidInputError`` when it does not fit.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

from engine_core.common.convert import declared_parameter, json_schema_of
from engine_core.errors import InvalidInputError

#: A schema longer than this (as JSON) is not published: the record stays small.
MAX_SCHEMA_CHARS = 64 * 1024
#: The most problems one check lists.
MAX_PROBLEMS = 20
_BOOL_WORDS = frozenset({"0", "1", "true", "false", "yes", "no", "on", "off", "t", "f", "y", "n"})


def input_schemas(workflows: Mapping[str, Callable[..., Any]]) -> dict[str, dict[str, Any]]:
    """Each workflow's input schema, for the ones that declare an input type pydantic
    can describe (and whose schema is not too long to publish)."""
    found = {}
    for name, fn in workflows.items():
        schema = json_schema_of(declared_parameter(fn, 1))
        if schema is not None and len(json.dumps(schema, default=str)) <= MAX_SCHEMA_CHARS:
            found[name] = schema
    return found


def check_input_schema(workflow: str, schema: dict[str, Any] | None, value: Any) -> None:
    """``value`` (an input as stored: a JSON value) against the published ``schema``:
    :class:`InvalidInputError` listing what does not fit (``errors``: pydantic's
    shape, ``loc``, ``msg`` and ``type``). No schema: nothing to check."""
    if not schema:
        return
    problems: list[dict[str, Any]] = []
    _check(schema, value, (), schema, problems)
    if problems:
        listed = "; ".join(
            f"{'.'.join(map(str, p['loc'])) or 'input'}: {p['msg']}" for p in problems
        )
        raise InvalidInputError(
            f"input of workflow {workflow!r} does not fit the type the fleet's workers "
            f"declare for it ({schema.get('title', 'its input schema')}): {listed}",
            errors=problems,
        )


def _problem(problems: list[dict[str, Any]], loc: tuple[Any, ...], msg: str, kind: str) -> None:
    if len(problems) < MAX_PROBLEMS:
        problems.append({"loc": list(loc), "msg": msg, "type": kind})


def _check(
    schema: Any,
    value: Any,
    loc: tuple[Any, ...],
    root: dict[str, Any],
    problems: list[dict[str, Any]],
) -> None:
    if not isinstance(schema, dict):  # ``true`` (anything) or a form not known here
        if schema is False:
            _problem(problems, loc, "no value is allowed here", "forbidden")
        return
    _check_combined(schema, value, loc, root, problems)
    if "enum" in schema and not _among(value, schema["enum"]):
        _problem(problems, loc, f"must be one of {schema['enum']!r:.200}", "enum")
    if "const" in schema and not _among(value, [schema["const"]]):
        _problem(problems, loc, f"must be {schema['const']!r:.100}", "literal")
    kinds = schema.get("type")
    if kinds is not None:
        allowed = kinds if isinstance(kinds, list) else [kinds]
        if not any(_is_kind(value, k, "format" in schema) for k in allowed):
            _problem(problems, loc, f"must be {' or '.join(map(str, allowed))}", "type")
            return
    if isinstance(value, dict):
        _check_object(schema, value, loc, root, problems)
    elif isinstance(value, list):
        _check_array(schema, value, loc, root, problems)
    elif isinstance(value, str):
        _check_string(schema, value, loc, problems)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        _check_number(schema, value, loc, problems)


def _check_combined(
    schema: dict[str, Any],
    value: Any,
    loc: tuple[Any, ...],
    root: dict[str, Any],
    problems: list[dict[str, Any]],
) -> None:
    """``$ref``, ``allOf``, and ``anyOf``/``oneOf`` (judged as ``anyOf``: lenient)."""
    if isinstance(ref := schema.get("$ref"), str):
        _check(_resolve(ref, root), value, loc, root, problems)
    for part in schema.get("allOf", ()):
        _check(part, value, loc, root, problems)
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if not isinstance(options, list) or not options:
            continue
        if not any(_fits(option, value, loc, root) for option in options):
            _problem(problems, loc, "fits none of the allowed forms", "union")


def _fits(schema: Any, value: Any, loc: tuple[Any, ...], root: dict[str, Any]) -> bool:
    found: list[dict[str, Any]] = []
    _check(schema, value, loc, root, found)
    return not found


def _resolve(ref: str, root: dict[str, Any]) -> Any:
    """A local reference (``#/$defs/Name``); anything else is not known here (lenient)."""
    if not ref.startswith("#/"):
        return True
    target: Any = root
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(target, dict) or part not in target:
            return True
        target = target[part]
    return target


def _among(value: Any, allowed: list[Any]) -> bool:
    # Lax as pydantic is: an enum of numbers takes "1" and 1.0 for 1.
    for option in allowed:
        if (value == option and type(value) is not bool) or value is option:
            return True
        if isinstance(option, int | float) and not isinstance(option, bool):
            if isinstance(value, str):
                try:
                    if float(value) == option:
                        return True
                except ValueError:
                    pass
    return False


def _number_text(value: str) -> bool:
    try:
        return math.isfinite(float(value))
    except ValueError:
        return False


def _is_kind(value: Any, kind: str, formatted: bool) -> bool:
    """Whether pydantic (lax) could read ``value`` as a JSON Schema ``kind``."""
    numeric = isinstance(value, int | float)  # bools included: pydantic takes them
    if kind == "object":
        return isinstance(value, dict)
    if kind == "array":
        return isinstance(value, list)
    if kind == "string":
        # A formatted string (a date, a duration...) may also be read from a number.
        return isinstance(value, str) or (formatted and numeric)
    if kind == "integer":
        if isinstance(value, float):
            return value.is_integer()
        return isinstance(value, int) or (isinstance(value, str) and _number_text(value))
    if kind == "number":
        return numeric or (isinstance(value, str) and _number_text(value))
    if kind == "boolean":
        if isinstance(value, str):
            return value.strip().lower() in _BOOL_WORDS
        return isinstance(value, bool) or (numeric and value in (0, 1))
    if kind == "null":
        return value is None
    return True  # a kind not known here


def _check_object(
    schema: dict[str, Any],
    value: dict[str, Any],
    loc: tuple[Any, ...],
    root: dict[str, Any],
    problems: list[dict[str, Any]],
) -> None:
    properties = schema.get("properties")
    properties = properties if isinstance(properties, dict) else {}
    for name in schema.get("required", ()):
        if name not in value:
            _problem(problems, (*loc, name), "field required", "missing")
    extra = schema.get("additionalProperties", True)
    for name, item in value.items():
        if name in properties:
            _check(properties[name], item, (*loc, name), root, problems)
        elif extra is False:
            _problem(problems, (*loc, name), "extra field not permitted", "extra_forbidden")
        elif isinstance(extra, dict):
            _check(extra, item, (*loc, name), root, problems)


def _check_array(
    schema: dict[str, Any],
    value: list[Any],
    loc: tuple[Any, ...],
    root: dict[str, Any],
    problems: list[dict[str, Any]],
) -> None:
    first = schema.get("prefixItems")
    first = first if isinstance(first, list) else []
    for i, item in enumerate(value):
        if i < len(first):
            _check(first[i], item, (*loc, i), root, problems)
        elif "items" in schema:
            _check(schema["items"], item, (*loc, i), root, problems)
    if isinstance(least := schema.get("minItems"), int) and len(value) < least:
        _problem(problems, loc, f"must have at least {least} item(s)", "too_short")
    if isinstance(most := schema.get("maxItems"), int) and len(value) > most:
        _problem(problems, loc, f"must have at most {most} item(s)", "too_long")


def _check_string(
    schema: dict[str, Any], value: str, loc: tuple[Any, ...], problems: list[dict[str, Any]]
) -> None:
    if isinstance(least := schema.get("minLength"), int) and len(value) < least:
        _problem(problems, loc, f"must have at least {least} character(s)", "string_too_short")
    if isinstance(most := schema.get("maxLength"), int) and len(value) > most:
        _problem(problems, loc, f"must have at most {most} character(s)", "string_too_long")
    pattern = schema.get("pattern")
    if isinstance(pattern, str):
        try:
            matched = re.search(pattern, value) is not None
        except re.error:  # a pattern Python reads otherwise: the worker judges it
            matched = True
        if not matched:
            _problem(problems, loc, f"must match {pattern!r}", "string_pattern_mismatch")


def _check_number(
    schema: dict[str, Any], value: float, loc: tuple[Any, ...], problems: list[dict[str, Any]]
) -> None:
    bounds: list[tuple[str, Callable[[float, float], bool], str]] = [
        ("minimum", lambda v, b: v >= b, "greater than or equal to"),
        ("exclusiveMinimum", lambda v, b: v > b, "greater than"),
        ("maximum", lambda v, b: v <= b, "less than or equal to"),
        ("exclusiveMaximum", lambda v, b: v < b, "less than"),
    ]
    for key, holds, words in bounds:
        bound = schema.get(key)
        if isinstance(bound, bool) or not isinstance(bound, int | float):
            continue
        if not holds(value, bound):
            _problem(problems, loc, f"must be {words} {bound}", key)
