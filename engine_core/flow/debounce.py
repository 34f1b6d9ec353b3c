"""The second tier of ``engine.start``'s flow control, checked at the call: debounce
(``debounce_key``, ``debounce``, ``debounce_timeout``) and what a start does when a live
run holds its ``dedup_id`` (``on_duplicate``). See docs/guides/flow-control.md."""

from __future__ import annotations

from dataclasses import dataclass

from engine_core.common.durations import Duration, parse_duration
from engine_core.common.values import check_name
from engine_core.errors import InvalidOptionError

#: What a start may do when a live run holds its ``dedup_id``.
ON_DUPLICATE = ("raise", "return", "cancel")


@dataclass(frozen=True)
class Debounce:
    """A debounced start: its key, its quiet period and the bound on its window
    (seconds; None: no bound)."""

    key: str
    quiet: float
    timeout: float | None


def check_debounce(
    key: object,
    debounce: Duration | None,
    timeout: Duration | None,
    *,
    run_id: object,
    dedup_id: object,
    delay: object,
) -> Debounce | None:
    """The debounce a start asks for, checked (None: not debounced)."""
    if key is None:
        if debounce is not None or timeout is not None:
            raise InvalidOptionError(
                "debounce and debounce_timeout need debounce_key= (the key whose starts "
                "are debounced together)"
            )
        return None
    check_name(key, "debounce_key")
    assert isinstance(key, str)
    if debounce is None:
        raise InvalidOptionError(
            f"debounce_key={key!r} needs debounce= (the quiet period after the last start "
            "before the run begins), e.g. debounce='5s'"
        )
    quiet = parse_duration(debounce, what="debounce")
    if quiet <= 0:
        raise InvalidOptionError(f"debounce must be longer than 0, not {debounce!r}")
    bound = parse_duration(timeout, what="debounce_timeout") if timeout is not None else None
    if bound is not None and bound < quiet:
        raise InvalidOptionError(
            f"debounce_timeout ({timeout!r}) is shorter than debounce ({debounce!r}): the run "
            "would begin before its quiet period ends; give a longer debounce_timeout"
        )
    for name, value in (("run_id", run_id), ("dedup_id", dedup_id), ("delay", delay)):
        if value is not None:
            raise InvalidOptionError(
                f"debounce_key cannot be combined with {name}=: a debounced start joins its "
                "key's pending run (whose id it returns) and that run begins after the quiet "
                "period"
            )
    return Debounce(key, quiet, bound)


def check_on_duplicate(on_duplicate: object, dedup_id: object) -> str:
    """``on_duplicate`` is one of :data:`ON_DUPLICATE`; other than ``"raise"`` it needs
    a ``dedup_id``."""
    if on_duplicate not in ON_DUPLICATE:
        raise InvalidOptionError(
            f"on_duplicate must be 'raise', 'return' or 'cancel', not {on_duplicate!r}"
        )
    assert isinstance(on_duplicate, str)
    if on_duplicate != "raise" and dedup_id is None:
        raise InvalidOptionError(
            f"on_duplicate={on_duplicate!r} acts on the run holding a dedup_id: pass dedup_id= too"
        )
    return on_duplicate
