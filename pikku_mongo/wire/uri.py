"""What a MongoDB URI says, read without asking any server: its database, and the URI
fit for a message (its credentials hidden)."""

from __future__ import annotations

from typing import cast

from pymongo import uri_parser


def database_name(uri: str) -> str | None:
    """The database in the URI's path, parsed without the DNS lookups of a
    ``mongodb+srv://`` URI (the path means the same in both schemes; the client does
    its SRV resolution itself, asynchronously)."""
    srv = "mongodb+srv://"
    plain = "mongodb://" + uri[len(srv) :] if uri.startswith(srv) else uri
    parsed = uri_parser.parse_uri(plain, validate=False)
    return cast(str | None, parsed.get("database"))


def redact(uri: str) -> str:
    """The URI without its credentials, for messages."""
    scheme, sep, rest = uri.partition("://")
    if not sep:
        return uri
    hosts, slash, tail = rest.partition("/")
    if "@" in hosts:
        hosts = "***@" + hosts.rsplit("@", 1)[1]
    return f"{scheme}{sep}{hosts}{slash}{tail}"
