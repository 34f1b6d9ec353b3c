"""The in-memory store: the reference implementation of the store protocol, for tests and
single-process use. ``InMemoryStore`` is its public name."""

from engine_core.memory.store import InMemoryStore

__all__ = ["InMemoryStore"]
