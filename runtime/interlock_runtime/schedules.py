"""Durable schedules (docs/schedules.md): cron and interval specs, and the firing pass.

A schedule row says which workflow to start, with which input, on which ticks (five-field cron
in a time zone, or every N seconds), what to do while its previous run is still live (skip,
buffer one, allow all), and how far back to catch up after downtime. Workers run `fire_due`
in their loop: one transaction locks the due schedules (FOR UPDATE SKIP LOCKED), judges every
tick against the database clock, records each decided tick in ilr.schedule_fires and inserts
the workflows. Three things keep a tick to one start, each enough on its own: the row lock,
the fire's primary key (schedule, source, tick), and the workflow id derived from the tick.
A worker killed mid-pass leaves nothing behind (its transaction never committed), so the next
pass decides the same ticks again.

The client side (create, pause, resume, delete, trigger, describe) is here too, as functions
over a connection inside the caller's transaction; runtime.Runtime exposes them.
"""

from __future__ import annotations

import calendar
import re
import time
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import psycopg

from . import db, killpoints, validate
from .errors import InvalidInput, ScheduleConflict, ScheduleNotFound
from .events import emit
from .vocabulary import LIVE_STATUSES, FireOutcome, FireSource, ScheduleOverlap

UTC = timezone.utc
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

MAX_SCHEDULE_ID_CHARS = 160
"""Schedule ids are workflow ids minus room for the tick they are suffixed with (at most 200)."""
MAX_CRON_CHARS = 200
MAX_TICKS_PER_PASS = 100
"""Ticks one pass decides for one schedule; a longer backlog is taken by the next passes."""
MAX_SCHEDULES_PER_PASS = 16
"""Schedules one pass locks; other workers take the rest (SKIP LOCKED)."""
MAX_MISSED_COUNTED = 10_000
"""Cron ticks counted one by one when a backlog is dropped; beyond, missed_ticks is a floor."""
DEFAULT_CATCHUP_WINDOW = 60.0
MIN_CATCHUP_WINDOW = 1.0


# -- cron -------------------------------------------------------------------------------------

