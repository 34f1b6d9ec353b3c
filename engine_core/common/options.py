"""The values an option of a fixed set takes, and the error any other value gets."""

from __future__ import annotations

from engine_core.errors import InvalidOptionError

#: How lists of runs are ordered: by creation time (ties by run id), or by run id.
ORDERS: tuple[str, ...] = ("newest", "oldest", "id")
#: What a schedule declared in code does with the fires missed while nothing ran.
CATCH_UPS: tuple[str, ...] = ("latest", "none", "all")


def check_choice(value: object, what: str, choices: tuple[str, ...], meaning: str) -> str:
    """``value`` when it is one of ``choices``, else :class:`InvalidOptionError`."""
    if isinstance(value, str) and value in choices:
        return value
    listed = ", ".join(repr(c) for c in choices)
    raise InvalidOptionError(f"{what} must be one of {listed} ({meaning}), not {value!r}")


def check_order(order: object) -> str:
    """``order`` checked: one of :data:`ORDERS` (``InvalidOptionError`` otherwise)."""
    return check_choice(
        order, "order", ORDERS, "newest or oldest first by creation time, or by run id"
    )


def check_catch_up(catch_up: object) -> str:
    """``catch_up`` checked: one of :data:`CATCH_UPS` (``InvalidOptionError`` otherwise)."""
    return check_choice(
        catch_up,
        "catch_up",
        CATCH_UPS,
        "one run for the fires missed while nothing ran, none, or one per missed fire",
    )
