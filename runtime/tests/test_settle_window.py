"""A send the target still holds past its deadline (issue 22: mutants RecoverBeforeSettle,
RevokeListMissesLateSend, WatchdogRemoved).

Assumption A2 says the target settles any request within settle_margin after send_deadline, so a
request may land anywhere in (send_deadline, send_deadline + settle_margin]. The target here holds
its first POST /refunds (after arrival, before the ledger write) until the test releases it, and
the test releases it at a point of that window read from the database clock: no timing guesses.
"""

from __future__ import annotations

import signal
import threading
import time
from datetime import timedelta

import flows
import pytest

from interlock_runtime import Runtime, db, receipts
from interlock_runtime.effects import WATCHDOG_EXIT
from interlock_runtime.testing import wait_for
from world.target import Target
from world.target_client import TargetAdmin

PAYMENT = "pay_881"


class HoldingTarget(Target):
    """The local target, holding its first POST /refunds in the service delay (after the
    arrival is logged, before the ledger write) until release(); later POSTs go through."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.gate = threading.Event()
        self._taken = False
        self._lock = threading.Lock()

    def _service_delay(self) -> None:
        with self._lock:
            first, self._taken = not self._taken, True
        if first:
            self.gate.wait(60)
        super()._service_delay()

    def release(self) -> None:
        self.gate.set()


@pytest.fixture
def held(tmp_path):
    target = HoldingTarget(2, db=str(tmp_path / "held-ledger.sqlite")).start()
    admin = TargetAdmin(target.url)
    admin.create_payment(PAYMENT, 10000)
    yield target, admin
    target.release()
    target.close()


def case(target: Target, grant: str, key: str, send_timeout: float, settle_margin: float) -> dict:
    return {"id": key, "target_url": target.url, "payment": PAYMENT, "tier": 2,
            "payload": {"amount": 2000}, "grant": grant, "send_timeout": send_timeout,
            "settle_margin": settle_margin}  # fmt: skip


def posts(admin: TargetAdmin) -> list[dict]:
    return admin.log(path="/refunds", method="POST")


def refunds(admin: TargetAdmin) -> list[int]:
    return [r["amount"] for r in admin.ledger()["refunds"]]


def window(conn: db.Conn, wf: str) -> dict:
    """The send of `wf`'s effect: its id, state, send_deadline and settle_margin, and the
    database's now()."""
    return db.one(conn.execute(
        "select effect_id, state, send_deadline, settle_margin, now() as now from ilr.effects "
        "where workflow_id = %s", (wf,)))  # fmt: skip


def past_or_resolved(conn: db.Conn, wf: str, offset: float) -> dict | None:
    """The send's window once the database clock is past send_deadline + offset seconds, or
    as soon as somebody resolved the send (the caller asserts which)."""
    w = window(conn, wf)
    late = w["now"] > w["send_deadline"] + timedelta(seconds=offset)
    return w if late or w["state"] != "dispatched" else None


def test_a_tier2_answer_inside_the_settle_window_is_found_not_resent(dsn, workers, held) -> None:
    """RecoverBeforeSettle: the sender dies with its request held by the target; the request
    lands at send_deadline + settle_margin / 2. The successor, claiming well before, must neither
    query nor resend until send_deadline + settle_margin, and then finds the refund."""
    target, admin = held
    timeout, settle = 2.0, 4.0
    with Runtime(dsn) as rt, db.connect(dsn) as conn:
        grant = rt.grant("agent", "refund", by="policy")
        sender = workers("W1", lease_ttl=1.0)
        rt.start(
            flows.policy_refund, "wf-settle", case(target, grant, "case-settle", timeout, settle)
        )
        wait_for(lambda: posts(admin), 20, "W1's send to reach the target")
        sender.signal(signal.SIGKILL)  # the request is in flight, held by the target
        assert sender.proc.wait(timeout=10) == -signal.SIGKILL
        open_send = window(conn, "wf-settle")
        workers("W2", lease_ttl=1.0)  # claims once W1's lease expired, before the deadline
        w = wait_for(lambda: past_or_resolved(conn, "wf-settle", settle / 2), 30,
                     "the middle of the settle window")  # fmt: skip
        assert w["state"] == "dispatched", "recovery resolved the send inside the settle window"
        target.release()
        wait_for(lambda: refunds(admin), 10, "the held refund to land")
        out = rt.result("wf-settle", timeout=30)
        bundle = rt.receipt(out["effect_id"])
    settled = (open_send["send_deadline"] + open_send["settle_margin"]).timestamp()
    first = posts(admin)[0]
    later = [r for r in admin.log() if r["id"] > first["id"] and r["path"] == "/refunds"]
    assert out["status"] == "COMMITTED_ON_QUERY"
    assert refunds(admin) == [2000] and [p["worker"] for p in posts(admin)] == ["W1"]
    # W2's lookups (premises, then the recovery query) all came after deadline + settle.
    early = [round(r["arrival"] - settled, 2) for r in later if r["arrival"] <= settled]
    assert later and not early, f"{len(early)} reads before deadline + settle, at {early[:3]} s"
    assert {r["method"] for r in later} == {"GET"}  # and no resend
    v = receipts.verify(bundle)
    assert v["valid"] and v["happened"] is True and v["happened_once"] is True


