"""Schedule administration, the client's part (schedules.py, docs/schedules.md): create,
list, describe, pause, resume, delete and trigger durable schedules."""

from __future__ import annotations

import json
from typing import Any

from .. import db, validate
from .. import schedules as sched
from ..errors import InvalidInput
from ..vocabulary import ScheduleOverlap
from .connection import MAX_LIST_LIMIT, input_text
from .deployments import Deployments


class ScheduleAdmin(Deployments):
    """Create and run durable schedules; a schedule's workflow must be deployed."""

    def create_schedule(self, schedule_id: str, workflow: Any, *, cron: str | None = None,
                        every: int | None = None, offset: int = 0, input: Any = None,
                        version: str | None = None, overlap: str = "skip",
                        catchup_window: float = sched.DEFAULT_CATCHUP_WINDOW,
                        time_zone: str = "UTC", paused: bool = False,
                        note: str | None = None) -> str:  # fmt: skip
        """A durable schedule: start `workflow` on each tick of `cron` (five fields, in
        `time_zone`) or `every` seconds (aligned to the Unix epoch, plus `offset`). Each run
        gets {"schedule_id", "scheduled_at", "started_at", "source", "input"}. `overlap` is
        skip, buffer_one or allow_all; ticks older than `catchup_window` seconds when a worker
        gets to them are dropped (counted as missed). `version` None: the newest deployed
        version at each tick. Idempotent on the id with the same definition; another one
        raises ScheduleConflict."""
        sid = sched.check_id(schedule_id)
        version = validate.optional_name(version, "version")
        spec = sched.make_spec(cron, every, offset, time_zone)
        validate.choice(overlap, "overlap", ScheduleOverlap.values())
        window = validate.number(catchup_window, "catchup_window", low=sched.MIN_CATCHUP_WINDOW,
                                 high=validate.MAX_SECONDS, unit="seconds")  # fmt: skip
        if not isinstance(paused, bool):
            raise InvalidInput("paused must be True or False")
        note = None if note is None else validate.text(note, "note", max_chars=1000)
        value = json.loads(input_text(input))
        if isinstance(workflow, str):
            name = validate.name(workflow, "workflow name")
        else:
            wf = self.register(workflow)[0]
            name = wf.name
        self._resolve_version(name, version)  # refused now if nothing serves it
        with self._transaction() as conn:
            sched.create_in(conn, sid, name, version, spec, value, overlap,
                                round(window, 6), paused, note, None)  # fmt: skip
        return sid

    def schedules(self, limit: int = 1000) -> list[db.Row]:
        """Every schedule, by id: its spec, overlap, paused, next fire, last run and status."""
        limit = validate.count(limit, "limit", high=MAX_LIST_LIMIT)
        rows = self._execute(db.query("schedule_list"), {"limit": limit}).fetchall()
        return [sched.shown(r) for r in rows]

    def describe_schedule(self, schedule_id: str, fires: int = 20, upcoming: int = 5) -> db.Row:
        """One schedule: its row, the next `upcoming` tick times, whether its previous run is
        live, and its last `fires` decided ticks (started, skipped, buffered, failed)."""
        sid = sched.check_id(schedule_id)
        fires = validate.count(fires, "fires", low=0, high=MAX_LIST_LIMIT)
        upcoming = validate.count(upcoming, "upcoming", low=0, high=1000)
        with self._transaction() as conn:
            return sched.describe_in(conn, sid, fires, upcoming)

    def pause_schedule(self, schedule_id: str, *, by: str | None = None,
                       note: str | None = None) -> None:  # fmt: skip
        """Stop firing until resume_schedule; runs already started go on."""
        sid = sched.check_id(schedule_id)
        by = validate.optional_name(by, "by")
        note = None if note is None else validate.text(note, "note", max_chars=1000)
        with self._transaction() as conn:
            sched.pause_in(conn, sid, by, note)

    def resume_schedule(self, schedule_id: str, *, note: str | None = None) -> Any:
        """Fire again; returns the next tick time. Ticks that fell while paused are not made up."""
        sid = sched.check_id(schedule_id)
        note = None if note is None else validate.text(note, "note", max_chars=1000)
        with self._transaction() as conn:
            return sched.resume_in(conn, sid, note)

    def delete_schedule(self, schedule_id: str) -> None:
        """Remove a schedule and its fire history; the runs it started are kept."""
        sid = sched.check_id(schedule_id)
        with self._transaction() as conn:
            sched.delete_in(conn, sid)

    def trigger_schedule(self, schedule_id: str, *, overlap: str | None = None) -> db.Row:
        """Start a run now (paused or not), in this transaction, without a worker. overlap
        None: allow_all if the schedule allows all, else skip: while its previous run is live
        nothing starts (outcome "skipped"). Returns {outcome, workflow_id, reason, tick}."""
        sid = sched.check_id(schedule_id)
        if overlap is not None:
            validate.choice(overlap, "overlap", (ScheduleOverlap.SKIP, ScheduleOverlap.ALLOW_ALL))
        with self._transaction() as conn:
            return sched.trigger_in(conn, sid, overlap)
