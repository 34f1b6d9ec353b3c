"""Values as Python code declares them, stored as JSON.

On the way in (:func:`to_json`), pydantic models, dataclasses, ``datetime`` (ISO 8601
with its UTC offset), ``date``, ``time``, ``UUID``, ``Decimal`` (as a string, every digit
kept), enums (their value), tuples and sets (lists) become JSON values. On the way out
(:func:`from_json`), a stored value is given back as the type the code declares (an
annotation or ``returns=``): with pydantic installed through a cached ``TypeAdapter``;
without it, by this module's own reader (dataclasses and the standard types above).
Without a declared type a value comes back as its JSON form. A plain JSON value never
reaches this module on the way in (the checkpoint tries it as it is first), and
:func:`from_json` hands back a value that already has its declared plain type as it is.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import enum
import functools
import inspect
import types
import typing
import uuid
import weakref
from collections.abc import Callable
from typing import Any

try:
    import pydantic
except ImportError:  # pragma: no cover - pydantic is an optional extra
    pydantic = None  # type: ignore[assignment]

_NoneType = type(None)
#: Declared types a stored JSON value may already have (then given back as it is).
_PLAIN = frozenset({dict, list, str, int, float, bool, _NoneType})
_UNDECLARED = frozenset({Any, object, inspect.Parameter.empty})


def to_json(value: Any) -> Any:
    """``value`` with every model, dataclass, datetime... converted to JSON values; values
    of other types are left as they are (the checkpoint then names them)."""
    if isinstance(value, dict):
        return {_key(k): to_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json(v) for v in value]
    if isinstance(value, set | frozenset):
        items = [to_json(v) for v in value]
        try:
            return sorted(items)  # the same stored form whatever the set's order
        except TypeError:
            return items
    if pydantic is not None and isinstance(value, pydantic.BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, enum.Enum):
        return to_json(value.value)
    if isinstance(value, dt.date | dt.time):  # datetime is a date
        return value.isoformat()
    if isinstance(value, uuid.UUID | decimal.Decimal):
        return str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    return value


def _key(key: Any) -> Any:
    if isinstance(key, str):
        return str(key)  # a str enum member as its plain string
    if isinstance(key, enum.Enum | uuid.UUID | dt.date | decimal.Decimal):
        converted = to_json(key)
        return converted if isinstance(converted, str) else key
    return key


# ---- reading a stored value as its declared type -------------------------------------


def from_json(value: Any, declared: Any) -> Any:
    """``value`` (as stored) as the ``declared`` type; ``None`` declares nothing. Raises
    ``ValueError`` (pydantic's ``ValidationError`` with pydantic) when it does not fit."""
    if declared is None or declared in _UNDECLARED:
        return value
    if type(value) is declared and declared in _PLAIN:
        return value
    return _reader(declared)(value)


def _reader(declared: Any) -> Callable[[Any], Any]:
    try:
        return _cached_reader(declared)
    except TypeError:  # an unhashable annotation: not cached
        return _make_reader(declared)


@functools.lru_cache(maxsize=1024)
def _cached_reader(declared: Any) -> Callable[[Any], Any]:
    return _make_reader(declared)


def _make_reader(declared: Any) -> Callable[[Any], Any]:
    if pydantic is not None:
        try:
            adapter: Any = pydantic.TypeAdapter(declared)
        except Exception as exc:  # a type pydantic cannot read (or not resolvable here)
            raise TypeError(f"values cannot be read as {declared!r}: {exc}") from exc
        return adapter.validate_python  # type: ignore[no-any-return]
    return functools.partial(_read, declared=declared, path="value")


def _read(value: Any, declared: Any, path: str) -> Any:
    """The reader used without pydantic: the standard types and dataclasses."""
    if declared is None or declared in _UNDECLARED or isinstance(declared, typing.TypeVar):
        return value
    origin = typing.get_origin(declared)
    args = typing.get_args(declared)
    if origin is typing.Annotated:
        return _read(value, args[0], path)
    if origin is typing.Union or origin is types.UnionType:
        if value is None and _NoneType in args:
            return None
        errors = []
        for option in args:
            if option is _NoneType:
                continue
            try:
                return _read(value, option, path)
            except (TypeError, ValueError) as exc:
                errors.append(str(exc))
        raise ValueError("; ".join(errors) or f"{path}: {value!r} fits none of {declared}")
    if origin is typing.Literal:
        if value in args:
            return value
        raise ValueError(f"{path}: {value!r} is not one of {args!r}")
    if origin is not None:
        return _read_generic(value, origin, args, path)
    if declared is _NoneType:
        return _expect(value is None, value, "None", path)
    return _read_class(value, declared, path)


def _read_generic(value: Any, origin: Any, args: tuple[Any, ...], path: str) -> Any:
    if origin is dict or origin is typing.Mapping or _is_abc(origin, "Mapping"):
        _expect(isinstance(value, dict), value, "an object", path)
        kt, vt = args if len(args) == 2 else (Any, Any)
        return {
            _read(k, kt, f"{path} key"): _read(v, vt, f"{path}[{k!r}]") for k, v in value.items()
        }
    _expect(isinstance(value, list | tuple), value, "an array", path)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_read(v, args[0], f"{path}[{i}]") for i, v in enumerate(value))
        if len(args) != len(value):
            raise ValueError(f"{path}: {len(value)} items, expected {len(args)}")
        return tuple(
            _read(v, t, f"{path}[{i}]") for i, (v, t) in enumerate(zip(value, args, strict=True))
        )
    item = args[0] if args else Any
    items = [_read(v, item, f"{path}[{i}]") for i, v in enumerate(value)]
    if origin in (set, frozenset):
        return origin(items)
    if _is_abc(origin, "Set"):
        return set(items)
    return items


