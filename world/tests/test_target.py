"""The local payment target and its client, over real HTTP with a SQLite ledger per test."""

from __future__ import annotations

import json
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

from world.target import Target
from world.target_client import (
    LocalRefunds,
    NoLookup,
    TargetAdmin,
    TargetHTTPError,
    TargetRejected,
)

PAY = "pay_881"


@pytest.fixture
def make_target(tmp_path):
    started = []

    def make(tier: int, delay_ms: float = 0, paid: int = 10000) -> tuple[Target, TargetAdmin]:
        t = Target(tier, db=str(tmp_path / f"ledger-{len(started)}.sqlite"), delay_ms=delay_ms)
        t.start()
        started.append(t)
        admin = TargetAdmin(t.url)
        admin.create_payment(PAY, paid)
        return t, admin

    yield make
    for t in started:
        t.close()


def raw(url: str, method: str, path: str, body=None, headers=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def refund_body(amount=2000, key="refund:case-4471"):
    return {"payment": PAY, "amount": amount, "metadata": {"key": key}}


def test_tier1_replays_same_params_and_refuses_reused_key(make_target):
    t, admin = make_target(1)
    h = {"Idempotency-Key": "k1"}
    s1, r1 = raw(t.url, "POST", "/refunds", refund_body(), h)
    s2, r2 = raw(t.url, "POST", "/refunds", refund_body(), h)
    assert (s1, s2) == (200, 200)
    assert r1["replayed"] is False and r2["replayed"] is True
    assert r1["id"] == r2["id"] and r2["amount"] == 2000 and r2["key"] == "k1"
    assert set(r1) >= {"id", "payment", "amount", "metadata", "key", "created", "replayed"}
    s3, r3 = raw(t.url, "POST", "/refunds", refund_body(amount=3000), h)
    assert s3 == 400 and r3["error"] == "key_reused"
    assert admin.payment(PAY) == {"id": PAY, "paid": 10000, "refunded_total": 2000}
    assert len(admin.ledger()["refunds"]) == 1


@pytest.mark.parametrize("tier", [2, 3])
def test_tiers_2_and_3_apply_every_post(make_target, tier):
    t, admin = make_target(tier)
    client = LocalRefunds(t.url, PAY, tier)
    a = client.apply("eff-1", {"amount": 2000})
    b = client.apply("eff-1", {"amount": 2000})
    assert a["id"] != b["id"] and not a["replayed"] and not b["replayed"]
    assert admin.payment(PAY)["refunded_total"] == 4000
    posts = admin.log(path="/refunds")
    assert [e["key"] for e in posts] == ["eff-1", "eff-1"]
    # even a raw Idempotency-Key header does not dedupe at tiers 2 and 3
    h = {"Idempotency-Key": "same"}
    raw(t.url, "POST", "/refunds", refund_body(100, "x"), h)
    raw(t.url, "POST", "/refunds", refund_body(100, "x"), h)
    assert admin.payment(PAY)["refunded_total"] == 4200


def test_tier1_client_resend_is_a_replay(make_target):
    t, admin = make_target(1)
    client = LocalRefunds(t.url, PAY, 1)
    a = client.apply("eff-1", {"amount": 2000}, worker="w1", epoch=1)
    b = client.apply("eff-1", {"amount": 2000}, worker="w2", epoch=2)
    assert a["id"] == b["id"] and b["replayed"] is True
    assert admin.payment(PAY)["refunded_total"] == 2000
    with pytest.raises(TargetRejected) as ei:
        client.apply("eff-1", {"amount": 2500})
    assert ei.value.reason == "key_reused" and ei.value.response["status"] == 400


def test_lookups_per_tier(make_target):
    for tier in (1, 2):
        t, _ = make_target(tier)
        c = LocalRefunds(t.url, PAY, tier)
        assert c.queryable is True
        assert c.query("eff-9", {"amount": 2000}) is None
        applied = c.apply("eff-9", {"amount": 2000})
        found = c.query("eff-9", {"amount": 2000})
        assert found["id"] == applied["id"] and found["count"] == 1
        s, listed = raw(t.url, "GET", f"/refunds?payment={PAY}&key=eff-9")
        assert s == 200 and [r["id"] for r in listed] == [applied["id"]]
        s, listed = raw(t.url, "GET", f"/refunds?payment={PAY}&key=other")
        assert s == 200 and listed == []
    t3, _ = make_target(3)
    s, body = raw(t3.url, "GET", f"/refunds?payment={PAY}&key=eff-9")
    assert s == 404 and body["error"] == "no_lookup"
    c3 = LocalRefunds(t3.url, PAY, 3)
    assert c3.queryable is False
    with pytest.raises(NoLookup):
        c3.query("eff-9", {"amount": 2000})
    forced = LocalRefunds(t3.url, PAY, 3, queryable=True)
    with pytest.raises(NoLookup):
        forced.query("eff-9", {"amount": 2000})
    assert LocalRefunds(t3.url, PAY, 1, queryable=False).queryable is False


def test_insufficient_funds_is_a_definite_rejection(make_target):
    t, admin = make_target(2, paid=3000)
    c = LocalRefunds(t.url, PAY, 2)
    c.apply("a", {"amount": 2000})
    with pytest.raises(TargetRejected) as ei:
        c.apply("b", {"amount": 2000})
    assert ei.value.reason == "insufficient_funds"
    assert admin.payment(PAY)["refunded_total"] == 2000
    s, body = raw(t.url, "POST", "/refunds", refund_body(amount=1001))
    assert s == 400 and body["error"] == "insufficient_funds"
    with pytest.raises(TargetRejected):
        c.apply("c", {"amount": -5})
    with pytest.raises(TargetRejected) as ei:
        LocalRefunds(t.url, "pay_missing", 2).apply("d", {"amount": 5})
    assert ei.value.reason == "no_such_payment"


def test_hand_refund_and_validate_premises(make_target):
    for tier in (1, 2, 3):
        t, admin = make_target(tier)
        c = LocalRefunds(t.url, PAY, tier)
        premises = c.capture()
        assert premises == {"payment": PAY, "eligible": True, "refunded_by_others": 0}
        assert c.validate_premises(premises, "eff-1") == []
        hand = admin.hand_refund(PAY, 2000)
        assert hand["key"] is None and hand["source"] == "hand"
        assert c.validate_premises(premises, "eff-1") == ["refunded_by_others changed: 0 -> 2000"]
        admin.hand_refund(PAY, 8000)
        v = c.validate_premises(premises, "eff-1")
        assert "refunded_by_others changed: 0 -> 10000" in v
        assert f"payment {PAY} is no longer eligible" in v


def test_own_refund_does_not_make_premises_stale(make_target):
    for tier in (1, 2):
        t, admin = make_target(tier, paid=2000)
        c = LocalRefunds(t.url, PAY, tier)
        premises = c.capture("eff-1")
        c.apply("eff-1", {"amount": 2000})  # the whole payment, by us
        assert c.validate_premises(premises, "eff-1") == []
        assert c.capture() == {"payment": PAY, "eligible": False, "refunded_by_others": 2000}
        assert c.validate_premises(premises, "eff-other") != []


def test_prune_keys_then_repost_applies_again_at_tier1(make_target):
    t, admin = make_target(1)
    c = LocalRefunds(t.url, PAY, 1)
    first = c.apply("eff-1", {"amount": 2000})
    assert c.apply("eff-1", {"amount": 2000})["replayed"] is True
    pruned = admin.prune_keys()
    assert pruned["pruned"] == 1 and "EMULATED" in pruned["emulated"]
    again = c.apply("eff-1", {"amount": 2000})
    assert again["replayed"] is False and again["id"] != first["id"]
    assert admin.payment(PAY)["refunded_total"] == 4000
    # the lookup still finds both (it searches the ledger, not the key store)
    assert c.query("eff-1")["count"] == 2


def test_service_delay_is_measured_and_logged(make_target):
    t, admin = make_target(1, delay_ms=300)
    c = LocalRefunds(t.url, PAY, 1)
    t0 = time.time()
    c.apply("eff-1", {"amount": 2000})
    assert time.time() - t0 >= 0.3
    entry = admin.log(path="/refunds")[-1]
    assert entry["end"] - entry["start"] >= 0.3
    assert entry["arrival"] <= entry["start"] <= entry["end"]
    assert admin.set_delay(0) == {"delay_ms": 0.0, "delay_count": None}
    t0 = time.time()
    c.apply("eff-2", {"amount": 100})
    assert time.time() - t0 < 0.3
    assert admin.config()["delay_ms"] == 0.0


def test_concurrent_same_key_is_409_at_tier1(make_target):
    t, admin = make_target(1, delay_ms=600)
    c = LocalRefunds(t.url, PAY, 1)
    box = {}
    th = threading.Thread(target=lambda: box.update(r=c.apply("eff-1", {"amount": 2000})))
    th.start()
    time.sleep(0.2)
    with pytest.raises(TargetHTTPError) as ei:  # 409 is not a definite refusal
        c.apply("eff-1", {"amount": 2000})
    assert not isinstance(ei.value, TargetRejected) and ei.value.status == 409
    th.join(5)
    assert box["r"]["replayed"] is False
    assert admin.payment(PAY)["refunded_total"] == 2000


def test_access_log_records_headers_times_and_payload(make_target):
    t, admin = make_target(1)
    c = LocalRefunds(t.url, PAY, 1)
    before = time.time()
    c.apply("eff-1", {"amount": 2000}, worker="worker-2", epoch=7)
    c.capture("eff-1")  # a payment read and a lookup, both logged
    with pytest.raises(TargetRejected):
        c.apply("eff-1", {"amount": 1}, worker="worker-3", epoch=8)
    log = admin.log(path="/refunds", method="POST")
    assert len(log) == 2
    ok, bad = log
    assert ok["method"] == "POST" and ok["key"] == "eff-1" and ok["status"] == 200
    assert (ok["worker"], ok["epoch"]) == ("worker-2", "7")
    assert ok["payload"] == {"payment": PAY, "amount": 2000, "metadata": {"key": "eff-1"}}
    assert before <= ok["arrival"] <= ok["start"] <= ok["end"] <= time.time()
    assert ok["response"]["id"] == admin.ledger()["refunds"][0]["id"]
    assert (bad["worker"], bad["epoch"], bad["status"]) == ("worker-3", "8", 400)
    assert bad["response"]["error"] == "key_reused"
    # the log is also a table in the SQLite file
    db = sqlite3.connect(t.db_path)
    sql = "select count(*) from access_log where method = 'POST' and path = '/refunds'"
    n = db.execute(sql).fetchone()[0]
    db.close()
    assert n == 2
    # every request is logged, admin and reads included
    everything = admin.log()
    assert {e["path"] for e in everything} >= {"/admin/payments", "/refunds", f"/payments/{PAY}"}
    lookup = [e for e in everything if e["method"] == "GET" and e["path"] == "/refunds"]
    assert lookup[0]["query"] == f"payment={PAY}&key=eff-1" and lookup[0]["key"] == "eff-1"


def test_client_maps_errors(make_target):
    t, _ = make_target(2, delay_ms=800)
    c = LocalRefunds(t.url, PAY, 2, send_timeout=0.3)
    with pytest.raises(Exception) as ei:
        c.apply("eff-1", {"amount": 2000})
    assert not isinstance(ei.value, TargetRejected)
    assert isinstance(ei.value, (TimeoutError, socket.timeout, OSError))
    # 5xx-like: nothing listening -> connection refused, also not definite
    s = socket.create_server(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with pytest.raises(OSError) as ei:
        LocalRefunds(f"http://127.0.0.1:{port}", PAY, 2).apply("eff-2", {"amount": 1})
    assert not isinstance(ei.value, TargetRejected)
    with pytest.raises(TargetRejected) as ei:
        LocalRefunds(t.url, PAY, 2).apply("eff-3", {"amount": 0})
    assert ei.value.reason == "invalid_request"


def test_bind_loopback_only_and_bad_tier(tmp_path):
    with pytest.raises(ValueError, match="loopback"):
        Target(1, db=str(tmp_path / "a.sqlite"), host="0.0.0.0")
    with pytest.raises(ValueError):
        Target(4, db=str(tmp_path / "b.sqlite"))
    Target(1, db=str(tmp_path / "c.sqlite")).close()
    with pytest.raises(ValueError, match="tier"):
        Target(2, db=str(tmp_path / "c.sqlite"))


def test_cli_start_serve_stop(tmp_path):
    db = tmp_path / "cli.sqlite"
    cmd = [sys.executable, "-m", "world.target", "--tier", "2", "--db", str(db)]
    proc = subprocess.Popen(
        cmd + ["--delay-ms", "50", "--payment", f"{PAY}:10000"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        info = json.loads(proc.stdout.readline())
        assert info["url"] == f"http://127.0.0.1:{info['port']}" and info["tier"] == 2
        admin = TargetAdmin(info["url"])
        assert admin.config()["delay_ms"] == 50
        LocalRefunds(info["url"], PAY, 2).apply("eff-1", {"amount": 2000})
        assert admin.payment(PAY)["refunded_total"] == 2000
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=5) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    con = sqlite3.connect(db)  # the ledger outlives the process
    assert con.execute("select sum(amount) from refunds").fetchone()[0] == 2000
    con.close()
    bad = subprocess.run(cmd + ["--host", "0.0.0.0"], capture_output=True, text=True, timeout=20)
    assert bad.returncode == 2 and "loopback" in bad.stderr


def test_response_lost_through_the_fault_proxy_still_lands(make_target):
    from world.fault_proxy import FaultProxy

    t, admin = make_target(1)
    with FaultProxy(("127.0.0.1", t.port), control=None) as proxy:
        c = LocalRefunds(f"http://127.0.0.1:{proxy.port}", PAY, 1, send_timeout=0.5)
        proxy.set_mode("drop_response")
        with pytest.raises(OSError) as ei:  # a timeout: the outcome is unknown to the sender
            c.apply("eff-1", {"amount": 2000}, worker="w1", epoch=1)
        assert not isinstance(ei.value, TargetRejected)
        assert admin.payment(PAY)["refunded_total"] == 2000  # it landed all the same
        proxy.set_mode("pass")
        again = c.apply("eff-1", {"amount": 2000}, worker="w2", epoch=2)
        assert again["replayed"] is True
        assert admin.payment(PAY)["refunded_total"] == 2000


def test_delay_for_the_next_n_posts_only(make_target):
    # S08 slows the first refund POST only: the resend after the timeout is not delayed.
    t, admin = make_target(2)
    c = LocalRefunds(t.url, PAY, 2)
    assert admin.set_delay(200, count=1) == {"delay_ms": 200.0, "delay_count": 1}
    c.apply("eff-1", {"amount": 100})
    assert admin.config()["delay_count"] == 0  # used up by that POST
    first = admin.log(path="/refunds")[-1]
    assert first["end"] - first["start"] >= 0.2
    c.apply("eff-2", {"amount": 100})
    assert admin.config()["delay_count"] == 0
    with pytest.raises(TargetHTTPError):
        admin.set_delay(10, count=-1)


def test_a_target_without_lookups_and_its_premises(tmp_path):
    # S04's non-queryable variant: a tier-1 target (it dedupes) that answers no lookups.
    with Target(1, db=str(tmp_path / "l.sqlite"), lookup=False) as t:
        TargetAdmin(t.url).create_payment(PAY, 10000)
        assert t.config()["lookup"] is False
        c = LocalRefunds(t.url, PAY, 1, queryable=False)
        premises = c.capture("eff-1")  # no lookup needed to read the premises
        assert premises == {"payment": PAY, "eligible": True, "refunded_by_others": 0}
        c.apply("eff-1", {"amount": 2000})
        assert c.apply("eff-1", {"amount": 2000})["replayed"] is True
        with pytest.raises(NoLookup):
            c.query("eff-1")
        with pytest.raises(NoLookup):  # the target itself refuses, not only the client
            LocalRefunds(t.url, PAY, 1)._refunds("eff-1")
        # like tier 3: our own refund counts as others' once it is not told apart
        assert c.capture("eff-1")["refunded_by_others"] == 2000
