"""The dashboard's queues page: limits, depth, running and admissions per minute."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import Response

from pikku_mongo.dashboard.rendering import PageBase, is_htmx, links_for


class QueuePages(PageBase):
    """The page of queues."""

    async def queues(self, request: Request) -> Response:
        """The queues: limits, depth, running and admissions per minute, refreshed live."""
        context: dict[str, Any] = {
            "page": "queues",
            "queues": await self.engine.list_queues(),
            "queued_runs": links_for(request).runs("?" + urlencode({"status": "queued"})),
        }
        template = "_queues_live.html" if is_htmx(request) else "queues.html"
        return self.render(request, template, context)