def _is_abc(origin: Any, name: str) -> bool:
    return getattr(origin, "__module__", "") == "collections.abc" and origin.__name__.endswith(name)


def _read_class(value: Any, declared: Any, path: str) -> Any:
    if not isinstance(declared, type):
        return value  # something this reader does not know: as stored
    if issubclass(declared, enum.Enum):
        return declared(value)
    if declared is bool:
        return _expect(isinstance(value, bool), value, "a boolean", path)
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if declared is int:
        return _expect(number and isinstance(value, int), value, "an integer", path)
    if declared is float:
        return float(_expect(number, value, "a number", path))
    if declared is str:
        return _expect(isinstance(value, str), value, "a string", path)
    for kind in (dt.datetime, dt.date, dt.time, uuid.UUID):  # datetime before date
        if issubclass(declared, kind):
            if isinstance(value, kind):
                return value
            text = _str(value, path)
            return uuid.UUID(text) if kind is uuid.UUID else kind.fromisoformat(text)  # type: ignore[union-attr]
    if issubclass(declared, decimal.Decimal):
        try:
            return decimal.Decimal(str(value))
        except decimal.InvalidOperation:
            raise ValueError(f"{path}: {value!r} is not a decimal number") from None
    if dataclasses.is_dataclass(declared):
        return _read_dataclass(value, declared, path)
    if declared in (list, dict, tuple, set, frozenset):
        return _read_generic(value, declared, (), path)
    return _expect(isinstance(value, declared), value, declared.__name__, path)


def _read_dataclass(value: Any, declared: Any, path: str) -> Any:
    _expect(isinstance(value, dict), value, "an object", path)
    hints = _type_hints(declared)
    known = {f.name for f in dataclasses.fields(declared) if f.init}
    unknown = set(value) - known
    if unknown:
        raise ValueError(f"{path}: unexpected fields {sorted(unknown)} for {declared.__name__}")
    fields = {k: _read(v, hints.get(k, Any), f"{path}.{k}") for k, v in value.items()}
    try:
        return declared(**fields)
    except TypeError as exc:
        raise ValueError(f"{path}: {exc}") from None


def _str(value: Any, path: str) -> str:
    return _expect(isinstance(value, str), value, "a string", path)  # type: ignore[no-any-return]


def _expect(ok: bool, value: Any, what: str, path: str) -> Any:
    if not ok:
        raise ValueError(f"{path}: expected {what}, got {type(value).__name__} {value!r:.80}")
    return value


# ---- the types code declares ---------------------------------------------------------

_hints_of: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()


def _type_hints(target: Any) -> dict[str, Any]:
    try:
        return _hints_of[target]
    except (KeyError, TypeError):
        pass
    try:
        hints = typing.get_type_hints(target)
    except Exception:  # an annotation that cannot be resolved here: nothing declared
        hints = {}
    try:
        _hints_of[target] = hints
    except TypeError:
        pass
    return hints


def _unwrap(fn: Any) -> Any:
    while isinstance(fn, functools.partial):
        fn = fn.func
    if not (inspect.isfunction(fn) or inspect.ismethod(fn)) and callable(fn):
        call = getattr(type(fn), "__call__", None)  # noqa: B004
        if inspect.isfunction(call):
            return call
    return fn


@dataclasses.dataclass(frozen=True)
class _Declared:
    returns: Any
    parameters: tuple[Any, ...]


_NOTHING = _Declared(None, ())
_declared_of: weakref.WeakKeyDictionary[Any, _Declared] = weakref.WeakKeyDictionary()


def _declared(fn: Any) -> _Declared:
    """What ``fn`` declares (cached per function: this runs for every step)."""
    try:
        return _declared_of[fn]
    except KeyError:
        pass
    except TypeError:  # not weakly referable: not cached
        return _read_declared(fn)
    found = _read_declared(fn)
    _declared_of[fn] = found
    return found


def _read_declared(fn: Any) -> _Declared:
    target = _unwrap(fn)
    if not getattr(target, "__annotations__", None):
        return _NOTHING
    hints = _type_hints(target)
    returns = hints.get("return")
    origin = typing.get_origin(returns)
    if origin is not None and (_is_abc(origin, "Awaitable") or _is_abc(origin, "Coroutine")):
        returns = typing.get_args(returns)[-1] if typing.get_args(returns) else None
    try:
        names = [
            p.name
            for p in inspect.signature(fn).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
    except (TypeError, ValueError):
        names = []
    return _Declared(returns, tuple(hints.get(name) for name in names))


def declared_return(fn: Any) -> Any:
    """The type ``fn`` declares it returns (an awaitable's result), or None."""
    if fn is None or (type(fn) is types.FunctionType and "return" not in fn.__annotations__):
        return None  # (a lambda, say: nothing to look up)
    return _declared(fn).returns


def declared_parameter(fn: Any, index: int) -> Any:
    """The type of ``fn``'s positional parameter ``index``, or None."""
    parameters = _declared(fn).parameters
    return parameters[index] if index < len(parameters) else None


def json_schema_of(declared: Any) -> dict[str, Any] | None:
    """The JSON Schema of the values ``declared`` takes (pydantic's, in validation
    mode), or None: nothing declared, pydantic not installed, or a type it cannot
    describe."""
    if pydantic is None or declared is None or declared in _UNDECLARED:
        return None
    try:
        schema = pydantic.TypeAdapter(declared).json_schema()
    except Exception:  # a type pydantic cannot describe: no schema, the worker checks
        return None
    return schema if isinstance(schema, dict) else None
