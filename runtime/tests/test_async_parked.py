"""One asyncio worker process holds many runs (docs/async.md): 256 in flight on an async step
at once (a coroutine each, not a thread), then 400 parked on a signal (rows, nothing in the
process), all finished after their signals. The RSS and thread count are printed. The 10,000
parked runs of the issue are the bench's to hold (make bench), not make test's."""

from __future__ import annotations

import time
from pathlib import Path

import async_flows
import psycopg

from conftest import wait_for
from interlock_runtime import Runtime

RUNS = 400
IN_FLIGHT = 256  # --concurrency's ceiling


def proc_status(pid: int) -> dict[str, int]:
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return {"rss_kib": int(fields["VmRSS"].split()[0]), "threads": int(fields["Threads"])}


def count(conn: psycopg.Connection, status: str) -> int:
    return conn.execute("select count(*) as n from ilr.workflows where status = %s",
                        (status,)).fetchone()["n"]  # fmt: skip


def test_one_async_worker_holds_hundreds_of_parked_runs(dsn, workers, conn) -> None:
    with Runtime(dsn) as rt:
        for i in range(RUNS):
            rt.start(async_flows.a_parked, f"p-{i}", {"hold": 2.0})
        w = workers("P1", module="async_flows", concurrency=IN_FLIGHT, lease_ttl=10)
        w.wait_event("registered")
        idle = proc_status(w.pid)  # imported, registered, about to claim
        wait_for(lambda: count(conn, "running") >= IN_FLIGHT, 60, f"{IN_FLIGHT} runs in flight")
        busy = proc_status(w.pid)
        wait_for(lambda: count(conn, "sleeping") == RUNS, 120, f"{RUNS} runs parked")
        parked = proc_status(w.pid)
        t0 = time.monotonic()
        for i in range(RUNS):
            rt.signal(f"p-{i}", "go", i)
        wait_for(lambda: count(conn, "completed") == RUNS, 120, "every run completed")
        finished = time.monotonic() - t0
        assert rt.result("p-7") == 7
    per_flight = (busy["rss_kib"] - idle["rss_kib"]) / IN_FLIGHT
    print(f"\nasync worker: idle {idle['rss_kib']} KiB RSS, {idle['threads']} threads; "
          f"{IN_FLIGHT} runs in flight {busy['rss_kib']} KiB, {busy['threads']} threads "
          f"(~{per_flight:.1f} KiB per run in flight); {RUNS} parked {parked['rss_kib']} KiB, "
          f"{parked['threads']} threads; signalled and completed in {finished:.1f} s")  # fmt: skip
    # a coroutine per run in flight, not a thread: the thread count stays that of an idle worker
    assert busy["threads"] <= idle["threads"] + 8
    assert parked["rss_kib"] < 400_000
