"""Async effect targets and the async send (docs/async.md#effects): AsyncHttpTarget against the
real local payment target (world/target.py), then effects of `async def` workflows end to end
on real asyncio worker subprocesses: a SIGKILL right after the send at tiers 1 and 2, the
watchdog with the event loop blocked, the thread count with many sends out, and the local
lease check before the send. What landed is read from the target's ledger and access log."""

from __future__ import annotations

import asyncio
import http.server
import signal
import threading
import time
from pathlib import Path

import async_effect_flows
import pytest

import world.target
from conftest import PAYMENT, wait_for
from interlock_runtime import AsyncHttpTarget, HttpTarget, InvalidInput, Runtime, TargetRejected
from interlock_runtime.effects import WATCHDOG_EXIT
from interlock_runtime.effects.targets import HttpTargetError, NoLookup


def _target(url: str, tier: int, **kwargs) -> AsyncHttpTarget:
    lookup = url + "/refunds?payment={payment}&key={effect_id}" if tier == 2 else None
    return AsyncHttpTarget("async-refunds", url + "/refunds", tier, lookup=lookup,
                           action="refund", send_timeout=2.5, settle_margin=1.0,
                           sender_headers=("X-ILR-Worker", "X-ILR-Epoch"), **kwargs)  # fmt: skip


def test_async_http_target_sends_looks_up_and_reads_answers_as_http_target(
    target_factory,
) -> None:
    target, admin = target_factory(2)
    t = _target(target.url, 2, headers={"Authorization": "Bearer sk_test_not_logged"})
    payload = {"payment": PAYMENT, "amount": 700, "metadata": {"case": "direct"}}

    async def go() -> tuple:
        assert await t.query("eff_direct", payload) is None
        sent = await t.apply("eff_direct", payload, worker="W", epoch=3, timeout=2.0)
        found = await t.query("eff_direct", payload)
        with pytest.raises(TargetRejected):  # more than was paid: a definite refusal
            await t.apply("eff_too_much", {**payload, "amount": 10**9}, timeout=2.0)
        return sent, found

    sent, found = asyncio.run(go())
    assert sent["amount"] == 700 and found["count"] == 1
    post = admin.log(path="/refunds", method="POST")[0]
    assert post["key"] == "eff_direct"
    assert (post["worker"], post["epoch"]) == ("W", "3")
    # the same declaration surface, checked by the same code
    assert repr(t) == f"AsyncHttpTarget('async-refunds', '{target.url}/refunds', tier=2)"
    with pytest.raises(InvalidInput, match="AsyncHttpTarget 'x': tier 2 needs lookup"):
        AsyncHttpTarget("x", target.url, 2)
    with pytest.raises(InvalidInput, match="HttpTarget 'x': tier 2 needs lookup"):
        HttpTarget("x", target.url, 2)
    with pytest.raises(NoLookup):
        asyncio.run(_target(target.url, 1).query("eff_direct", payload))


