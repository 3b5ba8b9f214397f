"""HttpTarget (interlock_runtime.effects.targets) against the real local payment target (world/target.py):
effects driven end to end by real worker subprocesses serving the workflows below (this module
is also the workers' `--module`), and the target's answers checked one by one.

What landed is counted in the target's ledger and access log, never in the runtime's records.
Timeouts are short so recovery comes quickly: send_timeout 2.5 s, settle_margin 1 s.
"""

from __future__ import annotations

import signal
import threading

import pytest

from conftest import PAYMENT
from interlock_runtime import (
    EffectTarget,
    HttpTarget,
    InvalidInput,
    Runtime,
    TargetRejected,
    receipts,
    workflow,
)
from interlock_runtime.effects import check_target
from interlock_runtime.effects.targets import HttpTargetError, NoLookup, QueryableTarget

MODULE = "test_http_target"  # the workers import this module for its workflow

# -- the workflow the workers run --------------------------------------------------------------


def http_target(case: dict) -> HttpTarget:
    """The generic HTTP target pointed at the local target's refund endpoint (a test choice:
    HttpTarget knows nothing of refunds). The sender headers are the names the local target's
    access log records, so that each POST shows which worker sent it."""
    lookup = None
    if case.get("lookup", case["tier"] == 2):
        lookup = case["url"] + "/refunds?payment={payment}&key={effect_id}"
    return HttpTarget("http-refunds", case["url"] + "/refunds", case["tier"], lookup=lookup,
                      action="refund", send_timeout=2.5, settle_margin=1.0,
                      headers={"Authorization": "Bearer sk_test_not_logged"},
                      sender_headers=("X-ILR-Worker", "X-ILR-Epoch"))  # fmt: skip


def refund_payload(case_id: str, amount: int = 2000) -> dict:
    return {"payment": PAYMENT, "amount": amount, "metadata": {"case": case_id}}


@workflow(name="http_refund", version="1")
def http_refund(ctx, case):
    r = ctx.effect(http_target(case), key=f"refund:{case['id']}", payload=case["payload"],
                   premises={"payment": PAYMENT}, grant=case["grant"])  # fmt: skip
    return {"status": r.status, "effect_id": r.effect_id, "result": r.result}


# -- helpers -----------------------------------------------------------------------------------


def start(rt: Runtime, target, tier: int, wf: str, **extra) -> None:
    grant = rt.grant("agent", "refund", by="policy")
    payload = extra.pop("payload", None) or refund_payload(wf)
    rt.start(http_refund, wf, {"id": wf, "url": target.url, "tier": tier, "grant": grant,
                               "payload": payload, **extra})  # fmt: skip


def ledger(admin) -> list[dict]:
    return admin.ledger()["refunds"]


def posts(admin) -> list[dict]:
    return admin.log(path="/refunds", method="POST")


# -- (a) tier 1: the target dedupes the resend -------------------------------------------------


def test_tier1_effect_lands_once_and_the_resend_is_deduplicated_by_the_target(
    dsn, workers, target_factory
) -> None:
    """W1 is killed after the target answered, before T_commit; W2 resends the same effect id
    (COMMITTED_BY_RETRY) and the target replays its stored refund instead of refunding again."""
    target, admin = target_factory(1)
    with Runtime(dsn) as rt:
        dying = workers(
            "W1", module=MODULE, env={"ILR_KILL_AT": "effect_after_send"}, lease_ttl=1.5
        )
        start(rt, target, 1, "wf-t1")
        assert dying.proc.wait(timeout=30) == -signal.SIGKILL
        workers("W2", module=MODULE, lease_ttl=1.5)
        out = rt.result("wf-t1", timeout=40)
        v = receipts.verify(rt.receipt(out["effect_id"]))
    eid = out["effect_id"]
    assert out["status"] == "COMMITTED_BY_RETRY"
    refunds = ledger(admin)  # the target's ledger: one refund
    assert [r["amount"] for r in refunds] == [2000], "the target refunded more than once"
    refund = refunds[0]
    assert refund["key"] == eid
    assert refund["metadata"] == {"case": "wf-t1"}  # the payload went through as it was
    sent = posts(admin)
    assert [p["worker"] for p in sent] == ["W1", "W2"]  # two POSTs, one refund
    assert [p["key"] for p in sent] == [eid, eid]  # the Idempotency-Key header
    assert int(sent[1]["epoch"]) > int(sent[0]["epoch"])
    assert [p["status"] for p in sent] == [200, 200]
    assert sent[0]["response"]["replayed"] is False and sent[1]["response"]["replayed"] is True
    assert out["result"]["id"] == refund["id"]
    assert v["valid"] and v["happened_once"] is True and v["sends"] == 2


