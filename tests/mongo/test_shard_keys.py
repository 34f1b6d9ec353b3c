"""The shard-key check itself, on commands as PyMongo sends them."""

from __future__ import annotations

from typing import Any

from pikku_mongo.wire.shard_keys import step_filter
from tests.support.shard_key_check import missing_shard_keys, run_filter


def _missing(name: str, command: dict[str, Any]) -> list[str]:
    return list(missing_shard_keys(name, command, "p_"))


def test_a_step_write_by_id_alone_is_refused() -> None:
    by_id = {"update": "p_steps", "updates": [{"q": {"_id": "r\x00k"}, "u": {"$set": {}}}]}
    assert len(_missing("update", by_id)) == 1
    carried = {"update": "p_steps", "updates": [{"q": step_filter("r", "k"), "u": {}}]}
    assert _missing("update", carried) == []


def test_each_op_of_a_client_bulk_write_is_checked_in_its_namespace() -> None:
    command = {
        "bulkWrite": 1,
        "nsInfo": [{"ns": "db.p_runs"}, {"ns": "db.p_steps"}],
        "ops": [
            {"update": 0, "filter": run_filter("r"), "updateMods": {}, "upsert": True},
            {"update": 1, "filter": step_filter("r", "k"), "updateMods": {}, "upsert": True},
            {"update": 1, "filter": {"_id": "r\x00j"}, "updateMods": {}, "upsert": True},
            {"insert": 1, "document": {"_id": "r\x00i"}},
        ],
    }
    assert len(_missing("bulkWrite", command)) == 2


def test_an_upsert_needs_the_key_even_when_multi() -> None:
    upsert = {"q": {"_id": "x"}, "u": {}, "multi": True, "upsert": True}
    assert len(_missing("update", {"update": "p_events", "updates": [upsert]})) == 1
    multi = {"q": {"status": "x"}, "u": {}, "multi": True}
    assert _missing("update", {"update": "p_steps", "updates": [multi]}) == []


def test_ranges_are_not_equalities() -> None:
    ranged = {"findAndModify": "p_runs", "query": {"_id": {"$in": ["a"]}}}
    assert len(_missing("findAndModify", ranged)) == 1
    assert _missing("findAndModify", {"findAndModify": "p_runs", "query": run_filter("a")}) == []


def test_deletes_of_one_and_inserts() -> None:
    one = {"delete": "p_steps", "deletes": [{"q": {"_id": "a"}, "limit": 1}]}
    many = {"delete": "p_steps", "deletes": [{"q": {"_id": "a"}, "limit": 0}]}
    assert len(_missing("delete", one)) == 1
    assert _missing("delete", many) == []
    keyless = {"insert": "p_events", "documents": [{"_id": 1}, {"_id": 2, "run_id": "r"}]}
    assert len(_missing("insert", keyless)) == 1


def test_unsharded_and_foreign_collections_are_not_checked() -> None:
    for collection in ("p_leases", "p_queues", "other_steps"):
        command = {"update": collection, "updates": [{"q": {"x": 1}, "u": {}}]}
        assert _missing("update", command) == []
