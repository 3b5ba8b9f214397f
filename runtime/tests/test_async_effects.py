"""Async effect targets and the async send (docs/async.md#effects): AsyncHttpTarget against the
real local payment target (world/target.py), then effects of `async def` workflows end to end
on real asyncio worker subprocesses: a SIGKILL right after the send at tiers 1 and 2, the
watchdog with the event loop blocked, the thread count with many sends out, and the local
lease check before the send. What landed is read from the target's ledger and access log."""

from __future__ import annotations

import asyncio
import http.server
import threading

import pytest

from conftest import PAYMENT
from interlock_runtime import AsyncHttpTarget, HttpTarget, InvalidInput, TargetRejected
from interlock_runtime.targets import HttpTargetError, NoLookup


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
    import interlock_runtime.targets as targets

    def missing(name: str):
        raise ImportError(name)

    monkeypatch.setattr(targets.importlib, "import_module", missing)
    with pytest.raises(InvalidInput, match=r"interlock-runtime\[async-http\]"):
        AsyncHttpTarget("r", "http://127.0.0.1:9/pay", 3)