# -- (b) tier 2: query finds an applied effect, reports a missing one --------------------------


def test_tier2_query_finds_the_applied_effect_at_recovery(dsn, workers, target_factory) -> None:
    target, admin = target_factory(2)
    with Runtime(dsn) as rt:
        dying = workers(
            "W1", module=MODULE, env={"ILR_KILL_AT": "effect_after_send"}, lease_ttl=1.5
        )
        start(rt, target, 2, "wf-t2")
        assert dying.proc.wait(timeout=30) == -signal.SIGKILL
        workers("W2", module=MODULE, lease_ttl=1.5)
        out = rt.result("wf-t2", timeout=40)
    eid = out["effect_id"]
    refunds = ledger(admin)
    assert [r["amount"] for r in refunds] == [2000], "the target refunded more than once"
    refund = refunds[0]
    assert out["status"] == "COMMITTED_ON_QUERY"
    assert out["result"]["id"] == refund["id"] and out["result"]["count"] == 1
    assert [p["worker"] for p in posts(admin)] == ["W1"]  # found, so never resent
    t = http_target({"url": target.url, "tier": 2})
    found = t.query(eid, refund_payload("wf-t2"))
    assert found["id"] == refund["id"] and found["key"] == eid and found["count"] == 1
    assert t.query("eff_" + "0" * 32, refund_payload("wf-t2")) is None


def test_tier2_query_reports_a_missing_effect_and_recovery_sends_it(
    dsn, workers, target_factory
) -> None:
    """W1 is killed after T_dispatch with nothing sent: the lookup says not applied, so W2
    sends it (REAPPLIED_AFTER_QUERY), once."""
    target, admin = target_factory(2)
    with Runtime(dsn) as rt:
        dying = workers(
            "W1", module=MODULE, env={"ILR_KILL_AT": "effect_after_dispatch"}, lease_ttl=1.5
        )
        start(rt, target, 2, "wf-t2m")
        assert dying.proc.wait(timeout=30) == -signal.SIGKILL
        assert posts(admin) == []
        workers("W2", module=MODULE, lease_ttl=1.5)
        out = rt.result("wf-t2m", timeout=40)
    assert out["status"] == "REAPPLIED_AFTER_QUERY"
    assert [r["amount"] for r in ledger(admin)] == [2000]
    assert [p["worker"] for p in posts(admin)] == ["W2"]
    lookups = admin.log(path="/refunds", method="GET")
    assert lookups and lookups[0]["worker"] is None  # lookups carry no sender headers


# -- (c) a 4xx is a definite refusal, a 500 is not ---------------------------------------------


def test_a_4xx_is_refused_as_target_error(dsn, workers, target_factory) -> None:
    target, admin = target_factory(2)
    with Runtime(dsn) as rt:
        workers("W1", module=MODULE)
        start(rt, target, 2, "wf-4xx", payload=refund_payload("wf-4xx", amount=20000))
        out = rt.result("wf-4xx", timeout=30)
    assert out["status"] == "REFUSED:target_error"
    assert out["result"]["status"] == 400
    assert out["result"]["body"]["error"] == "insufficient_funds"
    assert ledger(admin) == [] and [p["status"] for p in posts(admin)] == [400]


