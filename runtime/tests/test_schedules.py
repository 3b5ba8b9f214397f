"""Durable schedules (schedules.py, docs/schedules.md): the cron parser, the firing pass judged
by the database clock, overlap policies, bounded catch-up, and real workers racing one tick,
one of them SIGKILLed mid-pass. Ground truth is always the database: ilr.workflows and
ilr.schedule_fires, never a worker's log."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections import Counter
from datetime import datetime, timedelta, timezone

import flows
import psycopg
import pytest

from conftest import wait_for
from interlock_runtime import Runtime, cli, schedules
from interlock_runtime.errors import InvalidInput, ScheduleConflict, ScheduleNotFound
from interlock_runtime.schedules import Spec, fire_due, make_spec, parse_cron, workflow_id

UTC = timezone.utc


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


# -- the cron parser ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cron", "after", "expected"),
    [
        ("*/15 * * * *", "2026-03-04 10:07:30", ["10:15", "10:30", "10:45", "11:00"]),
        ("5/20 * * * *", "2026-03-04 10:00:00", ["10:05", "10:25", "10:45", "11:05"]),
        ("0 9 * * MON-FRI", "2026-03-06 10:00:00", ["03-09 09:00", "03-10 09:00"]),  # Fri
        ("0 12 * jan,JUL sun", "2026-01-01 00:00:00", ["01-04 12:00", "01-11 12:00"]),
        ("0 0 * * 7", "2026-03-04 00:00:00", ["03-08 00:00"]),  # 7 is Sunday too
        ("0 0 13 * 5", "2026-02-01 00:00:00", ["02-06 00:00", "02-13 00:00", "02-20 00:00"]),
        ("0 0 29 2 *", "2026-03-01 00:00:00", ["2028-02-29 00:00"]),  # a leap day
        ("@hourly", "2026-03-04 10:00:00", ["11:00", "12:00"]),  # strictly after
        ("@weekly", "2026-03-04 10:00:00", ["03-08 00:00"]),
        ("59 23 31 12 *", "2026-12-31 23:59:00", ["2027-12-31 23:59"]),
    ],
)
def test_cron_next_ticks(cron: str, after: str, expected: list[str]) -> None:
    got = Spec(cron=parse_cron(cron)).ticks(at(after), len(expected))
    fmt = {5: "%H:%M", 11: "%m-%d %H:%M", 16: "%Y-%m-%d %H:%M"}
    assert [t.strftime(fmt[len(e)]) for t, e in zip(got, expected, strict=True)] == expected


@pytest.mark.parametrize(
    ("cron", "says"),
    [
        ("", "0 fields"),
        ("* * * *", "4 fields"),
        ("0 * * * * *", "6 fields"),  # seconds are not cron's
        ("60 * * * *", "minute 60 is out of range 0-59"),
        ("* 24 * * *", "hour 24 is out of range"),
        ("* * 0 * *", "day of month 0 is out of range 1-31"),
        ("* * 32 * *", "out of range"),
        ("* * * 13 *", "month 13 is out of range 1-12"),
        ("* * * * 8", "day of week 8 is out of range 0-7"),
        ("*/0 * * * *", "step /0"),
        ("*/61 * * * *", "step /61"),
        ("5-1 * * * *", "runs backwards"),
        ("1,,2 * * * *", "is not a value"),
        ("1-2-3 * * * *", "is not a value"),
        ("- * * * *", "is not a value"),
        ("a * * * *", "minute 'a' is not a number"),
        ("* * * FOO *", "or a name (JAN"),
        ("*\x00 * * * *", "control or non-ASCII"),
        ("* * * * *\n", "control or non-ASCII"),
        ("\uff19 * * * *", "control or non-ASCII"),  # a full-width digit: isdigit() is True
        ("99999999999999999999999 * * * *", "out of range"),
        ("*/99999999999999999999 * * * *", "step"),
        ("0 0 31 2,4 *", "never fire"),
        ("0 0 30 2 *", "never fire"),
        ("@every 5m", "unknown macro"),
        ("* " * 150, "the limit is 200"),
        (None, "must be a string"),
        (5, "must be a string"),
    ],
)
def test_cron_refuses_hostile_input_saying_how_to_write_one(cron: object, says: str) -> None:
    with pytest.raises(InvalidInput) as err:
        parse_cron(cron)
    assert says in str(err.value)
    assert "\n" not in str(err.value) and "\x00" not in str(err.value)
    if "limit" not in says:
        assert "five fields" in str(err.value)  # what to write instead


def test_a_restricted_day_of_month_or_week_matches_either_as_cron_does() -> None:
    # both restricted: the 13th OR a Friday; one of them '*': both must hold
    either = Spec(cron=parse_cron("0 0 13 * FRI")).ticks(at("2026-02-01 00:00:00"), 3)
    assert [t.day for t in either] == [6, 13, 20]
    both = Spec(cron=parse_cron("0 0 */1 * FRI")).ticks(at("2026-02-01 00:00:00"), 2)
    assert [t.day for t in both] == [6, 13]


def test_interval_ticks_align_to_the_epoch_and_to_their_offset() -> None:
    spec = make_spec(every=3600, offset=900)
    assert spec.ticks(at("2026-03-04 10:20:00"), 2) == [at("2026-03-04 11:15:00"),
                                                        at("2026-03-04 12:15:00")]  # fmt: skip
    assert Spec(every=1).next_after(at("2026-03-04 10:20:00.5")) == at("2026-03-04 10:20:01")
    assert Spec(every=1).next_after(at("2026-03-04 10:20:01")) == at("2026-03-04 10:20:02")
    for bad, says in [({"every": 0}, "at least 1"), ({"every": 1.5}, "whole number"),
                      ({"every": float("nan")}, "whole number"), ({"every": True}, "must be a number"),
                      ({"every": 60, "offset": 60}, "at most 59"), ({}, "exactly one of"),
                      ({"every": 60, "cron": "* * * * *"}, "exactly one of"),
                      ({"every": 60, "time_zone": "Europe/Paris"}, "applies to cron"),
                      ({"cron": "* * * * *", "offset": 5}, "applies to every")]:  # fmt: skip
        with pytest.raises(InvalidInput, match=says):
            make_spec(**bad)  # type: ignore[arg-type]


def test_cron_in_a_time_zone_across_daylight_saving() -> None:
    pytest.importorskip("zoneinfo").ZoneInfo("America/New_York")  # needs the tz database
    ny = make_spec(cron="30 2 * * *", time_zone="America/New_York")
    # 2026-03-08 02:30 does not exist in New York (clocks jump 02:00 -> 03:00): no fire that day
    assert ny.ticks(at("2026-03-07 00:00:00"), 2) == [at("2026-03-07 07:30:00"),
                                                      at("2026-03-09 06:30:00")]  # fmt: skip
    once = make_spec(cron="30 1 * * *", time_zone="America/New_York")
    # 2026-11-01 01:30 happens twice (EDT, then EST): it fires once, the first time
    assert once.ticks(at("2026-10-31 12:00:00"), 2) == [at("2026-11-01 05:30:00"),
                                                        at("2026-11-02 06:30:00")]  # fmt: skip
    for zone in ("Mars/Olympus", "../../etc/passwd", "UTC\x00", "", "Europe/Paris " * 10):
        with pytest.raises(InvalidInput, match="time zone"):
            make_spec(cron="* * * * *", time_zone=zone)


def test_schedule_ids_leave_room_for_the_tick_in_their_runs_ids() -> None:
    tick = at("2026-03-04 10:20:00")
    assert workflow_id("nightly", tick) == "nightly@2026-03-04T10:20:00Z"
    longest = "s" * schedules.MAX_SCHEDULE_ID_CHARS
    wf = workflow_id(longest, tick + timedelta(microseconds=7), "trigger")
    assert wf.endswith("@trigger-2026-03-04T10:20:00.000007Z") and len(wf) <= 200
    for bad in (longest + "s", "has space", "nul\x00", "", 7):
        with pytest.raises(InvalidInput, match="schedule id"):
            schedules.check_id(bad)


# -- the firing pass, in this process (the database clock, no workers) -------------------------


def _back(conn: psycopg.Connection, sid: str, seconds: int) -> None:
    """Make `seconds` + 1 whole-second ticks due now: the first `seconds` seconds ago."""
    conn.execute("update ilr.schedules set next_fire_at = date_trunc('second', now()) "
                 "- make_interval(secs => %s) where id = %s", (seconds, sid))  # fmt: skip


def _fires(conn: psycopg.Connection, sid: str) -> list[dict]:
    return conn.execute("select source, tick, outcome, workflow_id, reason from "
                        "ilr.schedule_fires where schedule_id = %s order by tick", (sid,)).fetchall()  # fmt: skip


def test_each_overlap_policy_decides_the_ticks_it_finds_due(dsn: str, conn) -> None:
    with Runtime(dsn) as rt:
        for policy in ("skip", "buffer_one", "allow_all"):
            rt.create_schedule(policy, flows.scheduled, every=1, overlap=policy)
            _back(conn, policy, 3)
        result = fire_due(conn)
        assert (result.schedules, result.conflicts, result.broken) == (3, 0, {})
        outcomes = {p: [f["outcome"] for f in _fires(conn, p)][:4]
                    for p in ("skip", "buffer_one", "allow_all")}  # fmt: skip
        assert outcomes == {"skip": ["started", "skipped", "skipped", "skipped"],
                            "buffer_one": ["started", "buffered", "skipped", "skipped"],
                            "allow_all": ["started"] * 4}  # fmt: skip
        started = Counter(
            r["id"].split("@")[0] for r in conn.execute("select id from ilr.workflows")
        )
        # a second may begin between _back and the pass on a busy machine: one tick more, due
        # too; skip and buffer_one skip it, allow_all starts it
        allow_all = _fires(conn, "allow_all")
        assert len(allow_all) in (4, 5) and {f["outcome"] for f in allow_all} == {"started"}
        assert started == {"skip": 1, "buffer_one": 1, "allow_all": len(allow_all)}
        # the buffered tick starts once the run it waited for has ended, and not before
        buffered = _fires(conn, "buffer_one")[1]
        fire_due(conn)
        assert _fires(conn, "buffer_one")[1]["outcome"] == "buffered"
        first = _fires(conn, "buffer_one")[0]["workflow_id"]
        conn.execute("update ilr.workflows set status = 'completed' where id = %s", (first,))
        fire_due(conn)
        now = _fires(conn, "buffer_one")[1]
        assert now["outcome"] == "started"
        assert now["workflow_id"] == workflow_id("buffer_one", buffered["tick"])
        assert rt.describe_schedule("buffer_one")["buffered_tick"] is None
        # a run that continued as new lives on in its successor: skip still skips
        run = _fires(conn, "skip")[0]["workflow_id"]
        conn.execute("update ilr.workflows set status = 'continued' where id = %s", (run,))
        conn.execute("insert into ilr.workflows (id, name, version, input, continued_from) "
                     "values ('successor', 'scheduled', '1', '{}', %s)", (run,))  # fmt: skip
        assert schedules.previous_live(conn, run)
        conn.execute("update ilr.workflows set status = 'completed' where id = 'successor'")
        assert not schedules.previous_live(conn, run)


def test_a_run_gets_the_tick_it_was_scheduled_for_and_the_schedule_input(dsn, conn) -> None:
    with Runtime(dsn) as rt:
        rt.create_schedule("s", flows.scheduled, every=1, input={"hold": 0, "k": [1, 2]})
        _back(conn, "s", 0)
        fire_due(conn)
        (fire,) = _fires(conn, "s")
        row = rt.describe(fire["workflow_id"])
    assert row["input"]["input"] == {"hold": 0, "k": [1, 2]}
    assert row["input"]["schedule_id"] == "s" and row["input"]["source"] == "schedule"
    assert datetime.fromisoformat(row["input"]["scheduled_at"]) == fire["tick"]
    assert datetime.fromisoformat(row["input"]["started_at"]) >= fire["tick"]


def test_catch_up_after_downtime_is_bounded_by_the_window(dsn: str, conn) -> None:
    with Runtime(dsn) as rt:
        rt.create_schedule("every", flows.scheduled, every=1, overlap="allow_all",
                           catchup_window=10)  # fmt: skip
        rt.create_schedule("cron", flows.scheduled, cron="* * * * *", overlap="allow_all")
        _back(conn, "every", 3600)  # an hour of downtime
        conn.execute("update ilr.schedules set next_fire_at = date_trunc('minute', now()) "
                     "- interval '3 days' where id = 'cron'")  # fmt: skip
        # read before the pass: a later now() may already be past the next tick the pass set
        now = conn.execute("select now()").fetchone()["now"]
        fire_due(conn)
        every, cron = rt.describe_schedule("every"), rt.describe_schedule("cron")
    ticks = [f["tick"] for f in _fires(conn, "every")]
    assert 10 <= len(ticks) <= 12 and min(ticks) >= now - timedelta(seconds=11)
    assert every["missed_ticks"] + len(ticks) in (3601, 3602)  # a second may begin meanwhile
    assert len(_fires(conn, "cron")) <= 2 and 3 * 1440 - 2 <= cron["missed_ticks"] <= 3 * 1440
    assert every["next_fire_at"] > now and cron["next_fire_at"] > now


def test_a_tick_is_recorded_once_by_the_database_itself(dsn: str, conn) -> None:
    with Runtime(dsn) as rt:
        rt.create_schedule("s", flows.scheduled, every=1, overlap="allow_all")
    _back(conn, "s", 1)
    assert fire_due(conn).started == 2
    # a pass that judged from a stale next_fire_at (as one without the row lock would) starts
    # nothing: the fire's primary key refuses the tick, and the derived id would too
    _back(conn, "s", 1)
    again = fire_due(conn)  # (a new second may have begun: its tick is a new start)
    assert again.conflicts == 2 and again.started <= 1
    count = conn.execute("select count(*) from ilr.workflows").fetchone()["count"]
    assert count == 2 + again.started
    tick = _fires(conn, "s")[0]["tick"]
    with pytest.raises(psycopg.errors.UniqueViolation):
        conn.execute("insert into ilr.schedule_fires (schedule_id, source, tick, outcome) "
                     "values ('s', 'schedule', %s, 'started')", (tick,))  # fmt: skip


def test_create_is_idempotent_and_the_api_refuses_what_it_cannot_keep(dsn: str) -> None:
    with Runtime(dsn) as rt:
        args = {"cron": "0 9 * * MON-FRI", "input": {"a": 1.5, "b": [1]}, "time_zone": "UTC"}
        assert rt.create_schedule("daily", flows.scheduled, **args) == "daily"
        assert rt.create_schedule("daily", "scheduled", **args) == "daily"  # the same: no-op
        with pytest.raises(ScheduleConflict, match="delete it first"):
            rt.create_schedule("daily", "scheduled", cron="0 10 * * *")
        with pytest.raises(ScheduleNotFound, match="schedule list"):
            rt.pause_schedule("nobody")
        for bad, says in [({"overlap": "buffer_all"}, "overlap"), ({"catchup_window": 0}, "at least 1"),
                          ({"catchup_window": float("inf")}, "finite"), ({"input": {"x": float("nan")}}, "NaN"),
                          ({"note": "x\x00"}, "NUL"), ({"version": "9"}, "no deployment serves")]:  # fmt: skip
            with pytest.raises((InvalidInput, LookupError), match=says):
                rt.create_schedule("other", "scheduled", every=5, **bad)
        assert [s["id"] for s in rt.schedules()] == ["daily"]
        assert rt.trigger_schedule("daily")["outcome"] == "started"
        skipped = rt.trigger_schedule("daily")
        assert skipped["outcome"] == "skipped" and "allow_all" in skipped["reason"]
        assert rt.trigger_schedule("daily", overlap="allow_all")["outcome"] == "started"
        rt.delete_schedule("daily")
        assert rt.schedules() == [] and len(rt.list(name="scheduled")) == 2  # runs are kept


# -- real workers --------------------------------------------------------------------------------


def _started_per_tick(conn: psycopg.Connection) -> Counter[str]:
    """Ground truth: scheduled workflows counted by the tick their input names."""
    rows = conn.execute("select input->>'schedule_id' as s, input->>'scheduled_at' as t "
                        "from ilr.workflows where input ? 'scheduled_at'").fetchall()  # fmt: skip
    return Counter(f"{r['s']}|{r['t']}" for r in rows)


def _contiguous(conn: psycopg.Connection, sid: str) -> list[datetime]:
    """The ticks decided for a schedule, which must be every second from the first to the last."""
    ticks = [f["tick"] for f in _fires(conn, sid) if f["source"] == "schedule"]
    assert ticks, f"no tick of {sid} was decided"
    assert all(b - a == timedelta(seconds=1) for a, b in zip(ticks, ticks[1:], strict=False)), ticks
    return ticks


def test_many_workers_racing_the_same_ticks_start_each_once(dsn: str, conn, workers) -> None:
    with Runtime(dsn) as rt:
        for i in range(8):
            rt.create_schedule(f"race{i}", flows.scheduled, every=1, overlap="allow_all")
            _back(conn, f"race{i}", 2)  # a backlog every worker sees at once, then new ticks
    ws = [workers(f"w{i}", concurrency=4, poll=0.2) for i in range(5)]
    wait_for(lambda: all(w.events() and any(e["event"] == "registered" for e in w.events())
                         for w in ws), 40, "five workers to register")  # fmt: skip
    first = conn.execute("select max(tick) as t from ilr.schedule_fires").fetchone()["t"]
    wait_for(lambda: conn.execute("select min(last_tick) > %s + interval '3 seconds' as ok from "
                                  "ilr.schedules", (first,)).fetchone()["ok"], 30,
             "every schedule to tick three more times with all five workers up")  # fmt: skip
    for w in ws:
        w.signal(signal.SIGTERM)
    for w in ws:
        w.proc.wait(timeout=20)
    per_tick = _started_per_tick(conn)
    assert per_tick and max(per_tick.values()) == 1, per_tick.most_common(3)
    fires = conn.execute("select schedule_id, tick, count(*) as n from ilr.schedule_fires "
                         "group by schedule_id, tick having count(*) > 1").fetchall()  # fmt: skip
    assert fires == []
    for i in range(8):
        ticks = _contiguous(conn, f"race{i}")
        assert len(ticks) >= 6 and sum(k.startswith(f"race{i}|") for k in per_tick) == len(ticks)
    passes = [e for w in ws for e in w.events() if e["event"] == "schedule_pass"]
    assert sum(e["conflicts"] for e in passes) == 0  # the row lock kept them apart
    assert len({e["worker"] for e in passes if e["started"]}) >= 2  # they did race


def test_a_worker_killed_mid_pass_loses_no_tick_and_doubles_none(dsn: str, conn, workers) -> None:
    with Runtime(dsn) as rt:
        rt.create_schedule("k", flows.scheduled, every=1, overlap="allow_all")
        _back(conn, "k", 1)
        due = rt.describe_schedule("k")["next_fire_at"]
    doomed = workers("doomed", env={"ILR_KILL_AT": "schedule_before_commit"})
    assert doomed.proc.wait(timeout=30) == -signal.SIGKILL
    # its pass had inserted the fires and the runs; none of it committed
    assert _fires(conn, "k") == [] and _started_per_tick(conn) == Counter()
    assert conn.execute("select next_fire_at from ilr.schedules").fetchone()["next_fire_at"] == due
    heir = workers("heir", poll=0.2)
    wait_for(lambda: len(_fires(conn, "k")) >= 5, 30, "five ticks after the kill")

    def completed() -> int:
        sql = "select count(*) from ilr.workflows where status = 'completed'"
        return int(conn.execute(sql).fetchone()["count"])

    # and the runs it started ran (waited for: on a busy machine they trail the fires)
    wait_for(lambda: completed() >= 3, 30, "the heir to run what it started")
    heir.signal(signal.SIGTERM)
    heir.proc.wait(timeout=20)
    ticks = _contiguous(conn, "k")
    assert ticks[0] == due  # the tick the killed pass held was fired, by the heir, once
    per_tick = _started_per_tick(conn)
    assert len(per_tick) == len(ticks) and set(per_tick.values()) == {1}


class Ran:
    def __init__(self, returncode: int, stdout: str, stderr: str) -> None:
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def test_pause_and_resume_from_the_cli(dsn: str, conn, workers, capsys) -> None:
    def _cli(dsn: str, *args: str) -> Ran:
        status = cli.main(["schedule", *args, "--dsn", dsn])
        return Ran(status, *capsys.readouterr())

    with Runtime(dsn) as rt:
        rt.register(flows.scheduled)
    proc = subprocess.run([sys.executable, "-m", "interlock_runtime.cli", "schedule", "list",
                           "--dsn", dsn], capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 0 and "(none: create one" in proc.stdout  # the installed command
    made = _cli(dsn, "create", "tick", "scheduled", "--every", "1", "--overlap", "allow_all",
                "--input", '{"hold": 0}')  # fmt: skip
    assert made.returncode == 0 and "every 1s, overlap allow_all; next tick" in made.stdout
    workers("w1", poll=0.2)
    wait_for(lambda: len(_fires(conn, "tick")) >= 2, 30, "two fires")
    paused = _cli(dsn, "pause", "tick", "--by", "ann", "--note", "maintenance window")
    assert paused.returncode == 0 and "paused" in paused.stdout
    at_pause = conn.execute("select now()").fetchone()["now"]
    count = len(_fires(conn, "tick"))
    time.sleep(1.6)
    assert len(_fires(conn, "tick")) == count  # nothing fired while paused
    listed = _cli(dsn, "list")
    assert "tick" in listed.stdout and "yes" in listed.stdout, listed.stdout
    described = json.loads(_cli(dsn, "describe", "tick", "--json").stdout)
    assert described["paused"] and described["paused_by"] == "ann"
    assert described["note"] == "maintenance window"
    at_resume = conn.execute("select now()").fetchone()["now"]
    resumed = _cli(dsn, "resume", "tick")
    assert resumed.returncode == 0 and "next tick" in resumed.stdout
    wait_for(lambda: len(_fires(conn, "tick")) >= count + 2, 30, "fires after the resume")
    after = [f["tick"] for f in _fires(conn, "tick")][count:]
    assert min(after) > at_resume > at_pause + timedelta(seconds=1.5)  # none made up
    trig = _cli(dsn, "trigger", "tick")
    assert trig.returncode == 0 and "started tick@trigger-" in trig.stdout
    text = _cli(dsn, "describe", "tick")
    assert "upcoming" in text.stdout and "trigger" in text.stdout
    assert _cli(dsn, "delete", "tick").returncode == 0
    gone = _cli(dsn, "pause", "tick")
    assert gone.returncode == 1 and "no schedule with id 'tick'" in gone.stderr


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["create", "s", "scheduled", "--cron", "61 * * * *"], "minute 61 is out of range"),
        (["create", "s", "scheduled", "--cron", "* * * * *\x01"], "control or non-ASCII"),
        (["create", "s", "scheduled", "--every", "0"], "--every must be at least 1"),
        (["create", "s", "scheduled", "--every", "1.5"], "whole number of seconds"),
        (["create", "s", "scheduled", "--every", "5x"], "is not a duration"),
        (["create", "s", "scheduled", "--every", "nan"], "is not a duration"),
        (["create", "s", "scheduled"], "one of the arguments --cron --every is required"),
        (["create", "s", "scheduled", "--every", "5", "--cron", "* * * * *"], "not allowed"),
        (["create", "s", "scheduled", "--every", "5", "--input", "{"], "--input is not JSON"),
        (["create", "s", "scheduled", "--every", "5", "--overlap", "all"], "invalid choice"),
        (["create", "s", "scheduled", "--cron", "@daily", "--time-zone", "Nowhere/X"], "not known"),
        (["create", "bad id", "scheduled", "--every", "5"], "schedule id"),
        (["create", "s", "scheduled", "--every", "5", "--catchup-window", "-1"], "not a duration"),
        (["pause", "s\x00"], "schedule id"),
        (["describe", "s", "--fires", "-1"], "--fires"),
        (["trigger", "s", "--overlap", "buffer_one"], "invalid choice"),
        (["launch", "s"], "invalid choice"),
    ],
)
def test_the_cli_refuses_bad_input_with_one_line_and_exit_2(args, says, capsys) -> None:
    # a database that is down: each is refused before anything connects
    status = cli.main(["schedule", *args, "--dsn", "postgresql://nobody@127.0.0.1:1/nothing"])
    err = capsys.readouterr().err
    assert status == 2, err
    assert says in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_the_cli_explains_a_database_that_is_down(capsys) -> None:
    for args in (["list"], ["pause", "s"], ["create", "s", "w", "--every", "5"]):
        status = cli.main(["schedule", *args, "--dsn", "postgresql://nobody@127.0.0.1:1/nothing"])
        err = capsys.readouterr().err
        assert status == 2 and "cannot reach Postgres at 127.0.0.1:1/nothing" in err, err
        assert len(err.strip().splitlines()) == 1


def test_a_worker_role_fires_schedules_but_cannot_make_or_pause_one(dsn, conn) -> None:
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    from interlock_runtime import db

    db.apply_roles(conn, {"ilr_t_sched_worker": "worker", "ilr_t_sched_operator": "operator"})
    as_user = {u: make_conninfo(**{**conninfo_to_dict(dsn), "user": f"ilr_t_sched_{u}"})
               for u in ("worker", "operator")}  # fmt: skip
    with Runtime(dsn) as rt:
        rt.register(flows.scheduled)
    with Runtime(as_user["operator"]) as rt:
        rt.create_schedule("s", "scheduled", every=1, overlap="allow_all")
        rt.pause_schedule("s")
        rt.resume_schedule("s")
    _back(conn, "s", 1)
    with db.connect(as_user["worker"]) as worker:
        assert fire_due(worker).started == 2
        for statement in ("update ilr.schedules set paused = true",
                          "delete from ilr.schedules",
                          "insert into ilr.schedules (id, workflow_name, input, every_seconds, "
                          "next_fire_at) values ('x', 'scheduled', '{}', 1, now())"):  # fmt: skip
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                worker.execute(statement)
