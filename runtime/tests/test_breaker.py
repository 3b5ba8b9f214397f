"""Circuit breaker per target: opens after N consecutive definite failures, refuses without
sending, is shared by all workers through Postgres, resets by hand or after the cool-down."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import flows
import pytest

from interlock_runtime import InvalidInput, Runtime, receipts
from world.target import Target
from world.target_client import LocalRefunds, TargetAdmin


@pytest.fixture
def target(tmp_path):
    t = Target(2, db=str(tmp_path / "ledger.db")).start()
    admin = TargetAdmin(t.url)
    admin.create_payment("pay_small", 1000)  # a 2000 refund is refused: insufficient_funds
    admin.create_payment("pay_big", 100000)
    yield t, admin
    t.stop()


def run(rt: Runtime, t: Target, grant: str, cid: str, payment: str, amount: int = 2000,
        threshold: int = 2, cooldown: float = 60) -> str:  # fmt: skip
    rt.start(flows.breaker_refund, cid, {"id": cid, "target_url": t.url, "payment": payment,
             "tier": 2, "amount": amount, "grant": grant, "threshold": threshold,
             "cooldown": cooldown})  # fmt: skip
    return rt.result(cid, timeout=30)


def posts(admin: TargetAdmin) -> int:
    return len(admin.log(path="/refunds", method="POST"))


def test_opens_after_n_refuses_without_sending_and_resets(dsn, workers, target) -> None:
    t, admin = target
    with Runtime(dsn) as rt:
        grant = rt.grant("agent", "refund", by="policy")
        a = workers("A")
        assert run(rt, t, grant, "f1", "pay_small") == "REFUSED:target_error"
        assert run(rt, t, grant, "f2", "pay_small") == "REFUSED:target_error"
        assert posts(admin) == 2
        a.signal(signal.SIGTERM)
        assert a.proc.wait(timeout=20) == 0
        workers("B")  # another process: it knows only what Postgres tells it
        assert run(rt, t, grant, "f3", "pay_big", amount=100) == "REFUSED:circuit_open"
        assert [c["owner"] for c in rt.claim_history("f3")] == ["B"]
        assert posts(admin) == 2  # refused before any byte was sent
        eid = rt.effects("f3")[0]["effect_id"]
        refused = rt.receipt(eid)["entries"][-1]
        assert refused["kind"] == "REFUSED" and refused["breaker"]["consecutive_failures"] == 2
        assert receipts.verify(rt.receipt(eid))["happened"] is False
        [state] = rt.breakers()
        assert state["open"] and state["consecutive_failures"] == 2
        out = subprocess.run([sys.executable, "-m", "interlock_runtime.cli", "breaker", "reset",
                              "local-refunds", "--dsn", dsn], capture_output=True, text=True)  # fmt: skip
        assert out.returncode == 0, out.stderr
        assert run(rt, t, grant, "f4", "pay_big", amount=100) == "COMMITTED"
        assert rt.breakers()[0]["consecutive_failures"] == 0


def test_half_open_after_the_cooldown(dsn, workers, target) -> None:
    t, admin = target
    with Runtime(dsn) as rt:
        grant = rt.grant("agent", "refund", by="policy")
        workers("A")
        assert (
            run(rt, t, grant, "g1", "pay_small", threshold=1, cooldown=1.5)
            == "REFUSED:target_error"
        )
        assert (
            run(rt, t, grant, "g2", "pay_big", amount=100, threshold=1, cooldown=1.5)
            == "REFUSED:circuit_open"
        )
        time.sleep(1.6)
        assert (
            run(rt, t, grant, "g3", "pay_big", amount=100, threshold=1, cooldown=1.5) == "COMMITTED"
        )
        assert rt.breakers()[0]["open"] is False


def test_bad_breaker_settings_and_unknown_targets_are_clear_errors(dsn) -> None:
    from interlock_runtime.effects import check_target

    t = LocalRefunds("http://127.0.0.1:9", "pay", 2)
    t.breaker_threshold = 0
    with pytest.raises(InvalidInput, match="breaker_threshold must be an integer >= 1"):
        check_target(t)
    with Runtime(dsn) as rt, pytest.raises(Exception, match="no circuit breaker for target 'nope'"):
        rt.reset_breaker("nope")