_MONTHS = {m: i for i, m in enumerate(
    ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"), 1)}  # fmt: skip
_DAYS = {d: i for i, d in enumerate(("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"))}
_MACROS = {
    "@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}  # fmt: skip
# (name, low, high, names): the five fields in order
_FIELDS: tuple[tuple[str, int, int, dict[str, int]], ...] = (
    ("minute", 0, 59, {}),
    ("hour", 0, 23, {}),
    ("day of month", 1, 31, {}),
    ("month", 1, 12, _MONTHS),
    ("day of week", 0, 7, _DAYS),  # 0 and 7 are both Sunday
)
_ATOM = re.compile(r"^(\*|[0-9A-Za-z]+(?:-[0-9A-Za-z]+)?)(?:/([0-9]+))?$")
_CRON_HELP = ("write five fields 'minute hour day-of-month month day-of-week', e.g. '*/15 * * * *' "
              "or '0 9 * * MON-FRI', or a macro such as @hourly or @daily")  # fmt: skip


def _bad(text: str, why: str) -> InvalidInput:
    return InvalidInput(f"cron {validate.shown(text)} is not valid: {why}; {_CRON_HELP}")


def _value(text: str, token: str, field: str, low: int, high: int, names: dict[str, int]) -> int:
    if token.upper() in names:
        return names[token.upper()]
    if not token.isdigit() or not token.isascii():
        raise _bad(text, f"{field} {token!r} is not a number"
                   + (f" or a name ({', '.join(names)})" if names else ""))  # fmt: skip
    n = int(token[:6])  # six digits are enough to be out of range; int() of a huge one is slow
    if not low <= n <= high:
        raise _bad(text, f"{field} {token} is out of range {low}-{high}")
    return n


def _field(text: str, part: str, index: int) -> tuple[frozenset[int], bool]:
    """The values one field allows, and whether it starts with '*' (the day rule needs it)."""
    field, low, high, names = _FIELDS[index]
    allowed: set[int] = set()
    for item in part.split(","):
        m = _ATOM.match(item)
        if not m:
            raise _bad(text, f"{field} {item!r} is not a value, range (a-b), list (a,b) or "
                       "step (*/n, a-b/n)")  # fmt: skip
        base, step_text = m.group(1), m.group(2)
        step = 1
        if step_text is not None:
            step = int(step_text[:6])
            if not 1 <= step <= high - low + 1:
                raise _bad(text, f"{field} step /{step_text} must be 1-{high - low + 1}")
        if base == "*":
            first, last = low, high
        elif "-" in base:
            a, b = base.split("-")
            first = _value(text, a, field, low, high, names)
            last = _value(text, b, field, low, high, names)
            if last < first:
                raise _bad(text, f"{field} range {base} runs backwards; write it low-high")
        else:
            first = _value(text, base, field, low, high, names)
            last = high if step_text is not None else first  # 'a/n': from a to the end
        allowed.update(range(first, last + 1, step))
    if index == 4 and 7 in allowed:  # Sunday is 0
        allowed = (allowed - {7}) | {0}
    return frozenset(allowed), part.startswith("*")


@dataclass(frozen=True)
class Cron:
    """A parsed five-field cron expression (Vixie cron's rules).

    When both day of month and day of week are restricted (neither starts with '*'), a day
    matches if either does, as cron has always done; otherwise both must."""

    text: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday
    dom_star: bool
    dow_star: bool

    def _day_ok(self, d: date) -> bool:
        dom = d.day in self.days
        dow = (d.weekday() + 1) % 7 in self.weekdays
        if self.dom_star or self.dow_star:
            return dom and dow
        return dom or dow

    def next_local(self, start: datetime) -> datetime | None:
        """The first naive wall-clock minute >= start that matches; None within ten years."""
        t = start.replace(second=0, microsecond=0)
        if t < start:
            t += timedelta(minutes=1)
        limit = t.year + 10
        while t.year <= limit:
            if t.month not in self.months:
                y, m = (t.year + 1, 1) if t.month == 12 else (t.year, t.month + 1)
                t = datetime(y, m, 1)
                continue
            if not self._day_ok(t.date()):
                t = datetime(t.year, t.month, t.day) + timedelta(days=1)
                continue
            if t.hour not in self.hours:
                hour = min((h for h in self.hours if h > t.hour), default=None)
                t = (t.replace(hour=hour, minute=0) if hour is not None
                     else datetime(t.year, t.month, t.day) + timedelta(days=1))  # fmt: skip
                continue
            if t.minute not in self.minutes:
                minute = min((m for m in self.minutes if m > t.minute), default=None)
                t = (t.replace(minute=minute) if minute is not None
                     else t.replace(minute=0) + timedelta(hours=1))  # fmt: skip
                continue
            return t
        return None


def parse_cron(text: Any) -> Cron:
    """A cron expression, or InvalidInput saying what is wrong and how to write one."""
    if not isinstance(text, str):
        raise InvalidInput(f"cron must be a string, not {type(text).__name__}; {_CRON_HELP}")
    if len(text) > MAX_CRON_CHARS:
        raise InvalidInput(f"cron is {len(text)} characters long; the limit is {MAX_CRON_CHARS}")
    if not text.isascii() or any(not c.isprintable() for c in text):
        raise _bad(text, "it holds a control or non-ASCII character (NUL, a newline, ...)")
    expanded = _MACROS.get(text.strip().lower(), text) if text.strip().startswith("@") else text
    if expanded.strip().startswith("@"):
        raise _bad(text, f"unknown macro; known: {', '.join(_MACROS)}")
    parts = expanded.split()
    if len(parts) != 5:
        raise _bad(text, f"it has {len(parts)} fields, not 5 (seconds and years are not "
                   "supported)")  # fmt: skip
    fields = [_field(text, part, i) for i, part in enumerate(parts)]
    cron = Cron(" ".join(parts) if not text.strip().startswith("@") else text.strip().lower(),
                fields[0][0], fields[1][0], fields[2][0], fields[3][0], fields[4][0],
                fields[2][1], fields[4][1])  # fmt: skip
    if cron.dow_star and not any(min(cron.days) <= _longest(m) for m in cron.months):
        raise _bad(text, "no month it names has that day, so it would never fire")
    return cron


def _longest(month: int) -> int:
    return 29 if month == 2 else calendar.monthrange(2001, month)[1]


# -- specs ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Spec:
    """When a schedule ticks: cron (in a time zone) or every N seconds (+ offset), aligned to
    the Unix epoch, so an interval's ticks do not depend on when it was created."""

    cron: Cron | None = None
    every: int | None = None
    offset: int = 0
    zone: str = "UTC"

    def describe(self) -> str:
        if self.cron is not None:
            return f"cron '{self.cron.text}' ({self.zone})"
        return f"every {self.every}s" + (f" (offset {self.offset}s)" if self.offset else "")

    def next_after(self, after: datetime) -> datetime:
        """The first tick strictly after `after` (aware), in UTC."""
        if self.every is not None:
            step, base = self.every * 1_000_000, self.offset * 1_000_000
            since = (after - EPOCH) // timedelta(microseconds=1)
            k = (since - base) // step + 1
            return EPOCH + timedelta(microseconds=base + k * step)
        assert self.cron is not None
        zone = _zone(self.zone)
        local = after.astimezone(zone).replace(tzinfo=None)
        start = local.replace(second=0, microsecond=0) + timedelta(minutes=1)
        for _ in range(100_000):
            candidate = self.cron.next_local(start)
            if candidate is None:
                break
            tick = _instant(candidate, zone)
            # a wall time the clocks skip (spring forward) does not fire; one that occurs twice
            # (fall back) fires once, at its first occurrence
            if tick is not None and tick > after:
                return tick
            start = candidate + timedelta(minutes=1)
        raise InvalidInput(f"cron '{self.cron.text}' has no tick in the next ten years")

    def ticks(self, after: datetime, n: int) -> list[datetime]:
        out: list[datetime] = []
        for _ in range(n):
            after = self.next_after(after)
            out.append(after)
        return out

    def first_at_or_after(self, t: datetime, cutoff: datetime) -> tuple[datetime, int]:
        """From tick t, the first tick >= cutoff and how many ticks lie before it (dropped)."""
        if t >= cutoff:
            return t, 0
        if self.every is not None:
            nxt = self.next_after(cutoff - timedelta(microseconds=1))
            return nxt, (nxt - t) // timedelta(seconds=self.every)
        dropped = 0
        while t < cutoff and dropped < MAX_MISSED_COUNTED:
            t, dropped = self.next_after(t), dropped + 1
        if t < cutoff:
            t = self.next_after(cutoff - timedelta(microseconds=1))
        return t, dropped


def _zone(name: str) -> ZoneInfo | timezone:
    if name == "UTC":
        return UTC
    return ZoneInfo(name)


def _instant(naive: datetime, zone: ZoneInfo | timezone) -> datetime | None:
    """The UTC instant of a wall-clock time in a zone (its first occurrence), or None when the
    zone skips that wall time."""
    aware = naive.replace(tzinfo=zone, fold=0)
    utc = aware.astimezone(UTC)
    if utc.astimezone(zone).replace(tzinfo=None) != naive:
        return None
    return utc


def check_zone(value: Any) -> str:
    name = validate.name(value, "time zone", max_chars=64)
    if name == "UTC":
        return name
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise InvalidInput(f"time zone {validate.shown(name)} is not known; give an IANA name "
                           "such as 'UTC', 'Europe/Paris' or 'America/New_York'") from None  # fmt: skip
    return name


def spec_of(row: db.Row) -> Spec:
    """The spec a stored schedule row describes."""
    if row["cron"] is not None:
        return Spec(cron=parse_cron(row["cron"]), zone=row["time_zone"])
    return Spec(every=int(row["every_seconds"]), offset=int(row["offset_seconds"]))


def make_spec(cron: Any = None, every: Any = None, offset: Any = 0,
              time_zone: Any = "UTC") -> Spec:  # fmt: skip
    """A spec from the caller's arguments, each checked: exactly one of cron and every."""
    if (cron is None) == (every is None):
        raise InvalidInput("give exactly one of cron (e.g. '*/5 * * * *') and every (a whole "
                           "number of seconds, at least 1)")  # fmt: skip
    zone = check_zone(time_zone)
    if cron is not None:
        if offset not in (0, None):
            raise InvalidInput("offset applies to every=...; a cron expression sets its own "
                               "minutes")  # fmt: skip
        return Spec(cron=parse_cron(cron), zone=zone)
    if zone != "UTC":
        raise InvalidInput("time_zone applies to cron; an interval is a fixed number of seconds "
                           "(leave time_zone as UTC)")  # fmt: skip
    secs = validate.count(every, "every", high=int(validate.MAX_SECONDS))
    off = validate.count(offset or 0, "offset", low=0, high=secs - 1)
    return Spec(every=secs, offset=off)


# -- workflow ids and inputs -------------------------------------------------------------------


def check_id(value: Any) -> str:
    sid = validate.identifier(value, "schedule id")
    if len(sid) > MAX_SCHEDULE_ID_CHARS:
        raise InvalidInput(f"schedule id is {len(sid)} characters long; the limit is "
                           f"{MAX_SCHEDULE_ID_CHARS} (its runs' ids add the tick to it)")  # fmt: skip
    return sid


def _stamp(t: datetime) -> str:
    t = t.astimezone(UTC)
    return (
        t.strftime("%Y-%m-%dT%H:%M:%S") + (f".{t.microsecond:06d}" if t.microsecond else "") + "Z"
    )


def workflow_id(schedule_id: str, tick: datetime, source: str = FireSource.SCHEDULE) -> str:
    """The id of the run a tick starts: the same tick always names the same workflow, so a
    start can never happen twice (`nightly@2026-01-01T00:00:00Z`; a trigger's has `trigger-`)."""
    mark = "trigger-" if source == FireSource.TRIGGER else ""
    return f"{schedule_id}@{mark}{_stamp(tick)}"


def envelope(row: db.Row, tick: datetime, now: datetime, source: str) -> dict[str, Any]:
    """What a scheduled run receives: the schedule's input and when it was due and started."""
    return {"schedule_id": row["id"], "scheduled_at": tick.astimezone(UTC).isoformat(),
            "started_at": now.astimezone(UTC).isoformat(), "source": str(source),
            "input": row["input"]}  # fmt: skip


# -- firing ------------------------------------------------------------------------------------


CONFLICT = "conflict"  # not an outcome: the tick was already recorded, by another pass


@dataclass
class PassResult:
    """What one firing pass did (emitted by the worker as schedule_pass)."""

    schedules: int = 0
    started: int = 0
    skipped: int = 0
    buffered: int = 0
    failed: int = 0
    missed: int = 0
    conflicts: int = 0  # a tick another pass had already decided: must stay 0 (the lock holds)
    next_in: float | None = None  # seconds until the next tick of any schedule
    broken: dict[str, str] = field(default_factory=dict)  # schedule id: why it could not fire

    def count(self, outcome: str) -> None:
        name = "conflicts" if outcome == CONFLICT else str(outcome)
        setattr(self, name, getattr(self, name) + 1)


def previous_live(conn: db.Conn, wf: str | None) -> bool:
    if wf is None:
        return False
    params = {"wf": wf, "live": [str(s) for s in LIVE_STATUSES]}
    return bool(db.one(conn.execute(db.query("schedule_previous_live"), params))["live"])


def _version(conn: db.Conn, row: db.Row) -> str | None:
    name, pinned = row["workflow_name"], row["workflow_version"]
    if pinned is not None:
        found = conn.execute(db.query("get_deployment"), {"name": name, "version": pinned})
        return pinned if found.fetchone() else None
    newest = conn.execute(db.query("newest_version"), {"name": name}).fetchone()
    return None if newest is None else str(newest["version"])


def _start(conn: db.Conn, row: db.Row, tick: datetime, source: str,
           buffered: bool = False) -> tuple[str, str | None, str | None]:  # fmt: skip
    """Record the tick as started and insert its run: (outcome, workflow id, reason). The fire
    record comes first: when another pass has recorded this tick, nothing is started."""
    now = row["now"]
    version = _version(conn, row)
    wf: str | None = workflow_id(row["id"], tick, source)
    outcome, reason = FireOutcome.STARTED, None
    if version is None:
        wanted = row["workflow_name"] + (f"@{row['workflow_version']}"
                                         if row["workflow_version"] else "")  # fmt: skip
        outcome, wf = FireOutcome.FAILED, None
        reason = f"no deployment serves {wanted}: start a worker that serves it"
    params = {"id": row["id"], "source": source, "tick": tick, "outcome": outcome, "wf": wf,
              "reason": reason}  # fmt: skip
    recorded = conn.execute(db.query("schedule_fire_started" if buffered
                                     else "schedule_record_fire"), params).fetchone()  # fmt: skip
    if recorded is None:
        return CONFLICT, None, None
    if wf is None:
        return outcome, None, reason
    inserted = conn.execute(db.query("schedule_insert_workflow"), {
        "wf": wf, "name": row["workflow_name"], "version": version,
        "input": db.jsonb(envelope(row, tick, now, source))}).fetchone()  # fmt: skip
    if inserted is None:
        reason = (f"a workflow with id {wf!r} already exists (started by hand, or by an "
                  "earlier schedule with this id)")  # fmt: skip
        conn.execute(db.query("schedule_fire_failed"),
                     {**params, "outcome": FireOutcome.FAILED, "wf": None, "reason": reason})  # fmt: skip
        return FireOutcome.FAILED, None, reason
    conn.execute(db.query("notify_ready"), {"id": wf})
    return outcome, wf, None


def _fire_one(conn: db.Conn, row: db.Row, result: PassResult) -> None:
    """Decide every due tick of one locked schedule, in order, and move it on."""
    spec = spec_of(row)
    now: datetime = row["now"]
    last_wf: str | None = row["last_workflow_id"]
    buffered: datetime | None = row["buffered_tick"]
    live: bool | None = None  # whether last_wf is live; read once, then kept up to date
    last_tick = None
    # A buffered tick goes first: it waited for the run that was live when it came due.
    if buffered is not None:
        live = previous_live(conn, last_wf)
        if not live:
            outcome, wf, _ = _start(conn, row, buffered, FireSource.SCHEDULE, buffered=True)
            result.count(outcome)
            if wf is not None:
                last_wf, live = wf, True
            buffered = None
    t: datetime = row["next_fire_at"]
    t, missed = spec.first_at_or_after(t, now - timedelta(seconds=row["catchup_seconds"]))
    result.missed += missed
    decided = 0
    while t <= now and decided < MAX_TICKS_PER_PASS:
        policy = row["overlap"]
        if policy != ScheduleOverlap.ALLOW_ALL and live is None:
            live = previous_live(conn, last_wf)
        if policy == ScheduleOverlap.ALLOW_ALL or not live:
            outcome, wf, _ = _start(conn, row, t, FireSource.SCHEDULE)
            if wf is not None:
                last_wf, live = wf, True
        elif policy == ScheduleOverlap.BUFFER_ONE and buffered is None:
            outcome = _record(conn, row, t, FireOutcome.BUFFERED,
                              f"waits for {last_wf}, which is still live")  # fmt: skip
            if outcome == FireOutcome.BUFFERED:
                buffered = t
        else:
            why = (f"the previous run {last_wf} is still live" if buffered is None else
                   f"the previous run {last_wf} is still live and tick {_stamp(buffered)} "
                   "already waits for it")  # fmt: skip
            outcome = _record(conn, row, t, FireOutcome.SKIPPED, why)
        result.count(outcome)
        last_tick, t, decided = t, spec.next_after(t), decided + 1
    conn.execute(db.query("schedule_advance"), {
        "id": row["id"], "next_fire_at": t, "last_tick": last_tick, "last_wf": last_wf,
        "buffered": buffered, "missed": missed})  # fmt: skip


def _record(conn: db.Conn, row: db.Row, tick: datetime, outcome: str, reason: str) -> str:
    params = {"id": row["id"], "source": FireSource.SCHEDULE, "tick": tick, "outcome": outcome,
              "wf": None, "reason": reason}  # fmt: skip
    return (
        outcome if conn.execute(db.query("schedule_record_fire"), params).fetchone() else CONFLICT
    )


def fire_due(conn: db.Conn, limit: int = MAX_SCHEDULES_PER_PASS) -> PassResult:
    """One firing pass: every due schedule this worker can lock, in one transaction. A crash
    anywhere before the commit leaves no trace; the next pass (any worker's) decides again."""
    result = PassResult()
    with conn.transaction():
        rows = conn.execute(db.query("schedules_due"), {"limit": limit}).fetchall()
        for row in rows:
            try:
                with conn.transaction():  # a savepoint: one broken schedule stops no other
                    _fire_one(conn, row, result)
            except psycopg.OperationalError:
                raise
            except Exception as exc:  # a definition stored around the API, a missing zone
                result.broken[row["id"]] = f"{type(exc).__name__}: {exc}"
        result.schedules = len(rows)
        if rows:
            killpoints.hit("schedule_before_commit")
    nxt = db.one(conn.execute(db.query("schedules_next_fire")))["seconds"]
    result.next_in = None if nxt is None else float(nxt)
    return result


class Scheduler:
    """The firing side of a worker: passes at each due tick and at least every `poll` seconds
    (for schedules made or resumed since), on a connection of its own whose idle transactions
    the server aborts (a paused worker must not hold schedule rows locked)."""

    def __init__(self, dsn: str, worker_id: str, poll: float, options: str = ""):
        self.dsn, self.worker_id, self.poll, self.options = dsn, worker_id, poll, options
        self._conn: db.Conn | None = None
        self._next = 0.0  # monotonic time of the next pass

    def wait(self) -> float:
        """Seconds until the next pass is due (0: now)."""
        return max(0.0, self._next - time.monotonic())

    def run_if_due(self) -> PassResult | None:
        if time.monotonic() < self._next:
            return None
        try:
            if self._conn is None or self._conn.closed or self._conn.broken:
                self._conn = db.connect(self.dsn, options=self.options)
            result = fire_due(self._conn)
        except psycopg.Error as exc:  # down, or an unexpected refusal: try again after a poll
            emit("schedule_error", worker=self.worker_id, error=" ".join(str(exc).split()))
            if self._conn is not None and isinstance(exc, psycopg.OperationalError):
                self._conn.close()
            self._next = time.monotonic() + self.poll
            return None
        if result.schedules:
            emit("schedule_pass", worker=self.worker_id, **{k: v for k, v in vars(result).items()
                                                            if k != "next_in"})  # fmt: skip
        if result.next_in is None:
            wait = self.poll
        elif result.next_in > 0:
            wait = min(self.poll, result.next_in)
        else:  # due now: a backlog this pass left (again at once), or rows another pass holds
            wait = 0.0 if result.schedules else min(self.poll, 0.05)
        self._next = time.monotonic() + wait
        return result

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()


# -- the client side ---------------------------------------------------------------------------


def definition(row: db.Row) -> dict[str, Any]:
    """The fields a create compares to decide whether a second create is the same schedule."""
    keys = ("workflow_name", "workflow_version", "input", "cron", "every_seconds",
            "offset_seconds", "time_zone", "overlap", "catchup_seconds")  # fmt: skip
    return {k: row[k] for k in keys}


def create_in(conn: db.Conn, schedule_id: str, name: str, version: str | None, spec: Spec,
              input: Any, overlap: str, catchup_window: float, paused: bool,
              note: str | None, by: str | None) -> bool:  # fmt: skip
    """Insert a schedule in the caller's transaction; False when the id exists with the same
    definition, ScheduleConflict when it exists with another."""
    now = db.db_now(conn)
    params = {"id": schedule_id, "name": name, "version": version, "input": db.jsonb(input),
              "cron": spec.cron.text if spec.cron else None, "every": spec.every,
              "offset": spec.offset, "tz": spec.zone, "overlap": overlap,
              "catchup": catchup_window, "paused": paused, "by": by, "note": note,
              "next_fire_at": spec.next_after(now)}  # fmt: skip
    if conn.execute(db.query("schedule_insert"), params).fetchone():
        return True
    existing = db.one(conn.execute(db.query("schedule_get"), {"id": schedule_id}))
    wanted = {"workflow_name": name, "workflow_version": version,
              "input": db.as_stored(conn, input), "cron": params["cron"],
              "every_seconds": spec.every, "offset_seconds": spec.offset, "time_zone": spec.zone,
              "overlap": overlap, "catchup_seconds": float(catchup_window)}  # fmt: skip
    if definition(existing) == wanted:
        return False
    raise ScheduleConflict(f"schedule {schedule_id!r} already exists with another definition "
                           f"({_summary(existing)}); delete it first or choose another id")  # fmt: skip


def _summary(row: db.Row) -> str:
    return f"{row['workflow_name']} {spec_of(row).describe()}, overlap {row['overlap']}"


def lock(conn: db.Conn, schedule_id: str) -> db.Row:
    row = conn.execute(db.query("schedule_lock"), {"id": schedule_id}).fetchone()
    if row is None:
        raise ScheduleNotFound(f"no schedule with id {schedule_id!r}; `interlock schedule list` "
                               "shows them")  # fmt: skip
    return row


def pause_in(conn: db.Conn, schedule_id: str, by: str | None, note: str | None) -> None:
    lock(conn, schedule_id)
    conn.execute(db.query("schedule_pause"), {"id": schedule_id, "by": by, "note": note})


def resume_in(conn: db.Conn, schedule_id: str, note: str | None) -> datetime:
    """Unpause; the next fire is the first tick after now (ticks while paused are not made up)."""
    row = lock(conn, schedule_id)
    nxt: datetime = row["next_fire_at"]
    if row["paused"]:
        nxt = spec_of(row).next_after(row["now"])
    conn.execute(db.query("schedule_resume"), {"id": schedule_id, "next_fire_at": nxt,
                                               "note": note})  # fmt: skip
    return nxt


def delete_in(conn: db.Conn, schedule_id: str) -> None:
    lock(conn, schedule_id)
    conn.execute(db.query("schedule_delete"), {"id": schedule_id})


def trigger_in(conn: db.Conn, schedule_id: str, overlap: str | None) -> db.Row:
    """Start a run now, paused or not. overlap None: allow_all if the schedule allows all,
    else skip (a trigger never buffers). Returns the fire: outcome, workflow_id, reason."""
    row = lock(conn, schedule_id)
    if overlap is None:
        overlap = (ScheduleOverlap.ALLOW_ALL if row["overlap"] == ScheduleOverlap.ALLOW_ALL
                   else ScheduleOverlap.SKIP)  # fmt: skip
    tick = row["now"]
    if overlap != ScheduleOverlap.ALLOW_ALL and previous_live(conn, row["last_workflow_id"]):
        reason = (f"the previous run {row['last_workflow_id']} is still live; trigger with "
                  "overlap allow_all to start one anyway")  # fmt: skip
        _record_trigger(conn, schedule_id, tick, FireOutcome.SKIPPED, reason)
        return {"outcome": FireOutcome.SKIPPED.value, "workflow_id": None, "reason": reason,
                "tick": tick}  # fmt: skip
    outcome, wf, why = _start(conn, row, tick, FireSource.TRIGGER)
    if wf is not None:
        conn.execute(db.query("schedule_started_by_trigger"), {"id": schedule_id, "wf": wf})
    return {"outcome": str(outcome), "workflow_id": wf, "reason": why, "tick": tick}


def _record_trigger(conn: db.Conn, schedule_id: str, tick: datetime, outcome: str,
                    reason: str) -> None:  # fmt: skip
    conn.execute(db.query("schedule_record_fire"), {
        "id": schedule_id, "source": FireSource.TRIGGER, "tick": tick, "outcome": outcome,
        "wf": None, "reason": reason})  # fmt: skip


def shown(row: db.Row) -> db.Row:
    """A schedule row as the API returns it: its spec in words, the interval as seconds."""
    out = {k: v for k, v in row.items() if k not in ("catchup_window", "now")}
    out["spec"] = spec_of(row).describe()
    return out


def describe_in(conn: db.Conn, schedule_id: str, fires: int, upcoming: int) -> db.Row:
    row = conn.execute(db.query("schedule_get"), {"id": schedule_id}).fetchone()
    if row is None:
        raise ScheduleNotFound(f"no schedule with id {schedule_id!r}; `interlock schedule list` "
                               "shows them")  # fmt: skip
    out = shown(row)
    spec = spec_of(row)
    start = row["next_fire_at"] if not row["paused"] else spec.next_after(row["now"])
    out["upcoming"] = [] if upcoming == 0 else [start, *spec.ticks(start, upcoming - 1)]
    out["previous_live"] = previous_live(conn, row["last_workflow_id"])
    out["fires"] = conn.execute(db.query("schedule_fires"),
                                {"id": schedule_id, "limit": fires}).fetchall()  # fmt: skip
    return out
