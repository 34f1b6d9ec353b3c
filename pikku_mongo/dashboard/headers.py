"""The security headers on every dashboard response: :data:`SECURITY_HEADERS` and the
ASGI middleware that adds them; and the one that shows a value the dashboard cannot
decode (``Engine(codec=...)``, a key it does not hold) as "encrypted"."""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from engine_core.codecs.sealing import showing_undecodable

#: On every response: no framing (clickjacking of the action buttons), scripts and
#: styles from this app only, no referrer sent elsewhere.
SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
}


class SecurityHeaders:
    """ASGI middleware that adds :data:`SECURITY_HEADERS` to every response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers.setdefault(name, value)
            await send(message)

        await self.app(scope, receive, send_with_headers)


class ShowingUndecodable:
    """ASGI middleware under which reads show a value they cannot decode as "encrypted"
    instead of raising :class:`~engine_core.CodecError` (a page of runs must not fail
    for one run's key)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        with showing_undecodable():
            await self.app(scope, receive, send)
