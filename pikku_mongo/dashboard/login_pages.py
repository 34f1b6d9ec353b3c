"""The dashboard's login pages: the login form and its POST (which sets the session
cookie), and logging out."""

from __future__ import annotations

import asyncio

from starlette.requests import Request
from starlette.responses import Response

from pikku_mongo.dashboard.rendering import PageBase, links_for, redirect
from pikku_mongo.dashboard.security import SESSION_COOKIE, SESSION_SECONDS


class LoginPages(PageBase):
    """Signing in and out (only where a token is set)."""

    async def login(self, request: Request) -> Response:
        """The login form (a token is set), and its POST, which sets the session cookie."""
        if not self.security.login_enabled:
            return redirect(links_for(request).runs())
        if request.method == "GET":
            return self.render(request, "login.html", {"page": "login", "failed": False})
        form = await self.posted(request, changes=False)
        if isinstance(form, Response):
            return form
        given = form.get("token", [""])
        if len(given) != 1 or not self.security.token_matches(given[0]):
            await asyncio.sleep(0.2)  # slows guessing down a little
            return self.render(request, "login.html", {"page": "login", "failed": True}, 401)
        response = redirect(links_for(request).runs())
        session = self.security.new_session()
        self.set_cookie(request, response, SESSION_COOKIE, session, max_age=SESSION_SECONDS)
        return response

    async def logout(self, request: Request) -> Response:
        """End the session (a POST with a valid CSRF token)."""
        form = await self.posted(request, changes=False)
        if isinstance(form, Response):
            return form
        response = redirect(links_for(request).login())
        response.delete_cookie(SESSION_COOKIE, path=links_for(request).root or "/")
        return response
