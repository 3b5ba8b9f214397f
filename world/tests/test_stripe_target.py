"""The Stripe adapter (EMULATED): the official stripe SDK against the local target's /v1/ subset,
error mapping and the SDK's retries per tier. S01 through real workers: prove/tests/test_stripe_s01.py."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import stripe

from world.stripe_target import StripeRefunds, retry_plan
from world.target_client import NoLookup, TargetAdmin, TargetRejected
from world.targets_for_tests import TargetFactory

PAY = "pay_881"


@pytest.fixture
def make_target(tmp_path) -> Iterator:
    factory = TargetFactory(tmp_path, PAY)
    yield factory.make
    factory.close()


def sdk(url: str, key: str = "sk_test_123") -> stripe.StripeClient:
    return stripe.StripeClient(key, base_addresses={"api": url}, max_network_retries=0)


def v1_posts(admin: TargetAdmin) -> list[dict]:
    return admin.log(path="/v1/refunds", method="POST")


def test_sdk_round_trip_replay_conflict_and_list(make_target) -> None:
    t, admin = make_target(1)
    c = StripeRefunds(t.url, PAY)
    assert (c.name, c.tier, c.queryable, c.max_network_retries) == ("stripe-refunds", 1, True, 2)
    first = c.apply("eff-1", {"amount": 2000}, worker="W1", epoch=3)
    assert first["object"] == "refund" and first["id"].startswith("re_")
    assert first["status"] == "succeeded" and first["amount"] == 2000
    assert first["payment_intent"] == PAY and first["metadata"] == {"key": "eff-1"}
    assert first["replayed"] is False
    again = c.apply("eff-1", {"amount": 2000}, worker="W2", epoch=4)
    assert again["id"] == first["id"] and again["replayed"] is True  # Idempotent-Replayed
    with pytest.raises(TargetRejected) as ei:  # same key, different params: 400
        c.apply("eff-1", {"amount": 3000})
    assert ei.value.reason == "idempotency_error" and ei.value.response["status"] == 400
    assert [r["amount"] for r in admin.ledger()["refunds"]] == [2000]
    log = v1_posts(admin)
    assert [(e["worker"], e["epoch"], e["key"], e["status"]) for e in log] == [
        ("W1", "3", "eff-1", 200), ("W2", "4", "eff-1", 200), (log[2]["worker"], None, "eff-1", 400)
    ]  # fmt: skip
    # the list, filtered by payment intent and metadata, straight through the SDK
    c.apply("eff-2", {"amount": 500})
    listed = sdk(t.url).v1.refunds.list(
        params={"payment_intent": PAY, "metadata": {"key": "eff-1"}}
    )  # type: ignore[typeddict-unknown-key]
    assert listed.object == "list" and listed.has_more is False
    assert [r.id for r in listed.data] == [first["id"]]
    everything = sdk(t.url).v1.refunds.list(params={"payment_intent": PAY, "limit": 1})
    assert len(everything.data) == 1 and everything.has_more is True
    assert everything.data[0].amount == 500  # newest first
    assert c.query("eff-1")["id"] == first["id"] and c.query("eff-1")["count"] == 1
    assert c.query("eff-9") is None
    # premises through the payment intent and its charge
    assert c.payment_state() == {"id": PAY, "paid": 10000, "refunded_total": 2500}
    assert c.capture("eff-1") == {"payment": PAY, "eligible": True, "refunded_by_others": 500}
    assert c.validate_premises({"payment": PAY, "refunded_by_others": 500}, "eff-1") == []
    admin.hand_refund(PAY, 100)
    assert c.validate_premises({"payment": PAY, "refunded_by_others": 500}, "eff-1") == [
        "refunded_by_others changed: 500 -> 600"
    ]
    assert "sk_test" not in repr(c)


def test_4xx_is_rejected_except_409_and_429(make_target) -> None:
    t, admin = make_target(1)
    with pytest.raises(TargetRejected) as ei:
        StripeRefunds(t.url, PAY).apply("big", {"amount": 20000})
    assert ei.value.reason == "amount_too_large"
    with pytest.raises(TargetRejected) as ei:
        StripeRefunds(t.url, "pay_none").apply("gone", {"amount": 1})
    assert ei.value.reason == "resource_missing"
    with pytest.raises(TargetRejected) as ei:  # 401: a live key is refused (and never logged)
        StripeRefunds(t.url, PAY, api_key="sk_" + "live_nope").apply("live", {"amount": 1})
    assert ei.value.reason == "api_key_invalid"
    assert "sk_live" not in json.dumps(admin.log())
    # 409: the same key still in flight is not a definite refusal
    admin.set_delay(600)
    no_retry = StripeRefunds(t.url, PAY, max_network_retries=0)
    box: dict = {}
    th = threading.Thread(target=lambda: box.update(r=no_retry.apply("eff-1", {"amount": 2000})))
    th.start()
    time.sleep(0.25)
    with pytest.raises(stripe.StripeError) as ei2:
        no_retry.apply("eff-1", {"amount": 2000})
    assert not isinstance(ei2.value, TargetRejected) and ei2.value.http_status == 409
    th.join(5)
    assert box["r"]["replayed"] is False
    # a refused connection: unknown outcome, not a rejection
    with pytest.raises(stripe.APIConnectionError):
        StripeRefunds("http://127.0.0.1:9", PAY, max_network_retries=0).apply("x", {"amount": 1})


class _Status(BaseHTTPRequestHandler):
    def log_message(self, *a) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        code = int(self.path.rsplit("/", 1)[-1]) if self.path.count("/") > 2 else self.server.code  # type: ignore[attr-defined]
        data = json.dumps({"error": {"type": "api_error", "message": f"status {code}"}}).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.mark.parametrize("code", [429, 500, 503])
def test_429_and_5xx_are_not_rejections(code) -> None:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Status)
    srv.code = code  # type: ignore[attr-defined]
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        c = StripeRefunds(f"http://127.0.0.1:{srv.server_address[1]}", PAY, tier=2)
        with pytest.raises(stripe.StripeError) as ei:
            c.apply("eff-1", {"amount": 1})
        assert not isinstance(ei.value, TargetRejected) and ei.value.http_status == code
    finally:
        srv.shutdown()
        srv.server_close()


def test_sdk_retries_per_tier(make_target) -> None:
    assert retry_plan(2.5, 2) == (1, 1.0)  # two retries do not fit: one does
    assert retry_plan(0.8, 2) == (0, 0.8)
    assert retry_plan(9.0, 2) == (2, 2.5)
    with pytest.raises(ValueError, match="never authorized"):
        StripeRefunds("http://127.0.0.1:1", PAY, tier=2, max_network_retries=1)
    assert StripeRefunds("http://127.0.0.1:1", PAY, tier=3).max_network_retries == 0
    # tier 1: the first attempt times out while the target is still applying; the SDK's retry
    # reuses the key and is answered with the stored refund (one refund, two POSTs)
    assert retry_plan(3.0, 2) == (1, 1.25)  # the default send timeout
    t, admin = make_target(1, delay_ms=1700)
    c = StripeRefunds(t.url, PAY, send_timeout=6.0)  # two retries of 1.5 s each
    # the delay applies to every POST (replays too): drop it once the first one is under way
    threading.Timer(0.5, admin.set_delay, args=(0,)).start()
    out = c.apply("eff-r", {"amount": 2000}, worker="W1")
    assert out["replayed"] is True and out["attempts_allowed"] == 3
    assert [r["amount"] for r in admin.ledger()["refunds"]] == [2000]
    posts = v1_posts(admin)
    assert len(posts) >= 2 and {p["key"] for p in posts} == {"eff-r"}
    assert {p["worker"] for p in posts} == {"W1"}


def test_tiers_2_and_3(make_target) -> None:
    t2, admin2 = make_target(2)
    c2 = StripeRefunds(t2.url, PAY, tier=2)
    c2.apply("eff-1", {"amount": 100})
    c2.apply("eff-1", {"amount": 100})  # no dedupe at tier 2: a second refund
    assert c2.query("eff-1")["count"] == 2
    t3, admin3 = make_target(3)
    c3 = StripeRefunds(t3.url, PAY, tier=3)
    assert c3.queryable is False
    c3.apply("eff-1", {"amount": 100})
    with pytest.raises(NoLookup):
        c3.query("eff-1")
    with pytest.raises(stripe.InvalidRequestError) as ei:
        sdk(t3.url).v1.refunds.list()
    assert ei.value.http_status == 404 and ei.value.code == "no_lookup"
    assert c3.capture() == {"payment": PAY, "eligible": True, "refunded_by_others": 100}


def test_auth_header_is_required(make_target) -> None:
    t, _ = make_target(1)
    req = urllib.request.Request(t.url + "/v1/refunds")
    with pytest.raises(urllib.error.HTTPError) as ei:
        urllib.request.urlopen(req, timeout=5)
    assert ei.value.code == 401
    body = json.loads(ei.value.read())
    assert body["error"]["type"] == "invalid_request_error"
    assert ei.value.headers["X-Emulated"] == "stripe-subset"
    basic = urllib.request.Request(
        t.url + f"/v1/payment_intents/{PAY}", headers={"Authorization": "Basic c2tfdGVzdF94Og=="}
    )  # sk_test_x:
    with urllib.request.urlopen(basic, timeout=5) as r:
        pi = json.loads(r.read())
    assert pi["object"] == "payment_intent" and pi["amount_received"] == 10000


# -- S01 at tier 1 through real worker subprocesses -------------------------------------------
