"""A loopback TCP proxy between MongoDB clients and a wire server, with faults on demand.

It reads the MongoDB wire protocol message by message (16-byte header: length,
requestID, responseTo, opCode) and decodes ``OP_MSG`` requests: the first section's
BSON document is the command (its first key is the command name: ``insert``,
``update``, ``findAndModify``...); document sequences (``documents`` of an insert,
``updates`` of an update) are merged into it under their identifier. Faults:

* **reset at random**: ``proxy.reset_rate = 0.05`` resets the client's connection
  (TCP RST) on 5 % of requests, half of them before the request reaches the server
  (lost request), half after it was processed (lost reply);
* **drop a reply**: ``proxy.drop_reply("findAndModify", where={...})`` forwards the
  matching request, lets the server process it, swallows its reply and resets the
  client's connection: the driver sees a network error for a write that landed;
* **freeze**: ``proxy.freeze(3)`` stops forwarding anything, both ways, for 3 s (or
  until ``thaw()``), connections held open;
* **on/off**: ``proxy.enabled = False`` forwards everything untouched; rules and the
  reset rate stay configured for when it is enabled again.

``proxy.stamp_times = True`` gives replies a replica set's clock (see
:mod:`tests.support.wire_clock`); with ``proxy.record = True``, ``proxy.exchanges`` lists
each request's command and the time stamped on its reply.

In the test's own event loop::

    async with FaultProxy(server.host, server.port) as proxy:
        store = MongoStore.from_uri(proxy.uri("db"))
        rule = proxy.drop_reply("insert", where={"insert": "pikku_runs"})
        ...
        await rule.wait(5)            # the reply was swallowed

As a process of its own (worker subprocesses through it; the test may block meanwhile),
controlled over a control socket, one JSON object per line::

    with ProxyProcess.start(server.host, server.port) as proxy:
        proxy.set(reset_rate=0.02)
        rule = proxy.drop_reply("update", where={"update": "pikku_runs"})
        proxy.rule(rule)              # {"hits": 1, "remaining": 0}

    python -m tests.support.proxy UPSTREAM_HOST:PORT [--port N] [--control-port N]

``where`` is a dict of dotted paths (list indexes allowed: ``updates.0.u.$set.status``)
to values the command must hold; in-process rules may also pass a callable.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import bson

from tests.support.wire_clock import Exchange, stamp_times

__all__ = ["DropRule", "Exchange", "FaultProxy", "ProxyProcess", "decode_op_msg", "matches"]

OP_MSG = 2013
_HEADER = struct.Struct("<iiii")
_CHECKSUM_PRESENT = 1

Where = dict[str, Any] | Callable[[dict[str, Any]], bool] | None


def decode_op_msg(payload: bytes) -> dict[str, Any] | None:
    """The command of an OP_MSG body (after the header): the kind-0 document with the
    kind-1 document sequences merged in. None when it cannot be parsed."""
    try:
        (flags,) = struct.unpack_from("<I", payload, 0)
        end = len(payload) - (4 if flags & _CHECKSUM_PRESENT else 0)
        pos = 4
        command: dict[str, Any] | None = None
        sequences: dict[str, list[Any]] = {}
        while pos < end:
            kind = payload[pos]
            pos += 1
            (size,) = struct.unpack_from("<i", payload, pos)
            if kind == 0:
                command = bson.decode(payload[pos : pos + size])
                pos += size
            elif kind == 1:
                section_end = pos + size
                name_end = payload.index(b"\x00", pos + 4)
                identifier = payload[pos + 4 : name_end].decode()
                docs = sequences.setdefault(identifier, [])
                cursor = name_end + 1
                while cursor < section_end:
                    (doc_size,) = struct.unpack_from("<i", payload, cursor)
                    docs.append(bson.decode(payload[cursor : cursor + doc_size]))
                    cursor += doc_size
                pos = section_end
            else:
                return None
    except (ValueError, struct.error, bson.errors.BSONError, IndexError):
        return None
    if command is None:
        return None
    command.update(sequences)
    return command


_MISSING = object()


def _lookup(document: Any, path: str) -> Any:
    value = document
    for part in path.split("."):
        if isinstance(value, dict):
            value = value.get(part, _MISSING)
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return _MISSING
        if value is _MISSING:
            return _MISSING
    return value


def matches(command: dict[str, Any], where: Where) -> bool:
    """Whether ``command`` satisfies ``where`` (dotted-path equalities, or a callable)."""
    if where is None:
        return True
    if callable(where):
        return bool(where(command))
    return all(_lookup(command, path) == want for path, want in where.items())


@dataclass
class DropRule:
    """Swallow the reply to the next ``times`` requests matching ``command``/``where``."""

    command: str
    where: Where = None
    times: int = 1
    #: The commands whose replies were swallowed.
    hits: list[dict[str, Any]] = field(default_factory=list)
    _done: asyncio.Event = field(default_factory=asyncio.Event, repr=False)

    @property
    def remaining(self) -> int:
        return self.times - len(self.hits)

    def wants(self, name: str, command: dict[str, Any]) -> bool:
        return self.remaining > 0 and name == self.command and matches(command, self.where)

    async def wait(self, timeout: float = 10.0) -> dict[str, Any]:
        """The first swallowed command, once its reply has been dropped."""
        await asyncio.wait_for(self._done.wait(), timeout)
        return self.hits[0]


class _Pair:
    """One client connection and its upstream connection."""

    def __init__(self, client: asyncio.StreamWriter, upstream: asyncio.StreamWriter) -> None:
        self.client = client
        self.upstream = upstream
        self.swallow: dict[int, DropRule | None] = {}  # requestID -> rule (None: random)
        self.pending: dict[int, Exchange] = {}  # requestID -> its recorded exchange
        self.closed = False

    def reset(self) -> None:
        """Abort both sides; the client gets an RST, not a clean close."""
        if self.closed:
            return
        self.closed = True
        for writer in (self.client, self.upstream):
            sock = writer.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()


async def _read_message(reader: asyncio.StreamReader) -> bytes | None:
    try:
        header = await reader.readexactly(_HEADER.size)
        (length, *_rest) = _HEADER.unpack(header)
        body = await reader.readexactly(length - _HEADER.size)
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    return header + body


class FaultProxy:
    """The proxy, in the caller's event loop (see the module docstring)."""

    def __init__(
        self,
        upstream_host: str,
        upstream_port: int,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        seed: int | None = None,
    ) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.host = host
        self._port = port
        self.enabled = True
        self.reset_rate = 0.0
        self.rules: list[DropRule] = []
        self.random = random.Random(seed)
        self.stats = {"connections": 0, "requests": 0, "resets": 0, "dropped": 0}
        self.stamp_times = False
        self.record = False
        self.exchanges: list[Exchange] = []
        self._time = bson.Timestamp(int(time.time()), 0)
        self._server: asyncio.Server | None = None
        self._pairs: set[_Pair] = set()
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._thaw_handle: asyncio.TimerHandle | None = None

    # ---- lifecycle --------------------------------------------------------------

    async def start(self) -> FaultProxy:
        self._server = await asyncio.start_server(self._serve, self.host, self._port)
        self._port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def stop(self) -> None:
        self.thaw()
        if self._server is not None:
            self._server.close()
            for pair in list(self._pairs):
                pair.reset()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)
            self._server = None

    async def __aenter__(self) -> FaultProxy:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    @property
    def port(self) -> int:
        return self._port

    def uri(self, database: str = "") -> str:
        """A URI through the proxy (one server, so ``directConnection``)."""
        return f"mongodb://{self.host}:{self.port}/{database}?directConnection=true"

    # ---- faults -----------------------------------------------------------------

    def drop_reply(self, command: str, where: Where = None, *, times: int = 1) -> DropRule:
        """Swallow the replies to the next ``times`` matching requests (see module)."""
        rule = DropRule(command, where, times)
        self.rules.append(rule)
        return rule

    def freeze(self, seconds: float | None = None) -> None:
        """Stop forwarding, both ways, for ``seconds`` (None: until :meth:`thaw`)."""
        self._flowing.clear()
        if self._thaw_handle is not None:
            self._thaw_handle.cancel()
            self._thaw_handle = None
        if seconds is not None:
            self._thaw_handle = asyncio.get_running_loop().call_later(seconds, self.thaw)

    def thaw(self) -> None:
        if self._thaw_handle is not None:
            self._thaw_handle.cancel()
            self._thaw_handle = None
        self._flowing.set()

    @property
    def frozen(self) -> bool:
        return not self._flowing.is_set()

    def reset_all(self) -> int:
        """Reset every open connection now; returns how many."""
        pairs = [p for p in self._pairs if not p.closed]
        for pair in pairs:
            pair.reset()
        self.stats["resets"] += len(pairs)
        return len(pairs)

    # ---- forwarding -------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self._flowing.wait()
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.transport.abort()
            return
        pair = _Pair(writer, up_writer)
        self._pairs.add(pair)
        self.stats["connections"] += 1
        try:
            await asyncio.gather(self._requests(reader, pair), self._replies(up_reader, pair))
        finally:
            self._pairs.discard(pair)
            pair.reset()

    async def _requests(self, reader: asyncio.StreamReader, pair: _Pair) -> None:
        while not pair.closed:
            message = await _read_message(reader)
            if message is None:
                break
            await self._flowing.wait()
            if pair.closed:
                break
            self.stats["requests"] += 1
            _length, request_id, _response_to, op_code = _HEADER.unpack_from(message)
            if self.record and op_code == OP_MSG:
                exchange = Exchange(decode_op_msg(message[_HEADER.size :]) or {})
                self.exchanges.append(exchange)
                pair.pending[request_id] = exchange
            if self.enabled and op_code == OP_MSG:
                command = decode_op_msg(message[_HEADER.size :]) or {}
                name = next(iter(command), "")
                for rule in self.rules:
                    if rule.wants(name, command):
                        rule.hits.append(command)
                        pair.swallow[request_id] = rule
                        break
                else:
                    if self.reset_rate and self.random.random() < self.reset_rate:
                        if self.random.random() < 0.5:
                            self.stats["resets"] += 1
                            pair.reset()  # the request is lost
                            break
                        pair.swallow[request_id] = None  # the reply will be
            try:
                pair.upstream.write(message)
                await pair.upstream.drain()
            except ConnectionError:
                break

    async def _replies(self, reader: asyncio.StreamReader, pair: _Pair) -> None:
        while not pair.closed:
            message = await _read_message(reader)
            if message is None:
                break
            await self._flowing.wait()
            if pair.closed:
                break
            response_to = _HEADER.unpack_from(message)[2]
            if response_to in pair.swallow:
                rule = pair.swallow.pop(response_to)
                self.stats["dropped" if rule is not None else "resets"] += 1
                pair.reset()
                if rule is not None:
                    rule._done.set()
                break
            exchange = pair.pending.pop(response_to, None) or Exchange({})  # unrecorded
            if self.stamp_times and _HEADER.unpack_from(message)[3] == OP_MSG:
                self._time = bson.Timestamp(self._time.time, self._time.inc + 1)
                message = stamp_times(message, self._time)
                exchange.operation_time = self._time
            try:
                pair.client.write(message)
                await pair.client.drain()
            except ConnectionError:
                break


