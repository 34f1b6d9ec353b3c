"""The key that signs the dashboard's CSRF tokens, the same in every serving process.

A form loaded from one process and posted to another (``uvicorn --workers 2``, several
pods behind one address) is genuine only if both sign with one key. In this order:
the ``secret`` given to ``dashboard_app`` (``str`` or ``bytes``), else the environment's
``PIKKU_DASHBOARD_SECRET``, else a key derived from the dashboard's ``token`` (every
process given the token agrees), else a random key of this process, with a warning
(once) when other processes may be serving the same address.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import multiprocessing
import os
import secrets

from engine_core import InvalidOptionError

log = logging.getLogger("pikku_mongo.dashboard")

ENV_SECRET = "PIKKU_DASHBOARD_SECRET"
_warned = False


def csrf_key(secret: object, token: str | None) -> bytes:
    """The CSRF signing key (see the module docstring); :class:`InvalidOptionError`
    for a ``secret`` that is not a non-empty ``str`` or ``bytes``."""
    if secret is None:
        secret = os.environ.get(ENV_SECRET) or None
    if secret is not None:
        if isinstance(secret, str):
            secret = secret.encode()
        if not isinstance(secret, bytes) or not secret:
            raise InvalidOptionError(
                "the dashboard secret must be a non-empty str or bytes (the same in every "
                f"process that serves the dashboard), not {type(secret).__name__}"
            )
        return secret
    if token is not None:
        return hmac.new(token.encode(), b"pikku-mongo dashboard csrf", hashlib.sha256).digest()
    if several_processes_likely():
        _warn_once()
    return secrets.token_bytes(32)


def several_processes_likely() -> bool:
    """Whether this process is likely one of several serving one address: a worker
    started by a process manager (uvicorn ``--workers``, gunicorn, multiprocessing), or
    ``WEB_CONCURRENCY`` above 1."""
    concurrency = os.environ.get("WEB_CONCURRENCY", "")
    if concurrency.isdigit() and int(concurrency) > 1:
        return True
    if "gunicorn" in os.environ.get("SERVER_SOFTWARE", "").lower():
        return True
    return multiprocessing.parent_process() is not None


def _warn_once() -> None:
    global _warned
    if _warned:
        return
    _warned = True
    log.warning(
        "the dashboard signs its forms with a random key of this process: behind several "
        "processes (uvicorn --workers, several pods) about half of its actions will be "
        "refused; give every process the same dashboard_app(secret=...) or set %s",
        ENV_SECRET,
    )
