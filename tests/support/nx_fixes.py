"""A fix applied to nx-27017 when the tests start it (:mod:`tests.support.nx_servers`).

nx-27017 0.8.1 keeps its documents with neosqlite 1.17.2, whose ``update_one`` tries
a SQL update, then a simpler one, then a Python one. Under load, with other
connections busy on the same database, the first now and then raises "No rows updated"
(having applied the update all the same), the second cannot bind a document value
(``Error binding parameter: type 'dict' is not supported``), and the Python path
rewrites the whole document from the one read before the update: with its ``$set``
applied, but not its ``$unset`` of a dotted path, which it pops as a top-level key
(a no-op). The update is reported modified. So, about once in 50 runs of
tests/mongo/test_outcomes_beside.py on a loaded machine, a pass's write that carried
16 outcomes beside the run left in the run's journal the 15 it had taken out of it (and
the finished step's in-flight mark), and the journal ended at 31 entries. MongoDB
applies an update whole; :func:`apply` makes the Python path remove the dotted fields
of ``$unset`` too, so the test server does the same.
"""

from __future__ import annotations

from typing import Any

#: Marks the wrapped method (so :func:`apply` wraps it once).
_FIXED = "_pikku_dotted_unset"


def _unset_path(doc: dict[str, Any], path: str) -> bool:
    """Remove the field at dotted ``path`` from ``doc``; whether there was one."""
    *parents, last = path.split(".")
    holder: Any = doc
    for name in parents:
        holder = holder.get(name) if isinstance(holder, dict) else None
    if isinstance(holder, dict) and last in holder:
        del holder[last]
        return True
    return False


def apply() -> None:
    """Make neosqlite's Python update path honour ``$unset`` of dotted paths."""
    from neosqlite.collection.json_helpers import neosqlite_json_dumps
    from neosqlite.collection.query_helper.update_operations import UpdateOperationsMixin
    from neosqlite.sql_utils import quote_table_name

    python_update = UpdateOperationsMixin._perform_python_update
    if getattr(python_update, _FIXED, False):
        return

    def fixed(
        self: Any, doc_id: Any, update_spec: dict[str, Any], original_doc: dict[str, Any],
        *args: Any, **kwargs: Any,
    ) -> tuple[dict[str, Any], bool]:  # fmt: skip
        doc, modified = python_update(self, doc_id, update_spec, original_doc, *args, **kwargs)
        unset = update_spec.get("$unset") or {}
        removed = [_unset_path(doc, path) for path in unset if "." in path]
        if not any(removed):
            return doc, modified
        if doc_id != 0:  # 0: an upsert's new document, which the caller inserts
            self.collection.db.execute(
                f"UPDATE {quote_table_name(self.collection.name)} SET data = ? WHERE id = ?",
                (neosqlite_json_dumps(doc), self._get_integer_id_for_oid(doc_id)),
            )
        return doc, doc != original_doc

    setattr(fixed, _FIXED, True)
    UpdateOperationsMixin._perform_python_update = fixed  # type: ignore[method-assign]