# ---- the proxy as a process of its own, and its control socket ---------------------


class _Control:
    """Serves the control socket of a proxy process."""

    def __init__(self, proxy: FaultProxy) -> None:
        self.proxy = proxy

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while line := await reader.readline():
            try:
                reply = self.handle(json.loads(line))
            except Exception as exc:
                reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            writer.write((json.dumps(reply) + "\n").encode())
            await writer.drain()
        writer.close()

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        proxy, op = self.proxy, request.get("op")
        if op == "set":
            if "enabled" in request:
                proxy.enabled = bool(request["enabled"])
            if "reset_rate" in request:
                proxy.reset_rate = float(request["reset_rate"])
            if "stamp_times" in request:
                proxy.stamp_times = bool(request["stamp_times"])
            return {"ok": True}
        if op == "drop":
            rule = proxy.drop_reply(
                request["command"], request.get("where"), times=int(request.get("times", 1))
            )
            return {"ok": True, "rule": len(proxy.rules) - 1, "remaining": rule.remaining}
        if op == "rule":
            found = proxy.rules[int(request["rule"])]
            return {"ok": True, "hits": len(found.hits), "remaining": found.remaining}
        if op == "freeze":
            proxy.freeze(request.get("seconds"))
            return {"ok": True}
        if op == "thaw":
            proxy.thaw()
            return {"ok": True}
        if op == "reset_all":
            return {"ok": True, "reset": proxy.reset_all()}
        if op == "stats":
            return {"ok": True, **proxy.stats, "enabled": proxy.enabled}
        return {"ok": False, "error": f"unknown op {op!r}"}


