"""result() hears the end of the run it waits for (migration 0008, docs/api.md#results).

Each wait below is given poll=30 and a timeout far below it: the only way it returns in time
is the run's end announced on ilr_ended. A run nobody waits on announces nothing (the notify
lock would serialize every completion), and a wait never writes a row that is not running (a
claim skips locked rows).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path

import psycopg
import pytest
from flows import echo

from interlock_runtime import AsyncRuntime, Runtime


def _last_step_at(log: Path) -> float:
    """When the run's last step body began (time.time() in the worker, the same host)."""
    return max(json.loads(line)["t"] for line in log.read_text().splitlines())


def _awaited(dsn: str, wf_id: str) -> bool:
    with psycopg.connect(dsn, autocommit=True) as c:
        row = c.execute("select awaited from ilr.workflows where id = %s", (wf_id,)).fetchone()
    assert row is not None
    return bool(row[0])


def test_a_waiting_result_is_woken_by_the_end_not_by_its_poll(dsn, workers, tmp_path) -> None:
    workers("N1")
    log = tmp_path / "steps.jsonl"
    with Runtime(dsn) as rt:
        rt.start("three_steps", "wf-n1", {"log": str(log), "sleep": {"s1": 1.5}})
        out = rt.result("wf-n1", timeout=10, poll=30)
        returned = time.time()
    assert [s["step"] for s in out] == ["s1", "s2", "s3"]
    assert _awaited(dsn, "wf-n1")  # it was marked while it ran: its end was announced
    late = returned - _last_step_at(log)
    assert late < 1.0, f"result() returned {late:.3f} s after the last step began"


def test_an_awaited_result_is_woken_by_the_end_too(dsn, workers, tmp_path) -> None:
    workers("N2")
    log = tmp_path / "steps.jsonl"

    async def scenario() -> list:
        async with AsyncRuntime(dsn) as rt:
            await rt.start("three_steps", "wf-n2", {"log": str(log), "sleep": {"s1": 1.5}})
            out: list = await rt.result("wf-n2", timeout=10, poll=30)
            return out

    out = asyncio.run(scenario())
    returned = time.time()
    assert [s["step"] for s in out] == ["s1", "s2", "s3"]
    assert _awaited(dsn, "wf-n2")
    late = returned - _last_step_at(log)
    assert late < 1.0, f"result() returned {late:.3f} s after the last step began"


def test_only_an_awaited_run_announces_its_end(dsn, workers, tmp_path) -> None:
    workers("N3")
    with psycopg.connect(dsn, autocommit=True) as listener, Runtime(dsn) as rt:
        listener.execute("listen ilr_ended")
        rt.start("echo", "wf-quiet", {"x": 1})
        deadline = time.monotonic() + 20
        while rt.describe("wf-quiet")["status"] != "completed":  # not result(): nobody waits
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert [n.payload for n in listener.notifies(timeout=0.5)] == []
        # the same channel carries the end of a run result() waits on
        rt.start("three_steps", "wf-heard", {"log": str(tmp_path / "l"), "sleep": {"s1": 1.0}})
        rt.result("wf-heard", timeout=10, poll=30)
        heard = [n.payload for n in listener.notifies(timeout=2, stop_after=1)]
    assert heard == ["wf-heard"]


def test_a_run_not_yet_claimed_is_not_written_by_a_wait(dsn) -> None:
    """No worker: the run stays pending (then sleeping but due) while result() waits. Its row is
    not marked, not even rewritten (same xmin): a claim (FOR UPDATE SKIP LOCKED) never finds
    it held by a mark."""
    with Runtime(dsn) as rt, psycopg.connect(dsn, autocommit=True) as c:
        rt.register(echo)
        rt.start("echo", "wf-pending", {"x": 1})
        row = "select xmin::text, awaited from ilr.workflows where id = 'wf-pending'"
        before = c.execute(row).fetchone()
        with pytest.raises(TimeoutError, match="still pending"):
            rt.result("wf-pending", timeout=0.5, poll=30)
        assert c.execute(row).fetchone() == before == (before[0], False)
        # nor a sleeping row already due (its timer has come: a claim is about to take it)
        c.execute("update ilr.workflows set status = 'sleeping', available_at = now() - "
                  "interval '1 second' where id = 'wf-pending'")  # fmt: skip
        before = c.execute(row).fetchone()
        with pytest.raises(TimeoutError, match="still sleeping"):
            rt.result("wf-pending", timeout=0.5, poll=30)
        assert c.execute(row).fetchone() == before == (before[0], False)


def test_a_wait_on_a_run_waiting_for_a_signal_is_marked_and_does_not_poll(dsn, workers) -> None:
    """A run parked on a signal (status sleeping, due never) is marked by the wait's first look:
    the wait then sleeps until the end is heard instead of looking every 0.1 s, and the signal
    that ends the run wakes it."""
    workers("N6")
    box: list = []
    with Runtime(dsn) as rt:
        rt.start("waiter", "wf-n6", {"timeout": 0.2})
        deadline = time.monotonic() + 20
        while rt.describe("wf-n6")["status"] != "sleeping":
            assert time.monotonic() < deadline, "the run never parked on its signal"
            time.sleep(0.05)
        looks = []
        look = rt._look
        rt._look = lambda *a, **k: looks.append(k.get("mark")) or look(*a, **k)  # type: ignore[method-assign]
        waiting = threading.Thread(target=lambda: box.append(rt.result("wf-n6", timeout=20,
                                                                        poll=30)))  # fmt: skip
        waiting.start()
        time.sleep(1.5)
        assert _awaited(dsn, "wf-n6")
        assert len(looks) <= 2, f"{len(looks)} looks in 1.5 s at a parked run (unheard: 0.1 s)"
        with Runtime(dsn) as other:
            other.signal("wf-n6", "go", 1)
            other.signal("wf-n6", "go", 2)
        sent = time.monotonic()
        waiting.join(timeout=15)
        returned = time.monotonic()
    assert box == [[1, 2, None]]
    assert returned - sent < 5.0, f"result() returned {returned - sent:.2f} s after the signals"


def test_a_lost_listener_is_replaced_and_the_wait_still_ends(dsn, workers, tmp_path) -> None:
    """The listening connection is terminated while result() waits (poll=30): its waiters
    are woken, look again, listen again, and hear the end."""
    workers("N5")
    log = tmp_path / "steps.jsonl"
    box: list = []
    with Runtime(dsn) as rt:
        rt.start("three_steps", "wf-n5", {"log": str(log), "sleep": {"s1": 3.0}})
        waiting = threading.Thread(target=lambda: box.append(rt.result("wf-n5", timeout=15,
                                                                        poll=30)))  # fmt: skip
        waiting.start()
        time.sleep(1.0)
        with psycopg.connect(dsn, autocommit=True) as c:
            killed = c.execute("select pg_terminate_backend(pid) from pg_stat_activity"
                               " where datname = current_database()"
                               " and query = 'listen ilr_ended'").fetchall()  # fmt: skip
        waiting.join(timeout=20)
        returned = time.time()
    assert killed == [(True,)]
    assert box and [s["step"] for s in box[0]] == ["s1", "s2", "s3"]
    assert returned - _last_step_at(log) < 1.5
