"""How steps and child runs are named in a run, unambiguously whatever a name holds.

A step's key is its name, with an ordinal when the name is reached again in a pass
(``item``, ``item#1``, ``item#2``...). Scheme 2 escapes ``\\``, ``#`` and ``:`` in the
name first, so a step named ``item#1`` can never be the second ``item``, nor one named
``compensate:a`` the compensation of ``a``. Scheme 3 counts ordinals per branch of the
body (``engine_core.run.branches``): a step reached by a branch other than the body
itself names that branch after an ``@`` (``item@1``, ``item@1#2``), and ``@`` in a name
is escaped too. A child run's id is its parent's id with ``%`` and ``:`` percent-escaped,
a ``:``, then the step key, so no two (parent, key) pairs share a child. Scheme 1 is
how runs stored before 0.2 were named, scheme 2 how runs stored before 0.4 were: they
keep replaying with theirs.
"""

from __future__ import annotations

import uuid

from engine_core.common.values import MAX_RUN_ID_LENGTH

#: The scheme new runs are started with.
CURRENT_SCHEME = 3


def step_key(name: str, seen: int, scheme: int, branch: str = "") -> str:
    """The key of the ``seen``-th earlier use of ``name`` (0: the first) by ``branch``
    of the body ("": the body itself) in this pass."""
    if scheme >= 2:
        name = name.replace("\\", "\\\\").replace("#", "\\#").replace(":", "\\:")
        if scheme >= 3:
            name = name.replace("@", "\\@")
            if branch:
                name = f"{name}@{branch}"
    return name if seen == 0 else f"{name}#{seen}"


def key_branch(key: str) -> str:
    """The branch of the body a scheme-3 step key names after its ``@`` ("" for the
    body itself: a key with no unescaped ``@``)."""
    end = len(key)
    hash_at = key.rfind("#")
    if hash_at > 0 and key[hash_at + 1 :].isdigit() and _unescaped(key, hash_at):
        end = hash_at
    at = key.rfind("@", 0, end)
    if at < 0 or not _unescaped(key, at):
        return ""
    path = key[at + 1 : end]
    return path if path and path.replace(".", "").isdigit() else ""


def _unescaped(key: str, i: int) -> bool:
    """Whether ``key[i]`` is preceded by an even number of backslashes."""
    n = 0
    while i - n - 1 >= 0 and key[i - n - 1] == "\\":
        n += 1
    return n % 2 == 0


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
