"""What ``ctx.wait_for_update`` hands a workflow body: an update to answer once
(docs/guides/values-and-updates.md).

A reply (or a rejection) is a durable step of its own, keyed after the wait that took the
update (``reply:`` and the wait's key): its answer is written to the update, the first
answer kept, then the step is recorded; a replay finds the step and writes nothing.
"""

from __future__ import annotations

from typing import Any, Generic, Protocol, TypeVar

from engine_core.common.values import to_stored
from engine_core.errors import InvalidOptionError, UpdateAlreadyAnsweredError
from engine_core.run.branches import StepNames
from engine_core.run.calls import checkpointed

#: Replies are keyed apart from steps: a step's name has its ``:`` escaped in its key.
REPLY_PREFIX = "reply:"

_T = TypeVar("_T")


def reply_key(wait_key: str) -> str:
    """The key of the step that answers the update the wait ``wait_key`` took."""
    return REPLY_PREFIX + wait_key


class Replier(Protocol):
    """What an :class:`UpdateRequest` answers through: the pass that took it."""

    @property
    def names(self) -> StepNames:
        """How the body's calls are keyed."""
        ...

    async def reply_update(self, wait_key: str, update_id: str, answer: dict[str, Any]) -> None:
        """Answer the update (once across replays: a recorded reply writes nothing)."""
        ...


def taken_request(
    runner: Replier, name: str, wait_key: str, taken: dict[str, Any] | None
) -> UpdateRequest[Any] | None:
    """The request that the wait ``wait_key`` for update ``name`` took (``taken``: the
    update as recorded), or None when the wait timed out."""
    if taken is None:
        return None
    return UpdateRequest(runner, name, taken["update_id"], taken["payload"], wait_key)


class UpdateRequest(Generic[_T]):
    """An update sent to the run with ``engine.update``, taken by
    ``ctx.wait_for_update``: its ``name``, ``update_id`` and ``payload`` (as ``returns=``
    declared). Answer it once, with :meth:`reply` or :meth:`reject`; the caller of
    ``engine.update`` gets that answer."""

    def __init__(
        self, runner: Replier, name: str, update_id: str, payload: _T, wait_key: str
    ) -> None:
        self._pass = runner
        self.name = name
        self.update_id = update_id
        self.payload = payload
        self._wait_key = wait_key
        self._answered = False

    def __repr__(self) -> str:
        return f"UpdateRequest(name={self.name!r}, update_id={self.update_id!r})"

    @checkpointed
    async def reply(self, value: Any = None) -> None:
        """Answer the update with ``value`` (which must cross a checkpoint: else
        ``NotSerializableError``, and nothing is stored). Durable when it returns; a
        replay writes nothing. A second answer raises
        :class:`~engine_core.UpdateAlreadyAnsweredError`."""
        self._check_open()
        stored = to_stored(value, f"the reply to update {self.name!r}")
        await self._answer({"value": stored})

    @checkpointed
    async def reject(self, reason: str) -> None:
        """Refuse the update: its caller gets :class:`~engine_core.UpdateRejectedError`
        with ``reason``. Durable when it returns, answered once as :meth:`reply` is."""
        self._check_open()
        if not isinstance(reason, str):
            raise InvalidOptionError(
                f"the reason for rejecting update {self.name!r} must be a string, "
                f"not {type(reason).__name__}"
            )
        await self._answer({"rejected": reason})

    def _check_open(self) -> None:
        if self._answered:
            raise UpdateAlreadyAnsweredError(
                f"update {self.update_id!r} ({self.name!r}) was answered already: reply "
                "to or reject an update once (nothing more was stored)"
            )

    async def _answer(self, answer: dict[str, Any]) -> None:
        self._answered = True
        try:
            await self._pass.reply_update(self._wait_key, self.update_id, answer)
        except BaseException:
            self._answered = False  # not answered: the body may try again
            raise
