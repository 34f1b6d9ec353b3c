"""The dashboard's Workers page: the serving engines and the runs none of them can
drive."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from pikku_mongo.dashboard.rendering import PageBase, is_htmx
from pikku_mongo.doctor.stranded import stranded_runs


class WorkerPages(PageBase):
    """The page of workers."""

    async def workers(self, request: Request) -> Response:
        """The live workers (host, pid, versions, workflows, step functions, queues,
        slots in use, last seen) and the stranded runs, refreshed live."""
        workers = await self.engine.list_workers()
        context: dict[str, Any] = {
            "page": "workers",
            "workers": workers,
            "stranded": await stranded_runs(self.engine, workers),
        }
        template = "_workers_live.html" if is_htmx(request) else "workers.html"
        return self.render(request, template, context)
