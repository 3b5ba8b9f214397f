"""Ratchet-style tenure checks (issue 6): racing processes never share an epoch.

- 8 processes run the runtime's own claim statement on one workflow at the same instant (a
  barrier releases them together): exactly one wins each epoch; after the lease expires, the 7
  losers plus the winner race again for the takeover and exactly one new epoch results.
- 8 real worker subprocesses wait for one workflow; each winner SIGSTOPs itself right after its
  claim (ILR_STOP_AT=claimed), so every expiry is a concurrent takeover by the rest: one new
  epoch per expiry, every takeover after the previous lease ended, never two holders.
"""

from __future__ import annotations

import multiprocessing as mp
import signal

from conformance.invariants import Evidence, check_all
from conformance.trace_replay import REPO, replay_signals
from interlock_runtime import Runtime, db
from interlock_runtime.testing import WorkerProcess, wait_for

RACERS = 8
TTL = 1.0


def _racer(dsn: str, owner: str, barrier, out) -> None:
    """One process: connect, wait at the barrier, run the claim statement once."""
    with db.connect(dsn) as conn:
        conn.execute("select 1")
        params = {"names": ["replay_signals"], "versions": ["1"], "limit": 1, "owner": owner,
                  "ttl": TTL, "queues": None}  # fmt: skip
        barrier.wait(30)
        rows = conn.execute(db.query("claim"), params).fetchall()
        out.put((owner, [r["epoch"] for r in rows]))


def _race(dsn: str, round_no: int) -> list[tuple[str, list[int]]]:
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(RACERS), ctx.Queue()
    procs = [ctx.Process(target=_racer, args=(dsn, f"r{round_no}.{i}", barrier, out))
             for i in range(RACERS)]  # fmt: skip
    for p in procs:
        p.start()
    results = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    return results


def _evidence_holds(dsn: str) -> dict:
    with db.connect(dsn) as conn:
        ev = Evidence(conn, ledger=[], access_log=[], events=[])
        return check_all(ev, ["LeaseMutex", "TakeoverOnlyAfterExpiry"])


def test_eight_processes_race_for_one_claim_one_winner_per_epoch(dsn) -> None:
    with Runtime(dsn) as rt:
        rt.start(replay_signals, "tenure-sql", {"sleep": 1})  # registers the deployment
        for round_no in range(1, 4):
            if round_no > 1:  # the lease of the last winner has expired: a takeover race
                with db.connect(dsn) as conn:
                    wait_for(lambda c=conn: c.execute(
                        "select lease_expires_at <= now() as x from ilr.workflows "
                        "where id = 'tenure-sql'").fetchone()["x"], 10, "the lease to expire")  # fmt: skip
            results = _race(dsn, round_no)
            winners = [(o, e) for o, e in results if e]
            assert len(results) == RACERS
            assert len(winners) == 1, results  # exactly one of 8 claimed
            assert winners[0][1] == [round_no]  # and it made exactly one new epoch
        history = rt.claim_history("tenure-sql")
    assert [c["epoch"] for c in history] == [1, 2, 3]
    assert [c["prev_status"] for c in history] == ["pending", "running", "running"]
    assert all(c["claimed_at"] >= c["prev_lease_expires_at"] for c in history[1:])
    assert _evidence_holds(dsn) == {"LeaseMutex": [], "TakeoverOnlyAfterExpiry": []}


def test_eight_workers_take_over_one_expired_lease_one_epoch_at_a_time(dsn, tmp_path) -> None:
    workers = [WorkerProcess(dsn, f"t{i}", tmp_path, "conformance.trace_replay",
                             pythonpath=str(REPO), cwd=str(REPO), lease_ttl=TTL, poll=0.05,
                             concurrency=1, env={"ILR_STOP_AT": "claimed"},
                             extra_args=("--only", "replay_signals@1"))  # the plain one only
               for i in range(RACERS)]  # fmt: skip
    try:
        for w in workers:
            w.wait_event("registered", timeout=60)
        with Runtime(dsn) as rt:
            rt.start("replay_signals", "tenure-workers", {"sleep": 1})
            # each winner stops right after its claim: the rest race for every takeover
            wait_for(lambda: sum(w.state() == "T" for w in workers) >= 4, 60,
                     "four successive winners")  # fmt: skip
            history = rt.claim_history("tenure-workers")
        stopped = {w.worker_id for w in workers if w.state() == "T"}
    finally:
        for w in workers:
            w.signal(signal.SIGCONT) if w.proc.poll() is None else None
            w.close()
    epochs = [c["epoch"] for c in history]
    assert epochs == list(range(1, len(epochs) + 1)) and len(epochs) >= 4, history
    owners = [c["owner"] for c in history]
    assert len(set(owners)) == len(owners)  # a stopped winner never claims again
    assert set(owners[:-1]) <= stopped  # every winner but maybe the newest stopped at its claim
    assert all(c["claimed_at"] >= c["prev_lease_expires_at"] for c in history[1:])
    assert _evidence_holds(dsn) == {"LeaseMutex": [], "TakeoverOnlyAfterExpiry": []}
