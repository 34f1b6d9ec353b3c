"""How ``MongoStore`` serves the store protocol from the parts it owns: each method of
the protocol is the method of the same name of one part (:class:`Served`), so its
signature, its docstring and its cost are the part's, checked by the type checker."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

P = ParamSpec("P")
R = TypeVar("R")
_Owner = TypeVar("_Owner")
_Part = TypeVar("_Part")


class Served(Generic[_Owner, _Part, P, R]):
    """A method of the owner served by one of its parts: read on an owner, the part's
    bound method of the same name (looked up at each access, so a subclass or a test
    may replace either)."""

    def __init__(
        self, part: Callable[[_Owner], _Part], method: Callable[Concatenate[_Part, P], R]
    ) -> None:
        self._part = part
        self._name = method.__name__
        self.__doc__ = method.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        if name != self._name:
            raise TypeError(f"{owner.__name__}.{name} would serve a method named {self._name}")

    @overload
    def __get__(self, owner: None, kind: type) -> Served[_Owner, _Part, P, R]: ...

    @overload
    def __get__(self, owner: _Owner, kind: type) -> Callable[P, R]: ...

    def __get__(self, owner: _Owner | None, kind: type) -> Any:
        if owner is None:
            return self
        return getattr(self._part(owner), self._name)


class ServedBy(Generic[_Owner, _Part]):
    """The methods one part serves: ``runs = ServedBy(lambda store: store.run_ops)``,
    then ``insert_run = runs(RunOps.insert_run)`` in the owner's class body."""

    def __init__(self, part: Callable[[_Owner], _Part]) -> None:
        self._part = part

    def __call__(self, method: Callable[Concatenate[_Part, P], R]) -> Served[_Owner, _Part, P, R]:
        return Served(self._part, method)
