"""S01 at tier 1 through the Stripe adapter (EMULATED) and real worker subprocesses."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from interlock_runtime import Runtime, receipts, testing
from prove import stripe_flows
from prove.flows import payload_for
from world.targets_for_tests import TargetFactory

PAY = "pay_881"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def make_target(tmp_path) -> Iterator:
    factory = TargetFactory(tmp_path, PAY)
    yield factory.make
    factory.close()


@pytest.fixture
def dsn() -> Iterator[str]:
    admin = testing.admin_dsn()
    with testing.template_database(admin) as tpl, testing.fresh_database(admin, tpl) as fresh:
        yield fresh


def test_s01_tier1_kill_after_send_commits_by_retry(dsn, make_target, tmp_path) -> None:
    """S01 (EMULATED Stripe): SIGKILL after the target answered, before T_commit; the next
    worker resends with the same Idempotency-Key, the target replays, one refund."""
    t, admin = make_target(1)
    case = {"id": "case-4471", "target_url": t.url, "payment": PAY, "tier": 1,
            "send_timeout": 2.5, "settle_margin": 1.0}  # fmt: skip
    started: list[testing.WorkerProcess] = []

    def worker(wid: str, **env: str) -> testing.WorkerProcess:
        w = testing.WorkerProcess(dsn, wid, tmp_path, "prove.stripe_flows", pythonpath=str(REPO),
                                  lease_ttl=1.5, poll=0.2, env=env, cwd=str(REPO))  # fmt: skip
        started.append(w)
        return w

    try:
        with Runtime(dsn) as rt:
            dying = worker("W1", ILR_KILL_AT="effect_after_send")
            rt.start(stripe_flows.stripe_refund, "wf-stripe-s01", case)
            testing.wait_for(
                lambda: (rt.describe("wf-stripe-s01")["waiting"] or {}).get("signal") == "approve",
                30, "the approval wait")  # fmt: skip
            decided = rt.describe("wf-stripe-s01")["steps"][0]["output"]
            rt.approve("wf-stripe-s01", payload_for(case, 2000),
                       decided["premises"], by="alice")  # fmt: skip
            assert dying.proc.wait(timeout=30) == -signal.SIGKILL
            worker("W2")
            out = rt.result("wf-stripe-s01", timeout=40)
            v = receipts.verify(rt.receipt(out["effect_id"]))
    finally:
        for w in started:
            w.close()
    assert out["status"] == "COMMITTED_BY_RETRY"
    assert [r["amount"] for r in admin.ledger()["refunds"]] == [2000]  # exactly one refund
    posts = admin.log(path="/v1/refunds", method="POST")
    assert [p["worker"] for p in posts] == ["W1", "W2"]
    assert posts[1]["response"]["id"] == posts[0]["response"]["id"]  # the resend was replayed
    assert out["result"]["replayed"] is True
    assert v["valid"] and v["happened"] is True and v["happened_once"] is True
    assert v["authorized_when_fired"] is True and v["assumptions_held"] is True