def test_revoke_after_the_send_deadline_lists_a_send_the_target_still_holds(
    dsn, workers, held
) -> None:
    """RevokeListMissesLateSend: past send_deadline, inside the settle window, the held request
    may still land: rt.revoke must return its effect among those that may still land."""
    target, admin = held
    timeout, settle = 2.0, 3.0
    with Runtime(dsn) as rt, db.connect(dsn) as conn:
        grant = rt.grant("agent", "refund", by="policy")
        sender = workers("W1", lease_ttl=1.0)
        rt.start(flows.policy_refund, "wf-rl", case(target, grant, "case-rl", timeout, settle))
        wait_for(lambda: posts(admin), 20, "W1's send to reach the target")
        sender.signal(signal.SIGKILL)
        assert sender.proc.wait(timeout=10) == -signal.SIGKILL
        eid = window(conn, "wf-rl")["effect_id"]
        wait_for(lambda: past_or_resolved(conn, "wf-rl", 0.0), 20, "the send deadline to pass")
        may_land = rt.revoke(grant, by="alice")
        at = conn.execute("select g.revoked_at, e.send_deadline, e.settle_margin "
                          "from ilr.grants g, ilr.effects e where g.id = %s and e.effect_id = %s",
                          (grant, eid)).fetchone()  # fmt: skip
        target.release()  # and it does land, after the revoke
        wait_for(lambda: refunds(admin), 10, "the held refund to land")
    assert at["send_deadline"] < at["revoked_at"] < at["send_deadline"] + at["settle_margin"]
    assert may_land == [eid]
    assert admin.ledger()["refunds"][0]["created"] > at["revoked_at"].timestamp()


def test_a_send_that_outlives_its_deadline_ends_the_worker_with_the_watchdog_status(
    dsn, workers, held
) -> None:
    """WatchdogRemoved: the target client ignores the timeout it is given and the target holds
    the request; the watchdog ends the worker (os._exit(WATCHDOG_EXIT)) at the local deadline,
    before send_deadline has passed by much. The request lands inside the settle window and
    another worker recovers the effect by query."""
    target, admin = held
    timeout, settle = 2.0, 2.0
    with Runtime(dsn) as rt, db.connect(dsn) as conn:
        grant = rt.grant("agent", "refund", by="policy")
        sender = workers("W1", lease_ttl=1.5)
        rt.start(flows.deaf_refund, "wf-wd", case(target, grant, "case-wd", timeout, settle))
        wait_for(lambda: posts(admin), 20, "W1's send to reach the target")
        open_send = window(conn, "wf-wd")
        wait_for(lambda: sender.proc.poll() is not None, timeout + 6, "the watchdog to end W1")
        ended = time.time()
        assert sender.proc.returncode == WATCHDOG_EXIT
        target.release()
        wait_for(lambda: refunds(admin), 10, "the held refund to land")
        workers("W2", lease_ttl=1.5)
        out = rt.result("wf-wd", timeout=30)
        v = receipts.verify(rt.receipt(out["effect_id"]))
    deadline = open_send["send_deadline"].timestamp()
    # The watchdog fires at t0 + send_timeout, t0 read before T_dispatch: never after the
    # deadline the database recorded (give or take the polling and a busy machine).
    assert deadline - 1.0 < ended < deadline + 1.5, (ended, deadline)
    assert not [e for e in sender.events() if e.get("event") in ("fenced", "suspended")]
    assert out["status"] == "COMMITTED_ON_QUERY"
    assert refunds(admin) == [2000] and [p["worker"] for p in posts(admin)] == ["W1"]
    assert v["valid"] and v["happened"] is True and v["happened_once"] is True