class ProxyProcess:
    """A proxy running as a subprocess, driven through its control socket (blocking
    calls: the proxy keeps forwarding whatever the test does meanwhile)."""

    def __init__(self, process: subprocess.Popen[str], port: int, control_port: int) -> None:
        self.process = process
        self.host = "127.0.0.1"
        self.port = port
        self.control_port = control_port
        self._sock = socket.create_connection((self.host, control_port), timeout=10)
        self._file = self._sock.makefile("rw", encoding="utf-8")

    @classmethod
    def start(cls, upstream_host: str, upstream_port: int, *, seed: int = 0) -> ProxyProcess:
        root = Path(__file__).resolve().parents[2]
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.proxy", f"{upstream_host}:{upstream_port}",
             "--seed", str(seed)],
            cwd=root, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert process.stdout is not None
        line = process.stdout.readline().split()
        if len(line) != 3 or line[0] != "READY":
            process.kill()
            raise RuntimeError(f"the proxy did not start: {line!r}")
        return cls(process, int(line[1]), int(line[2]))

    def uri(self, database: str = "") -> str:
        return f"mongodb://{self.host}:{self.port}/{database}?directConnection=true"

    def call(self, **request: Any) -> dict[str, Any]:
        self._file.write(json.dumps(request) + "\n")
        self._file.flush()
        reply: dict[str, Any] = json.loads(self._file.readline())
        if not reply.get("ok"):
            raise RuntimeError(f"proxy control: {reply.get('error')}")
        return reply

    def set(self, **options: Any) -> None:
        """``enabled=``, ``reset_rate=``, ``stamp_times=``."""
        self.call(op="set", **options)

    def drop_reply(self, command: str, where: dict[str, Any] | None = None, times: int = 1) -> int:
        return int(self.call(op="drop", command=command, where=where, times=times)["rule"])

    def rule(self, rule: int) -> dict[str, Any]:
        return self.call(op="rule", rule=rule)

    def freeze(self, seconds: float | None = None) -> None:
        self.call(op="freeze", seconds=seconds)

    def thaw(self) -> None:
        self.call(op="thaw")

    def stats(self) -> dict[str, Any]:
        return self.call(op="stats")

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self._file.close()
            self._sock.close()
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> ProxyProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


async def _main(args: argparse.Namespace) -> None:
    host, _, port = args.upstream.rpartition(":")
    proxy = await FaultProxy(host, int(port), port=args.port, seed=args.seed).start()
    control = await asyncio.start_server(_Control(proxy).serve, "127.0.0.1", args.control_port)
    control_port = control.sockets[0].getsockname()[1]
    print(f"READY {proxy.port} {control_port}", flush=True)
    started = time.monotonic()
    try:
        await asyncio.Event().wait()
    finally:
        print(f"proxy up {time.monotonic() - started:.1f}s: {proxy.stats}", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description="a fault-injecting MongoDB wire proxy")
    parser.add_argument("upstream", help="HOST:PORT of the wire server")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--control-port", type=int, default=0)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_main(args))


if __name__ == "__main__":
    main()
