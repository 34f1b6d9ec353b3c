"""The registry of serving engines: each records itself in the store while it serves.

A serving engine writes its record (host, pid, what it registered, its queues, its step
slots in use) when it starts and every :data:`REFRESH_S` seconds (one write each), and
deletes it when it stops. A record not refreshed for :data:`EXPIRES_AFTER_S` seconds (a
process that died) is left out of every listing. A client reads the live records to
start a workflow it did not register itself (:class:`FleetView`, cached for
:data:`VIEW_KEPT_S` seconds: a new worker is visible to clients within 10 s).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from engine_core.common.outages import Outages
from engine_core.common.periodic import Periodic
from engine_core.errors import WorkflowNotRegisteredError
from engine_core.records import Worker, utcnow
from engine_core.store import Store

log = logging.getLogger("engine_core.fleet.registry")

#: How often a serving engine refreshes its record (one write).
REFRESH_S = 5.0
#: A record not refreshed for this long is gone: four missed refreshes.
EXPIRES_AFTER_S = 20.0
#: How long a client keeps the fleet's records before it reads them again.
VIEW_KEPT_S = 5.0
#: How long a stopping engine tries to delete its record (it expires anyway).
DELETE_TIMEOUT_S = 2.0


class Registry:
    """Keeps this serving engine's record in the store (see the module docstring).

    ``describe()`` returns the record as it is now, without its times."""

    def __init__(
        self,
        store: Store,
        outages: Outages,
        instance_id: str,
        describe: Callable[[], Worker],
    ) -> None:
        self._store = store
        self._outages = outages
        self._instance_id = instance_id
        self._describe = describe
        self._started_at = utcnow()
        self._loop: Periodic | None = None

    def record(self) -> Worker:
        """This process's record as it is now, stamped with its start and its expiry."""
        worker = self._describe()
        now = utcnow()
        worker.started_at = self._started_at
        worker.last_seen = now
        worker.expires_at = now + timedelta(seconds=EXPIRES_AFTER_S)
        return worker

    async def refresh(self) -> None:
        """Write this process's record again (1 write). A small write every few seconds:
        one with no answer means the store is away (a killed or frozen server raises
        nothing for a while), logged as an outage."""
        await self._outages.watch(self._store.put_worker(self.record()))

    async def start(self) -> None:
        """Write the record now (so a client sees this worker as soon as it serves),
        then every :data:`REFRESH_S` seconds."""
        self._started_at = utcnow()
        await self._outages.call(self.refresh)
        self._loop = Periodic(
            "recording this worker in the registry",
            self.refresh,
            every=REFRESH_S,
            outages=self._outages,
            wait_first=True,
        )
        self._loop.start()

    async def stop(self) -> None:
        """Stop refreshing and delete this process's record."""
        if self._loop is None:
            return
        await self._loop.stop()
        self._loop = None
        try:
            async with asyncio.timeout(DELETE_TIMEOUT_S):
                await self._store.delete_worker(self._instance_id)
        except Exception as exc:  # it expires by itself
            log.info("could not remove this worker's record (%s); it expires in %g s",
                     type(exc).__name__, EXPIRES_AFTER_S)  # fmt: skip


def describe(
    instance_id: str,
    workflows: Sequence[str],
    step_functions: Sequence[str],
    queues: dict[str, dict[str, object]],
    concurrency: int,
    slots_used: int,
    versions: Mapping[str, str | None] | None = None,
    *,
    pinned: bool = False,
    input_schemas: dict[str, dict[str, Any]] | None = None,
) -> Worker:
    """A record of this process (times filled in by :meth:`Registry.record`);
    ``versions``: each workflow's version label (None: registered without one)."""
    epoch = datetime.fromtimestamp(0).astimezone()
    labels = {w: v for w, v in (versions or {}).items() if v is not None}
    return Worker(
        instance_id=instance_id,
        host=socket.gethostname(),
        pid=os.getpid(),
        versions=sorted(set(labels.values())),
        workflows=sorted(workflows),
        step_functions=sorted(step_functions),
        queues=queues,
        started_at=epoch,
        last_seen=epoch,
        expires_at=epoch,
        concurrency=concurrency,
        slots_used=slots_used,
        pinned=pinned,
        workflow_versions=labels,
        input_schemas=dict(input_schemas or {}),
    )


def drives(worker: Worker, workflow: str, version: str | None) -> bool:
    """Whether ``worker`` drives runs of ``workflow`` started with ``version``: it
    registers the workflow and, when it pins versions, that version."""
    if workflow not in worker.workflows:
        return False
    return not worker.pinned or worker.workflow_versions.get(workflow) == version


def why_undriven(workflow: str, version: str | None, workers: Sequence[Worker]) -> str | None:
    """Why no live worker will drive a run of ``workflow`` started with ``version``, in
    words; None when one will."""
    serving = [w for w in workers if workflow in w.workflows]
    if any(drives(w, workflow, version) for w in serving):
        return None
    if not serving:
        return f"no live worker registers workflow {workflow!r}"
    served = sorted({str(w.workflow_versions.get(workflow)) for w in serving})
    label = "no version" if version is None else f"version {version!r}"
    return (
        f"no live worker drives {label} of workflow {workflow!r}: the workers that "
        f"register it pin versions and serve {', '.join(served)}"
    )


class FleetView:
    """What the live workers serve, as a client sees it (read at most every
    :data:`VIEW_KEPT_S` seconds)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._workers: list[Worker] = []
        self._read_at: float | None = None
        self._queues: dict[str, dict[str, Any]] = {}
        self._queues_read_at: float | None = None

    async def workers(self, *, fresh: bool = False) -> list[Worker]:
        """The live workers, read again when the last read is older than ``VIEW_KEPT_S`` (or
        ``fresh``)."""
        now = time.monotonic()
        if fresh or self._read_at is None or now - self._read_at > VIEW_KEPT_S:
            self._workers = await self._store.list_workers()
            self._read_at = time.monotonic()
        return self._workers

    async def queue_limits(self, name: str) -> dict[str, Any] | None:
        """The limits of queue ``name`` as the store keeps them (declared by some
        process) or a live worker declares them; None when neither knows it (read
        again once when the cached view does not have it)."""
        for fresh in (False, True):
            now = time.monotonic()
            if fresh or self._queues_read_at is None or now - self._queues_read_at > VIEW_KEPT_S:
                self._queues = await self._store.list_queue_limits()
                self._queues_read_at = time.monotonic()
            if name in self._queues:
                return self._queues[name]
            for worker in await self.workers(fresh=fresh):
                if name in worker.queues:
                    return worker.queues[name]
        return None

    async def serving(self, workflow: str, local: Sequence[str]) -> Worker:
        """The live worker a client's start of ``workflow`` by name follows (its version
        and input schema): of the workers that register it, the one that started last.
        Raises :class:`WorkflowNotRegisteredError` when none does (read again once
        when the cached view has none)."""
        for fresh in (False, True):
            workers = await self.workers(fresh=fresh)
            serving = [w for w in workers if workflow in w.workflows]
            if serving:
                return max(serving, key=lambda w: (w.started_at, w.instance_id))
        served = {w for worker in workers for w in worker.workflows}
        raise WorkflowNotRegisteredError(
            f"no workflow named {workflow!r} is registered on this engine or on any live "
            f"worker (registered here: {sorted(local) or 'none'}; "
            f"the fleet serves: {sorted(served) or 'none'})"
        )