def test_async_http_target_refuses_redirects_and_names_the_missing_extra(monkeypatch) -> None:
    seen: list[str] = []

    class Redirect(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            seen.append(self.path)
            self.send_response(307)
            self.send_header("Location", "/elsewhere")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        t = AsyncHttpTarget("r", f"http://127.0.0.1:{server.server_port}/pay", 3)
        with pytest.raises(HttpTargetError, match="HTTP 307"):
            asyncio.run(t.apply("eff_x", {"a": 1}, timeout=2.0))
    finally:
        server.shutdown()
    assert seen == ["/pay"]  # not followed
    import interlock_runtime.effects.targets as targets

    def missing(name: str):
        raise ImportError(name)

    monkeypatch.setattr(targets.importlib, "import_module", missing)
    with pytest.raises(InvalidInput, match=r"interlock-runtime\[async-http\]"):
        AsyncHttpTarget("r", "http://127.0.0.1:9/pay", 3)


# -- effects of async workflows, end to end ------------------------------------------------------

FLOWS = "async_effect_flows"


def _case(rt, target, tier: int, **extra) -> dict:
    grant = rt.grant("agent", "refund", by="policy")
    return {"url": target.url, "tier": tier, "payment": PAYMENT, "grant": grant, **extra}


def _threads(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise AssertionError("no Threads line")


@pytest.mark.parametrize("tier", [1, 2], ids=["tier1", "tier2"])
def test_async_send_survives_a_sigkill_after_the_send(dsn, workers, target_factory, tier):
    """SIGKILL after the async target answered, before T_commit: the next worker recovers
    by tier and the target applied the refund exactly once."""
    target, admin = target_factory(tier)
    with Runtime(dsn) as rt:
        dying = workers("K1", module=FLOWS, lease_ttl=1.5,
                        env={"ILR_KILL_AT": "effect_after_send"})  # fmt: skip
        rt.start(async_effect_flows.ae_refund, "k-1", _case(rt, target, tier, amount=2000))
        assert dying.proc.wait(timeout=30) == -signal.SIGKILL
        workers("K2", module=FLOWS, lease_ttl=1.5)
        out = rt.result("k-1", timeout=40)
    assert out["status"] == {1: "COMMITTED_BY_RETRY", 2: "COMMITTED_ON_QUERY"}[tier]
    assert [r["amount"] for r in admin.ledger()["refunds"]] == [2000]  # applied exactly once
    sent = [p["worker"] for p in admin.log(path="/refunds", method="POST")]
    assert sent == (["K1", "K2"] if tier == 1 else ["K1"])


def test_a_send_past_its_deadline_ends_the_worker_even_with_the_loop_blocked(
    dsn, workers, target_factory
) -> None:
    """The target holds the POST 8 s; the send's budget is 2.5 s; the workflow's other branch
    blocks the event loop for 20 s once the POST has arrived. The watchdog is a thread: the
    worker ends with WATCHDOG_EXIT at the deadline, long before the loop is free again."""
    target, admin = target_factory(1, delay_ms=8000)
    with Runtime(dsn) as rt:
        w = workers("D1", module=FLOWS, lease_ttl=5)
        t0 = time.monotonic()
        rt.start(async_effect_flows.ae_send_with_loop_blocked, "d-1",
                 _case(rt, target, 1, block=20))  # fmt: skip
        assert w.proc.wait(timeout=15) == WATCHDOG_EXIT
        took = time.monotonic() - t0
    assert took < 10, f"the watchdog fired after {took:.1f} s, not at the 2.5 s deadline"
    assert w.wait_event("loop_blocked", timeout=1)["task"].startswith("step d-1#2 hold")
    assert len(admin.log(path="/refunds", method="POST")) == 1


def test_many_async_sends_out_cost_no_threads(dsn, workers, target_factory, monkeypatch) -> None:
    """50 runs each wait on the target (which holds each of their POSTs 4 s): the worker's
    thread count is that of the same worker idle, after one effect warmed it up."""
    n = 50
    # the local target's listen backlog (socketserver's 5) would drop most of 50 connects
    monkeypatch.setattr(world.target._TargetHTTPServer, "request_queue_size", 128)
    target, admin = target_factory(1)
    with Runtime(dsn) as rt:
        w = workers("T1", module=FLOWS, lease_ttl=10, concurrency=64)
        registered = (w.wait_event("registered"), _threads(w.pid))[1]
        rt.start(async_effect_flows.ae_refund, "t-warm", _case(rt, target, 1, send_timeout=9))
        assert rt.result("t-warm", timeout=30)["status"] == "COMMITTED"
        idle = _threads(w.pid)
        admin.set_delay(4000, count=n)
        for i in range(n):
            rt.start(async_effect_flows.ae_refund, f"t-{i}",
                     _case(rt, target, 1, send_timeout=9))  # fmt: skip
        wait_for(lambda: len(admin.log(path="/refunds", method="POST")) == n + 1, 30,
                 f"{n} sends out")  # fmt: skip
        held = _threads(w.pid)
        landed = len(admin.ledger()["refunds"])
        for i in range(n):
            assert rt.result(f"t-{i}", timeout=60)["status"] == "COMMITTED"
    print(f"\nasync worker threads: registered {registered}, idle after one effect {idle}, "
          f"{n} async sends out {held}")  # fmt: skip
    assert landed == 1, "the target answered some sends before all were out"
    assert held == idle
    assert len(admin.ledger()["refunds"]) == n + 1


def test_no_send_after_the_local_lease_deadline(dsn, workers, target_factory, conn) -> None:
    """C1 right before the send: the worker is stopped right after T_dispatch committed until
    its lease has expired in the database (send budget still 8 s). Resumed, it sends nothing
    (the lease deadline passed); a second worker recovers the open send once it settled."""
    target, admin = target_factory(1)
    with Runtime(dsn) as rt:
        a = workers("C1", module=FLOWS, lease_ttl=1.5,
                    env={"ILR_STOP_AT": "effect_after_dispatch"})  # fmt: skip
        rt.start(async_effect_flows.ae_refund, "c-1", _case(rt, target, 1, send_timeout=10))
        a.wait_stopped()
        wait_for(lambda: conn.execute("select lease_expires_at < now() as gone from ilr.workflows"
                                      " where id = 'c-1'").fetchone()["gone"], 10,
                 "the lease to expire")  # fmt: skip
        a.signal(signal.SIGCONT)
        a.wait_event("fenced", wf="c-1", by="write", timeout=20)  # the run, not the heartbeat
        assert admin.log(path="/refunds", method="POST") == []  # nothing left after C1
        a.proc.kill()  # so that the recovery below is C2's
        a.proc.wait()
        workers("C2", module=FLOWS, lease_ttl=1.5)
        out = rt.result("c-1", timeout=40)
    assert out["status"] == "COMMITTED_BY_RETRY"
    assert [p["worker"] for p in admin.log(path="/refunds", method="POST")] == ["C2"]


def test_a_plain_target_in_an_async_workflow_still_works(dsn, workers, target_factory) -> None:
    target, admin = target_factory(2)
    with Runtime(dsn) as rt:
        workers("P1", module=FLOWS)
        rt.start(async_effect_flows.ae_plain_target, "p-1", _case(rt, target, 2))
        assert rt.result("p-1", timeout=30)["status"] == "COMMITTED"
    assert [p["worker"] for p in admin.log(path="/refunds", method="POST")] == ["P1"]
