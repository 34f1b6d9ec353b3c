"""Durable pydantic-ai agents: :class:`PikkuDurability` (the extra ``pikku-mongo[ai]``).

Give an agent the capability and run it inside a workflow body: each model request,
tool call and MCP call is a step of the run. See docs/guides/agents.md.
"""

try:
    import pydantic_ai  # noqa: F401
except ImportError as exc:  # pragma: no cover - the extra is not installed
    raise ImportError(
        "engine_core.pydantic_ai needs pydantic-ai: pip install 'pikku-mongo[ai]'"
    ) from exc

from engine_core.pydantic_ai.durability import PikkuDurability

__all__ = ["PikkuDurability"]
