"""StripeRefundTarget (interlock_runtime.stripe_refunds, the `stripe` extra) called directly,
against the local target's Stripe-compatible /v1 subset (world/target.py, EMULATED: Stripe
itself cannot be reached from here). What landed is read from the target's ledger and access
log. The same class under real workers: world/tests/test_stripe_target.py and
prove/tests/test_stripe_s01.py (through world.stripe_target.StripeRefunds)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import stripe

from interlock_runtime import InvalidInput, TargetRejected
from interlock_runtime.effects import check_target
from interlock_runtime.effects.targets import EffectTarget, QueryableTarget
from interlock_runtime.stripe_refunds import StripeRefundTarget, retry_plan
from world.targets_for_tests import TargetFactory

PAY = "pay_881"
KEY = "sk_test_library"


@pytest.fixture
def make_target(tmp_path: Path) -> Iterator[Callable[..., tuple]]:
    factory = TargetFactory(tmp_path, PAY)
    yield factory.make
    factory.close()


def posts(admin) -> list[dict]:
    return admin.log(path="/v1/refunds", method="POST")


def test_tier1_resend_replays_one_refund(make_target) -> None:
    t, admin = make_target(1)
    target = StripeRefundTarget(KEY, base_url=t.url, send_timeout=3.0, settle_margin=1.0)
    assert isinstance(target, EffectTarget) and isinstance(target, QueryableTarget)
    spec = check_target(target)
    assert (spec.name, spec.tier, spec.queryable, spec.dedup_window) == (
        "stripe-refunds", 1, True, 86400.0)  # fmt: skip
    assert target.max_network_retries == 2 and KEY not in repr(target)
    payload = {"payment_intent": PAY, "amount": 2000, "metadata": {"case": "c-1", "n": 7}}
    first = target.apply("refund:c-1", payload, worker="W1", epoch=1, timeout=3.0)
    assert first["object"] == "refund" and first["replayed"] is False
    assert first["metadata"] == {"case": "c-1", "n": "7", "interlock_effect_id": "refund:c-1"}
    assert first["attempts_allowed"] == 2  # one SDK retry fits in 3 s (retry_plan)
    # the resend after a crash: the payload comes back from jsonb, its key order may differ
    again = target.apply("refund:c-1", dict(reversed(list(payload.items()))), worker="W2",
                         epoch=2, timeout=3.0)  # fmt: skip
    assert again["id"] == first["id"] and again["replayed"] is True
    assert [r["amount"] for r in admin.ledger()["refunds"]] == [2000]
    assert [p["key"] for p in posts(admin)] == ["refund:c-1", "refund:c-1"]
    assert all(p["worker"] is None for p in posts(admin))  # no sender headers by default
    found = target.query("refund:c-1", payload)
    assert found is not None and found["id"] == first["id"] and found["count"] == 1
    assert target.query("refund:other", payload) is None
    # Stripe's refund list has no metadata filter: the selection is made client-side
    lists = admin.log(path="/v1/refunds", method="GET")
    assert lists and all(e["query"] == f"payment_intent={PAY}&limit=100" for e in lists)


def test_4xx_is_target_rejected(make_target) -> None:
    t, admin = make_target(1)
    target = StripeRefundTarget(KEY, PAY, base_url=t.url, send_timeout=3.0, settle_margin=1.0)
    with pytest.raises(TargetRejected) as ei:
        target.apply("refund:big", {"amount": 20000})
    assert ei.value.reason == "amount_too_large" and ei.value.response["status"] == 400
    json.dumps(ei.value.response)  # journaled as JSON
    with pytest.raises(TargetRejected) as ei:
        StripeRefundTarget("sk_" + "live_refused", PAY, base_url=t.url).apply("r", {"amount": 1})
    assert ei.value.reason == "api_key_invalid" and ei.value.response["status"] == 401
    n = len(posts(admin))
    # no PaymentIntent anywhere: refused without sending, and query knows it never landed
    bare = StripeRefundTarget(KEY, base_url=t.url)
    with pytest.raises(TargetRejected) as ei:
        bare.apply("refund:none", {"amount": 100})
    assert ei.value.reason == "invalid_payload" and len(posts(admin)) == n
    assert bare.query("refund:none", {"amount": 100}) is None
    assert admin.ledger()["refunds"] == []


class _Unavailable(BaseHTTPRequestHandler):
    """Answers every POST 503 and counts them (the SDK would retry a 503)."""

    def log_message(self, *a: object) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.posts += 1  # type: ignore[attr-defined]
        data = json.dumps({"error": {"type": "api_error", "message": "unavailable"}}).encode()
        self.send_response(503)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def test_tier2_refuses_sdk_retries() -> None:
    with pytest.raises(InvalidInput, match="never authorized"):
        StripeRefundTarget(KEY, PAY, tier=2, max_network_retries=1)
    assert StripeRefundTarget(KEY, PAY, tier=2).max_network_retries == 0
    assert StripeRefundTarget(KEY, PAY, tier=3).queryable is False
    assert retry_plan(3.0, 2) == (1, 1.25) and retry_plan(0.8, 2) == (0, 0.8)
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Unavailable)
    srv.posts = 0  # type: ignore[attr-defined]
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{srv.server_address[1]}"
        with pytest.raises(stripe.StripeError) as ei:  # unknown outcome: not a rejection
            StripeRefundTarget(KEY, PAY, tier=2, base_url=url).apply("e", {"amount": 1})
        assert not isinstance(ei.value, TargetRejected) and ei.value.http_status == 503
        assert srv.posts == 1  # type: ignore[attr-defined]  # sent once: no SDK resend
        with pytest.raises(stripe.StripeError):  # tier 1: the SDK resends (a replay there)
            StripeRefundTarget(KEY, PAY, base_url=url).apply("e", {"amount": 1}, timeout=3.0)
        assert srv.posts == 3  # type: ignore[attr-defined]
    finally:
        srv.shutdown()
        srv.server_close()


def test_premises_from_the_premises_payment(make_target) -> None:
    t, admin = make_target(1)
    target = StripeRefundTarget(KEY, base_url=t.url, metadata_key="key")
    assert target.capture(payment=PAY) == {"payment": PAY, "eligible": True,
                                           "refunded_by_others": 0}  # fmt: skip
    target.apply("refund:p", {"payment_intent": PAY, "amount": 300})
    seen = target.capture("refund:p", PAY)
    assert seen == {"payment": PAY, "eligible": True, "refunded_by_others": 0}
    assert target.validate_premises(seen, "refund:p") == []
    admin.hand_refund(PAY, 100)
    assert target.validate_premises(seen, "refund:p") == ["refunded_by_others changed: 0 -> 100"]
    assert target.validate_premises(None, "refund:p") == []  # nothing external named


def test_import_interlock_runtime_does_not_import_stripe() -> None:
    code = ("import sys, interlock_runtime, interlock_runtime.effects.targets\n"
            "assert 'stripe' not in sys.modules, 'stripe imported'\n"
            "assert 'interlock_runtime.stripe_refunds' not in sys.modules\n")  # fmt: skip
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
