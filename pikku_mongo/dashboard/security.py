"""Who may use the dashboard, and which POSTs are genuine.

Access, in this order:

* an ``auth`` callable (mounted in an app): it decides from the request;
* a ``token``: ``Authorization: Bearer <token>``, or the session cookie that the login
  form sets (HttpOnly, SameSite=Strict, signed with a key derived from the token, so a
  new token ends every session); tokens are compared in constant time;
* neither: only loopback clients, and only with a loopback ``Host`` (so a page on
  another site cannot reach a local dashboard through DNS rebinding).

Cross-site requests: every POST carries a form field that is an HMAC of a random
per-browser cookie (a signed double-submit token), and its ``Origin`` (else its
``Referer``), when present, must be this host or a trusted origin. Anything else is
refused with 403.
"""

from __future__ import annotations

import hashlib
import hmac
import inspect
import ipaddress
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from starlette.requests import Request

from pikku_mongo.dashboard.secret import csrf_key

#: ``auth(request)`` returns (or resolves to) whether the request may use the dashboard.
AuthCallable = Callable[[Request], bool | Awaitable[bool]]

SESSION_COOKIE = "pikku_dashboard_session"
CSRF_COOKIE = "pikku_dashboard_csrf"
CSRF_FIELD = "csrf_token"
SESSION_SECONDS = 12 * 3600


@dataclass(frozen=True)
class Denied:
    """Why a request is refused: its HTTP status, a message, and whether logging in
    would help."""

    status: int
    message: str
    login: bool = False


def is_loopback(host: str | None) -> bool:
    """Whether ``host`` (a name or an address, maybe in brackets) is this machine."""
    if not host:
        return False
    name = host.strip().strip("[]").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _host_without_port(host: str) -> str:
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _sign(key: bytes, text: str) -> str:
    return hmac.new(key, text.encode(), hashlib.sha256).hexdigest()


class Security:
    """The dashboard's access and CSRF checks (see the module docstring)."""

    def __init__(
        self,
        *,
        token: str | None = None,
        auth: AuthCallable | None = None,
        secret: str | bytes | None = None,
        trusted_origins: Sequence[str] = (),
    ) -> None:
        if token is not None and (not isinstance(token, str) or len(token) < 8):
            raise ValueError("the dashboard token must be a string of at least 8 characters")
        if auth is not None and not callable(auth):
            raise TypeError("auth must be a callable taking the request")
        self.token = token
        self.auth = auth
        self._csrf_key = csrf_key(secret, token)
        self._session_key = (
            hmac.new(token.encode(), b"pikku-mongo dashboard session", hashlib.sha256).digest()
            if token is not None
            else None
        )
        self.trusted_origins = frozenset(o.rstrip("/").lower() for o in trusted_origins)

    @property
    def login_enabled(self) -> bool:
        """Whether the login form is offered (a token is set)."""
        return self.token is not None

    # ---- access -------------------------------------------------------------------

    async def check_access(self, request: Request) -> Denied | None:
        """None when the request may proceed, else why not."""
        if self.auth is not None:
            verdict = self.auth(request)
            if inspect.isawaitable(verdict):
                verdict = await verdict
            if verdict:
                return None
            if self.token is None:
                return Denied(403, "you are not allowed to use this dashboard")
        if self.token is not None:
            if self._bearer_ok(request) or self.session_ok(request.cookies.get(SESSION_COOKIE)):
                return None
            return Denied(401, "log in with the dashboard's token", login=True)
        client = request.client.host if request.client else None
        if client is not None and not is_loopback(client):
            return Denied(
                403,
                "this dashboard has no authentication configured, so it only answers "
                "loopback clients; give it a token or an auth callable",
            )
        host = _host_without_port(request.headers.get("host", ""))
        if not is_loopback(host):
            return Denied(
                403,
                f"this dashboard has no authentication configured, so it only answers "
                f"requests for a loopback host, not {host[:80]!r}; give it a token",
            )
        return None

    def token_matches(self, given: str) -> bool:
        """Whether ``given`` is the token (constant time)."""
        if self.token is None:
            return False
        return hmac.compare_digest(given.encode(), self.token.encode())

    def _bearer_ok(self, request: Request) -> bool:
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and self.token_matches(given.strip())

    def new_session(self) -> str:
        """A session cookie value: its expiry, a nonce and their signature."""
        assert self._session_key is not None
        body = f"{int(time.time()) + SESSION_SECONDS}.{secrets.token_hex(16)}"
        return f"{body}.{_sign(self._session_key, body)}"

    def session_ok(self, value: str | None) -> bool:
        """Whether ``value`` is a live session signed for the current token."""
        if self._session_key is None or not value or value.count(".") != 2:
            return False
        body, _, signature = value.rpartition(".")
        if not hmac.compare_digest(signature, _sign(self._session_key, body)):
            return False
        expires = body.split(".", 1)[0]
        return expires.isdigit() and int(expires) > time.time()

    # ---- cross-site requests ------------------------------------------------------

    def csrf_cookie(self, request: Request) -> tuple[str, bool]:
        """This browser's CSRF cookie value, and whether it is new (to be set)."""
        current = request.cookies.get(CSRF_COOKIE, "")
        if len(current) == 64 and all(c in "0123456789abcdef" for c in current):
            return current, False
        return secrets.token_hex(32), True

    def csrf_token(self, cookie: str) -> str:
        """The form token that goes with the CSRF cookie ``cookie``."""
        return _sign(self._csrf_key, cookie)

    def check_post(self, request: Request, form: Mapping[str, Sequence[str]]) -> Denied | None:
        """None when a POST is genuine (same origin, valid CSRF token), else why not."""
        origin = request.headers.get("origin")
        referer = request.headers.get("referer")
        source = origin if origin is not None else referer
        if source is not None and not self._same_origin(request, source):
            return Denied(403, f"cross-site request refused (from {source[:100]!r})")
        cookie = request.cookies.get(CSRF_COOKIE, "")
        given = form.get(CSRF_FIELD, [])
        if not cookie or len(given) != 1:
            return Denied(403, "the form has no valid CSRF token: reload the page and try again")
        if not hmac.compare_digest(given[0], self.csrf_token(cookie)):
            return Denied(403, "the form's CSRF token is not valid: reload the page and try again")
        return None

    def _same_origin(self, request: Request, source: str) -> bool:
        if source == "null":
            return False
        parts = urlsplit(source)
        if not parts.scheme or not parts.netloc:
            return False
        if f"{parts.scheme}://{parts.netloc}".lower() in self.trusted_origins:
            return True
        return parts.netloc.lower() == request.headers.get("host", "").lower()
