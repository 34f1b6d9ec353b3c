"""Feature probe for the MongoDB-wire test servers (nx-27017, mongoeco): the driver.

Runs a fixed list of checks with pymongo's async API (``AsyncMongoClient``)
and prints a matrix: for each check, what MongoDB itself does ("expect") and
what each server did. Exceptions are recorded verbatim (type, code, message).

    .venv/bin/python tests/servers_probe/probe.py                # both servers
    .venv/bin/python tests/servers_probe/probe.py --servers nx
    .venv/bin/python tests/servers_probe/probe.py --uri mongodb://... --name x
    ... --json out.json  (machine-readable results)

The checks live in the ``probes_*`` modules beside this one (imported below in the
matrix's order, :data:`PROBE_MODULES`), what they are made of in ``probing.py``.

Not a pytest module (no test_ functions); it is a diagnostic tool.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import sys
import tempfile
import time
from pathlib import Path

from pymongo import AsyncMongoClient

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # run as a script: ``tests`` is importable from here

from tests.servers_probe.probing import (  # noqa: E402
    PROBES,
    Check,
    CommandCounter,
    Ctx,
    Doc,
    fmt_exc,
)
from tests.support import servers as test_servers  # noqa: E402

#: The probe modules beside this one, in the matrix's order: importing one registers its
#: probes.
PROBE_MODULES = ("basics", "find_and_modify", "bulk_writes", "reads", "types", "features", "races")
for _name in PROBE_MODULES:
    importlib.import_module(f"tests.servers_probe.probes_{_name}")


async def run_probes(
    name: str, uri: str, only: set[str] | None = None
) -> dict[str, dict[str, str]]:
    counter = CommandCounter()
    client: AsyncMongoClient[Doc] = AsyncMongoClient(uri, tz_aware=True, event_listeners=[counter])
    hello = await client.admin.command("hello")
    db = client[f"probe_{int(time.time())}"]
    ctx = Ctx(client, db, counter, uri)
    results: dict[str, dict[str, str]] = {
        "_server": {
            "status": "info",
            "detail": (
                f"{name} {uri} maxWireVersion={hello.get('maxWireVersion')} "
                f"setName={hello.get('setName')}"
            ),
        }
    }
    for pname, _expect, fn in PROBES:
        if only and not any(o in pname for o in only):
            continue
        t0 = time.perf_counter()
        try:
            res = await asyncio.wait_for(fn(ctx), timeout=240)
        except Exception as e:
            res = Check("ERROR", fmt_exc(e))
        results[pname] = res.as_dict()
        print(
            f"[{name}] {res.status:5} {pname} ({time.perf_counter() - t0:.1f}s): {res.detail}",
            flush=True,
        )
    await client.close()
    return results


def render(all_results: dict[str, dict[str, dict[str, str]]]) -> str:
    names = list(all_results)
    lines = ["| check | MongoDB | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    expect = {p: e for p, e, _ in PROBES}
    for pname in ["_server"] + [p for p, _, _ in PROBES]:
        row = [pname, expect.get(pname, "")]
        present = False
        for n in names:
            r = all_results[n].get(pname)
            if r is not None:
                present = True
            row.append("" if r is None else f"**{r['status']}** {r['detail']}".replace("|", "\\|"))
        if present:
            lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--servers", default="nx,mongoeco")
    ap.add_argument("--uri", help="probe this URI instead of starting servers")
    ap.add_argument("--name", default="custom")
    ap.add_argument("--only", action="append", help="substring of check names to run")
    ap.add_argument("--json", help="write results as JSON here")
    ap.add_argument("--md", help="write the markdown matrix here")
    args = ap.parse_args()
    only = set(args.only) if args.only else None
    all_results: dict[str, dict[str, dict[str, str]]] = {}
    if args.uri:
        all_results[args.name] = asyncio.run(run_probes(args.name, args.uri, only))
    else:
        for which in args.servers.split(","):
            with tempfile.TemporaryDirectory(prefix=f"probe-{which}-") as tmp:
                if which == "nx":
                    srv = test_servers.start_nx(tmp)
                elif which == "mongoeco":
                    maybe = test_servers.start_mongoeco(tmp)
                    if maybe is None:
                        continue
                    srv = maybe
                else:
                    raise SystemExit(f"unknown server {which}")
                try:
                    all_results[which] = asyncio.run(run_probes(which, srv.uri, only))
                finally:
                    srv.stop()
    md = render(all_results)
    print(md)
    if args.md:
        Path(args.md).write_text(md + "\n")
    if args.json:
        Path(args.json).write_text(json.dumps(all_results, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
