"""Every document a ``MongoStore`` holds, read straight from its collections (for tests
that check what is at rest: no value in clear, no document past a size)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from pymongo.asynchronous.collection import AsyncCollection

from pikku_mongo import MongoStore


def store_collections(store: MongoStore) -> dict[str, AsyncCollection[Any]]:
    """The store's collections by name."""
    return {c.name: c for c in vars(store).values() if isinstance(c, AsyncCollection)}


async def stored_documents(store: MongoStore) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """(collection, document) for every document of every collection in the store's
    database. nx-27017 lists a collection named with a dot (GridFS's ``x.files``) with an
    underscore and cannot read it under that name: such a one is read by its real name."""
    known = store_collections(store)
    by_listed = {name.replace(".", "_"): c for name, c in known.items()}
    for name in await store.database.list_collection_names():
        collection = known[name] if name in known else by_listed.get(name)
        assert collection is not None, f"a collection the store does not know: {name}"
        async for doc in collection.find({}):
            yield collection.name, doc