def test_a_500_leaves_the_outcome_open_and_recovery_resolves_it(
    dsn, workers, target_factory, monkeypatch
) -> None:
    """The target fails its first POST with a 500 before writing the ledger. That is not a
    definite refusal: the effect stays dispatched, recovery's lookup finds nothing, and the
    resend lands (treated as definite, it would have ended REFUSED:target_error)."""
    target, admin = target_factory(2)
    real, calls = target.post_refund, []

    def fail_first(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("EMULATED: the target's database is down")
        return real(*args, **kwargs)

    monkeypatch.setattr(target, "post_refund", fail_first)
    with Runtime(dsn) as rt:
        workers("W1", module=MODULE, lease_ttl=1.5)
        start(rt, target, 2, "wf-500")
        out = rt.result("wf-500", timeout=40)
    assert out["status"] == "REAPPLIED_AFTER_QUERY"
    assert [p["status"] for p in posts(admin)] == [500, 200]
    assert [r["amount"] for r in ledger(admin)] == [2000]


@pytest.mark.parametrize(
    "status, definite",
    [
        (400, True),
        (404, True),
        (422, True),
        (408, False),
        (409, False),
        (429, False),
        (500, False),
        (503, False),
    ],  # fmt: skip
)
def test_each_status_is_definite_or_not(target_factory, monkeypatch, status, definite) -> None:
    from world.target import _bad

    target, admin = target_factory(2)

    def answer(*args, **kwargs):
        raise _bad(f"emulated_{status}", "EMULATED answer", status)

    monkeypatch.setattr(target, "post_refund", answer)
    t = http_target({"url": target.url, "tier": 2})
    with pytest.raises((TargetRejected, HttpTargetError)) as ei:
        t.apply("eff_1", refund_payload("c"), worker="W", epoch=1, timeout=5)
    assert isinstance(ei.value, TargetRejected) is definite
    if definite:
        assert ei.value.reason == f"emulated_{status}"
        assert ei.value.response == {"status": status, "body": {
            "error": f"emulated_{status}", "detail": "EMULATED answer"}}  # fmt: skip
    else:
        assert ei.value.status == status
        assert "sk_test_not_logged" not in str(ei.value)


def test_a_key_still_in_flight_is_409_and_not_definite(target_factory) -> None:
    """Tier 1: a second POST with the key of a request the target is still processing gets
    409 idempotency_key_in_use; the first one lands, once."""
    target, admin = target_factory(1)
    admin.set_delay(1500, count=1)
    t = http_target({"url": target.url, "tier": 1})
    first: list = []
    sender = threading.Thread(target=lambda: first.append(
        t.apply("eff_a", refund_payload("c"), worker="W1", epoch=2, timeout=10)))  # fmt: skip
    sender.start()
    try:
        from conftest import wait_for

        wait_for(lambda: posts(admin), 10, "the first POST to arrive")
        with pytest.raises(HttpTargetError) as ei:
            t.apply("eff_a", refund_payload("c"), worker="W2", epoch=3, timeout=10)
    finally:
        sender.join(20)
    assert ei.value.status == 409 and ei.value.body["error"] == "idempotency_key_in_use"
    assert first[0]["amount"] == 2000 and len(ledger(admin)) == 1


def test_timeouts_and_connection_errors_are_not_definite(target_factory) -> None:
    target, admin = target_factory(1)
    admin.set_delay(2000, count=1)
    t = http_target({"url": target.url, "tier": 1})
    with pytest.raises(TimeoutError):
        t.apply("eff_slow", refund_payload("c"), worker="W1", epoch=1, timeout=0.5)
    target.stop()
    with pytest.raises(ConnectionError):
        t.apply("eff_down", refund_payload("c"), worker="W1", epoch=1, timeout=2)


# -- (d) constructor validation ----------------------------------------------------------------

URL = "http://127.0.0.1:9/refunds"
LOOKUP = "http://127.0.0.1:9/refunds?key={effect_id}"


@pytest.mark.parametrize(
    "args, kwargs, message",
    [
        (("", URL, 1), {}, "name must be a non-empty string"),
        (("t", URL, 4), {}, r"tier must be 1 \(the server dedupes"),
        (("t", URL, True), {}, "tier must be 1"),
        (("t", URL, "1"), {}, "tier must be 1"),
        (("t", "ftp://host/x", 1), {}, r"must be an absolute http:// or https:// URL"),
        (("t", "/refunds", 1), {}, r"must be an absolute http:// or https:// URL"),
        (("t", "http://u:secret@host/x", 1), {}, "pass them as headers"),
        (("t", URL, 2), {}, r"tier 2 needs lookup=\.\.\."),
        (("t", URL, 3), {"lookup": LOOKUP}, "tier 3 means .* takes no lookup"),
        (("t", URL, 2), {"lookup": "http://h/refunds?key=x"}, r"must contain \{effect_id\}"),
        (("t", URL, 2), {"lookup": "http://h/{effect_id"}, "lookup template"),
        (("t", URL, 2), {"lookup": "http://h/{p[0]}/{effect_id}"}, "is not a plain name"),
        (("t", URL, 2), {"lookup": "{base}/{effect_id}"}, "lookup must be an absolute"),
        (("t", URL, 2), {"lookup": 42}, "lookup must be a URL template or a callable"),
        (("t", URL, 1), {"headers": {"Idempotency-Key": "x"}}, "set per request"),
        (("t", URL, 1), {"headers": {"A": 1}}, "must map a string name"),
        (("t", URL, 1), {"send_timeout": -1}, "send_timeout must be a number"),
        (("t", URL, 1), {"action": ""}, "action must be a non-empty string"),
        (("t", URL, 1), {"breaker_threshold": 0}, "breaker_threshold must be an integer"),
        (
            ("t", URL, 1),
            {"send_timeout": 35, "settle_margin": 10, "dedup_margin": 40},
            r"tier 1 is safe only when DEDUP_MARGIN > send_timeout",
        ),  # fmt: skip
    ],
)
def test_constructor_refuses_bad_arguments_and_says_what_to_do(args, kwargs, message) -> None:
    with pytest.raises(InvalidInput, match=message):
        HttpTarget(*args, **kwargs)


def test_what_the_runtime_reads_from_an_http_target() -> None:
    t1 = HttpTarget("t", URL, 1)
    t2 = HttpTarget("t", URL, 2, lookup=LOOKUP, send_timeout=5, breaker_threshold=3)
    t3 = HttpTarget("t", URL, 3, headers={"Authorization": "Bearer sk_test_secret"})
    spec = check_target(t1)
    assert (spec.tier, spec.queryable, spec.send_timeout, spec.dedup_margin) == (1, False, 35, 600)
    spec = check_target(t2)
    assert (spec.queryable, spec.send_timeout, spec.breaker_threshold) == (True, 5.0, 3)
    assert check_target(t3).queryable is False
    assert not hasattr(t1, "action")  # the runtime's default applies
    with pytest.raises(NoLookup, match="no lookup"):
        t3.query("eff_1", {})
    assert "sk_test_secret" not in repr(t3) and repr(t3) == f"HttpTarget('t', '{URL}', tier=3)"
    assert repr(HttpTarget("t", URL + "?api_key=s3cret", 1)).count("s3cret") == 0
    assert t3.validate_premises({"x": 1}, "eff_1") == []
    checked = HttpTarget("t", URL, 1, premise_check=lambda p, e: [f"{e}: {p['x']} changed"])
    assert checked.validate_premises({"x": 1}, "eff_1") == ["eff_1: 1 changed"]
    with pytest.raises(InvalidInput, match=r"needs \{payment\}"):
        HttpTarget("t", URL, 2, lookup="http://h/r?p={payment}&k={effect_id}").query("e", {})
    seen = []
    by_hand = HttpTarget("t", URL, 2, lookup=lambda eid, p: seen.append((eid, p)) or None)
    assert by_hand.query("eff_1", {"a": 1}) is None and seen == [("eff_1", {"a": 1})]


# -- (e) the contract --------------------------------------------------------------------------


def test_local_refunds_and_http_target_satisfy_the_protocol() -> None:
    from world.target_client import LocalRefunds

    local = LocalRefunds("http://127.0.0.1:9", PAYMENT, 2)
    http = HttpTarget("t", URL, 2, lookup=LOOKUP)
    for target in (local, http):
        assert isinstance(target, EffectTarget) and isinstance(target, QueryableTarget)
    assert isinstance(HttpTarget("t", URL, 3), EffectTarget)

    class NoPremises:
        name, tier = "x", 3

        def apply(self, effect_id, payload, *, worker, epoch, timeout):
            return None

    assert not isinstance(NoPremises(), EffectTarget)  # check_target refuses it too
    with pytest.raises(InvalidInput, match="is not an effect target"):
        check_target(NoPremises())
    typed: EffectTarget = http  # checked by a type checker, if one is run
    assert typed is http
