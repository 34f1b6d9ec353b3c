"""How steps and child runs are named in a run, unambiguously whatever a name holds.

A step's key is its name, with an ordinal when the name is reached again in a pass
(``item``, ``item#1``, ``item#2``...). Scheme 2 escapes ``\\``, ``#`` and ``:`` in the
name first, so a step named ``item#1`` can never be the second ``item``, nor one named
``compensate:a`` the compensation of ``a``. A child run's id is its parent's id with
``%`` and ``:`` percent-escaped, a ``:``, then the step key, so no two (parent, key)
pairs share a child. Scheme 1 is how runs stored before 0.2 were named: they keep
replaying with it.
"""

from __future__ import annotations

import uuid

from engine_core.common.values import MAX_RUN_ID_LENGTH

#: The scheme new runs are started with.
CURRENT_SCHEME = 2


def step_key(name: str, seen: int, scheme: int) -> str:
    """The key of the ``seen``-th earlier use of ``name`` in this pass (0: the first)."""
    if scheme >= 2:
        name = name.replace("\\", "\\\\").replace("#", "\\#").replace(":", "\\:")
    return name if seen == 0 else f"{name}#{seen}"


def compensation_key(key: str) -> str:
    """The key of the step that undoes step ``key``."""
    return f"compensate:{key}"


def child_run_id(parent_id: str, key: str, scheme: int) -> str:
    """The id of the child run started by step ``key`` of ``parent_id``."""
    if scheme < 2:
        candidate = f"{parent_id}:{key}"
    else:
        candidate = parent_id.replace("%", "%25").replace(":", "%3A") + ":" + key
    if len(candidate) <= MAX_RUN_ID_LENGTH:
        return candidate
    return f"child-{uuid.uuid5(uuid.NAMESPACE_URL, candidate).hex}"
