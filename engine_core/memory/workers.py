"""The in-memory store's registry of serving engines."""

from __future__ import annotations

from dataclasses import replace

from engine_core.memory.cloning import clone
from engine_core.records import Worker, utcnow


class WorkerMemory:
    """``put_worker``, ``delete_worker``, ``list_workers`` over a dict."""

    _workers: dict[str, Worker]

    def _worker_table(self) -> dict[str, Worker]:
        if not hasattr(self, "_workers"):
            self._workers = {}
        return self._workers

    async def put_worker(self, worker: Worker) -> None:
        """:meth:`Store.put_worker <engine_core.store.Store.put_worker>`, in memory."""
        self._worker_table()[worker.instance_id] = _copy(worker)

    async def delete_worker(self, instance_id: str) -> None:
        """:meth:`Store.delete_worker <engine_core.store.Store.delete_worker>`, in memory."""
        self._worker_table().pop(instance_id, None)

    async def list_workers(self) -> list[Worker]:
        """:meth:`Store.list_workers <engine_core.store.Store.list_workers>`, in memory."""
        now = utcnow()
        live = [_copy(w) for w in self._worker_table().values() if w.expires_at > now]
        return sorted(live, key=lambda w: (w.started_at, w.instance_id))


def _copy(worker: Worker) -> Worker:
    return replace(
        worker,
        versions=list(worker.versions),
        workflows=list(worker.workflows),
        step_functions=list(worker.step_functions),
        queues={k: dict(v) for k, v in worker.queues.items()},
        workflow_versions=dict(worker.workflow_versions),
        input_schemas=clone(worker.input_schemas),
    )
