"""Codecs for values at rest (docs/guides/data-at-rest.md): ``AesGcmCodec`` itself, and
an engine with a codec on both stores: every user value sealed at rest and given back
plain, on replay too; keys that rotate; a key that is missing."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest

from engine_core import CodecError, Engine, WorkflowContext, current_step
from engine_core.codecs import AesGcmCodec, PayloadCodec
from engine_core.codecs.sealed_store import PASSED_THROUGH, SealedStore
from engine_core.codecs.sealing import SEALED, Undecoded, showing_undecodable
from engine_core.common.journal import merged_steps
from engine_core.store import Store
from tests.support.waiting import reaches

K1, K2 = os.urandom(32), os.urandom(16)
MARK = "PLAIN-MARKER-7f3a"


def codec(current: str = "k1", **keys: bytes) -> AesGcmCodec:
    return AesGcmCodec(keys=keys or {"k1": K1}, current=current)


# ---- AesGcmCodec ----------------------------------------------------------------------


def test_aes_gcm_round_trips_and_stores_its_key_id_beside_the_value() -> None:
    c = codec()
    sealed = c.encode(b'{"a":1}')
    assert sealed[2:4] == b"k1" and b'{"a":1}' not in sealed
    assert c.decode(sealed) == b'{"a":1}'
    assert c.encode(b"x") != c.encode(b"x")  # a fresh nonce each time
    assert isinstance(c, PayloadCodec)
    assert "k1" in repr(c) and K1.hex() not in repr(c)


def test_rotation_decodes_old_values_and_writes_new_ones_with_the_current_key() -> None:
    old = codec().encode(b"old")
    rotated = AesGcmCodec(keys={"k2": K2, "k1": K1}, current="k2")
    assert rotated.decode(old) == b"old"
    assert rotated.encode(b"new")[2:4] == b"k2"


def test_an_unknown_key_id_or_altered_data_raises_codec_error() -> None:
    sealed = codec().encode(b"secret")
    with pytest.raises(CodecError, match=r"key id 'k1'.*does not hold"):
        AesGcmCodec(keys={"k2": K2}, current="k2").decode(sealed)
    with pytest.raises(CodecError, match="failed authentication with key id 'k1'"):
        AesGcmCodec(keys={"k1": os.urandom(32)}, current="k1").decode(sealed)
    with pytest.raises(CodecError, match="failed authentication"):
        codec().decode(sealed[:-1] + bytes([sealed[-1] ^ 1]))
    with pytest.raises(CodecError, match="not in AesGcmCodec's format"):
        codec().decode(b"\x07garbage")


@pytest.mark.parametrize(
    ("keys", "current", "message"),
    [
        ({"k1": b"short"}, "k1", "key 'k1' is 5 bytes; AES-GCM takes a key of 16, 24 or 32"),
        ({"k1": "a string key"}, "k1", "key 'k1' is str"),
        ({}, "k1", "at least one key"),
        ({"k1": K1}, "k9", "current='k9' is not among the key ids"),
        ({"": K1}, "", "a key id must be a string of 1 to 255 bytes"),
    ],
)
def test_bad_keys_raise_a_value_error_at_construction(
    keys: dict[str, Any], current: str, message: str
) -> None:
    with pytest.raises(CodecError, match=message) as raised:
        AesGcmCodec(keys=keys, current=current)
    assert isinstance(raised.value, ValueError)


def test_a_codec_must_have_encode_and_decode() -> None:
    from engine_core.memory import InMemoryStore

    with pytest.raises(ValueError, match="encode"):
        Engine(InMemoryStore(), codec=object())  # type: ignore[arg-type]


def test_every_store_method_is_sealed_or_passed_through() -> None:
    protocol = {
        n
        for part in Store.__mro__
        if part.__module__.startswith("engine_core.store")
        for n, value in vars(part).items()
        if not n.startswith("_") and callable(value)
    }
    sealed = {n for n in vars(SealedStore) if not n.startswith("_")} - {"sealer", "inner"}
    assert protocol == sealed | PASSED_THROUGH
    assert not sealed & PASSED_THROUGH


# ---- an engine with a codec, on both stores ---------------------------------------------


def register(engine: Engine) -> None:
    async def fetch(n: int) -> dict[str, Any]:
        info = current_step()
        assert info is not None
        await info.heartbeat({"at": MARK})
        await info.write_stream("log", f"fetched {MARK}")
        return {"n": n, "mark": MARK}

    async def broken() -> None:
        raise RuntimeError(f"it broke: {MARK}")

    @engine.step_function("notify")
    async def notify(payload: dict[str, Any]) -> str:
        return f"sent {payload['to']}"

    @engine.workflow("kid")
    async def kid(ctx: WorkflowContext, data: str) -> str:
        return data + "!"

    @engine.workflow("sealed")
    async def sealed(ctx: WorkflowContext, data: dict[str, Any]) -> dict[str, Any]:
        got = await ctx.step("fetch", fetch, 1)
        try:
            await ctx.step("broken", broken)
        except Exception as exc:
            failure = str(exc)
        sent = await ctx.dispatch("notify", "notify", {"to": MARK})
        await ctx.write_stream("progress", {"mark": MARK})
        approval = await ctx.wait_for_event("approval", timeout="30s")
        await ctx.set_value("stage", {"mark": MARK})
        asked = await ctx.wait_for_update("confirm", timeout="30s")
        assert asked is not None
        await asked.reply({"ok": asked.payload["mark"]})
        child = await ctx.child("kid", "kid", MARK)
        await ctx.sleep("nap", "50ms")
        return {"got": got, "failure": failure, "sent": sent, "approval": approval, "kid": child}


EXPECTED = {
    "got": {"n": 1, "mark": MARK},
    "failure": f"step 'broken' failed after 1 attempt(s): RuntimeError: it broke: {MARK}",
    "sent": f"sent {MARK}",
    "approval": {"ok": MARK},
    "kid": MARK + "!",
}


async def run_sealed(engine: Engine) -> str:
    register(engine)
    async with engine:
        run_id = await engine.start("sealed", {"order": MARK}, run_id="sealed-1")
        await reaches(engine, run_id, "approval")
        await engine.send_event(run_id, "approval", {"ok": MARK})
        assert await engine.get_value(run_id, "stage", timeout=30) == {"mark": MARK}
        answer = await engine.update(run_id, "confirm", {"mark": MARK}, timeout=30)
        assert answer == {"ok": MARK}
        assert await engine.result(run_id, timeout=30) == EXPECTED
    return run_id


def _contains_mark(value: Any) -> bool:
    return MARK in repr(value)


async def test_every_user_value_is_sealed_at_rest_and_read_back_plain(store: Store) -> None:
    engine = Engine(store, codec=codec(), lease_ttl="5s")
    run_id = await run_sealed(engine)
    status = await engine.status(run_id)
    assert status.input == {"order": MARK} and status.output == EXPECTED
    assert status.steps["broken"].error is not None
    assert MARK in status.steps["broken"].error["message"]
    assert MARK in status.steps["broken"].error["stack"]
    history = await engine.history(run_id)
    assert any(e.error and MARK in e.error["message"] for e in history)
    streams = [e.value async for e in engine.read_stream(run_id, "progress", timeout=5)]
    assert streams == [{"mark": MARK}]
    # What the store itself holds: no value in clear.
    raw = store  # the store itself, under the engine's SealedStore
    run = await raw.get_run(run_id)
    assert run is not None and type(run.input) is bytes and type(run.output) is bytes
    steps = {s.key: s for s in merged_steps(run, await raw.load_steps(run_id))}
    for key in ("fetch", "notify", "approval", "kid"):
        assert type(steps[key].result) is bytes, key
    assert type(steps["notify"].payload) is bytes
    error = steps["broken"].error
    assert error is not None and error["type"] == "RuntimeError" and SEALED in error
    assert "message" not in error and "stack" not in error
    assert not _contains_mark(steps) and not _contains_mark(run)
    entries = await raw.stream_entries(run_id, "progress", offset=0, limit=10)
    assert entries and not _contains_mark(entries)
    beat = await raw.get_heartbeat(run_id, "fetch")
    assert beat is not None and type(beat[1]) is bytes
    assert status.values == {"stage": {"mark": MARK}}
    (value,) = await raw.list_values(run_id)
    assert type(value.value) is bytes
    (update,) = await raw.list_updates(run_id, pending=False)
    assert type(update.payload) is bytes and type(update.answer) is bytes
    assert not _contains_mark(value) and not _contains_mark(update)


async def test_a_debounced_start_seals_its_input(store: Store) -> None:
    engine = Engine(store, codec=codec(), lease_ttl="5s")

    @engine.workflow("later")
    async def later(ctx: WorkflowContext, data: str) -> str:
        return data

    first = await engine.start("later", "first", debounce_key="k", debounce="1h")
    again = await engine.start("later", MARK, debounce_key="k", debounce="1h")
    assert again == first
    stored = await store.get_run(first)
    assert stored is not None and type(stored.input) is bytes and MARK not in repr(stored)
    assert (await engine.status(first)).input == MARK


async def test_a_run_continues_across_a_key_rotation(store: Store) -> None:
    first = Engine(store, codec=codec(), lease_ttl="5s")

    @first.workflow("two-halves")
    async def two_halves(ctx: WorkflowContext, data: str) -> list[str]:
        a = await ctx.step("a", lambda: data + "-a")
        more = await ctx.wait_for_event("more", timeout="30s")
        b = await ctx.step("b", lambda: more + "-b")
        return [a, b]

    async with first:
        run_id = await first.start("two-halves", MARK)
        await asyncio.sleep(0.2)
    rotated = AesGcmCodec(keys={"k2": K2, "k1": K1}, current="k2")
    second = Engine(store, codec=rotated, lease_ttl="5s")
    second.workflow("two-halves")(two_halves)
    async with second:
        await second.send_event(run_id, "more", "x")
        assert await second.result(run_id, timeout=30) == [MARK + "-a", "x-b"]
    run = await store.get_run(run_id)
    assert run is not None
    steps = {s.key: s for s in merged_steps(run, await store.load_steps(run_id))}
    assert steps["a"].result[2:4] == b"k1"  # written before the rotation: kept as it was
    assert steps["b"].result[2:4] == b"k2"


async def test_a_missing_key_raises_codec_error_naming_it(store: Store) -> None:
    engine = Engine(store, codec=codec(), lease_ttl="5s")

    @engine.workflow("plain-steps")
    async def plain_steps(ctx: WorkflowContext, data: str) -> str:
        await ctx.step("s", lambda: "fails: " + data)
        return data

    async with engine:
        run_id = await engine.start("plain-steps", MARK)
        assert await engine.result(run_id, timeout=30) == MARK
    other = Engine(store, codec=AesGcmCodec(keys={"k2": K2}, current="k2"))
    with pytest.raises(CodecError, match="key id 'k1'"):
        await other.status(run_id)
    with pytest.raises(CodecError, match="key id 'k1'"):
        await other.result(run_id, timeout=5)
    with pytest.raises(CodecError, match="key id 'k1'"):
        await other.list_runs()
    bare = Engine(store)
    with pytest.raises(CodecError, match="this engine has none"):
        await bare.status(run_id)
    with showing_undecodable():  # how the CLI and the dashboard read
        shown = await bare.status(run_id)
        listed = await bare.list_runs()
    assert shown.input == "encrypted" and isinstance(shown.input, Undecoded)
    assert shown.steps["s"].result == "encrypted"
    assert listed[0].output == "encrypted"
    # Steering a run needs no key: a cancel of an ended run changes nothing.
    await other.cancel(run_id)
    assert await engine.result(run_id, timeout=5) == MARK


async def test_none_stays_none_and_old_plain_values_read_with_a_codec(store: Store) -> None:
    plain = Engine(store, lease_ttl="5s")

    @plain.workflow("nothing")
    async def nothing(ctx: WorkflowContext, data: Any) -> Any:
        await ctx.step("none", lambda: None)
        return data

    async with plain:
        old = await plain.start("nothing", {"kept": "plain"})
        assert await plain.result(old, timeout=30) == {"kept": "plain"}
    sealed = Engine(store, codec=codec(), lease_ttl="5s")
    sealed.workflow("nothing")(nothing)
    async with sealed:
        assert await sealed.result(old, timeout=5) == {"kept": "plain"}
        new = await sealed.start("nothing", None)
        assert await sealed.result(new, timeout=30) is None
    run = await store.get_run(new)
    assert run is not None and run.input is None and run.output is None
