-- Named queries of durable schedules (schedules.py, docs/schedules.md). Every value is a
-- parameter. Times that decide anything come from the database clock (now()), never a worker's.

-- name: schedule_insert
-- Idempotent on id: a second create inserts nothing and the caller compares the definitions.
insert into ilr.schedules (id, workflow_name, workflow_version, input, cron, every_seconds,
                           offset_seconds, time_zone, overlap, catchup_window, paused, paused_at,
                           paused_by, note, next_fire_at)
values (%(id)s, %(name)s, %(version)s, %(input)s, %(cron)s, %(every)s, %(offset)s, %(tz)s,
        %(overlap)s, make_interval(secs => %(catchup)s), %(paused)s,
        case when %(paused)s then now() end, case when %(paused)s then %(by)s end, %(note)s,
        %(next_fire_at)s)
on conflict (id) do nothing
returning id;

-- name: schedule_get
select s.*, extract(epoch from s.catchup_window)::float8 as catchup_seconds, now() as now
  from ilr.schedules s where s.id = %(id)s;

-- name: schedule_lock
-- Pause, resume, trigger and delete lock the row first: they wait for a firing pass that holds
-- it, and a firing pass skips a row they hold.
select s.*, extract(epoch from s.catchup_window)::float8 as catchup_seconds, now() as now
  from ilr.schedules s where s.id = %(id)s for update;

-- name: schedule_list
select s.id, s.workflow_name, s.workflow_version, s.cron, s.every_seconds, s.offset_seconds,
       s.time_zone, s.overlap, s.paused, s.next_fire_at, s.last_tick, s.last_workflow_id,
       s.buffered_tick, s.missed_ticks, s.note, s.created_at,
       (select w.status from ilr.workflows w where w.id = s.last_workflow_id) as last_status
  from ilr.schedules s
 order by s.id
 limit %(limit)s;

-- name: schedules_due
-- A firing pass: the schedules whose next tick has come, or that hold a buffered tick (its
-- previous run may have ended), each locked; SKIP LOCKED lets workers fire side by side, each
-- schedule by one of them. now() is the transaction's time: every tick of this pass is judged
-- against the same instant.
select s.*, extract(epoch from s.catchup_window)::float8 as catchup_seconds, now() as now
  from ilr.schedules s
 where not s.paused and (s.next_fire_at <= now() or s.buffered_tick is not null)
 order by s.next_fire_at
 limit %(limit)s
   for update skip locked;

-- name: schedule_previous_live
-- Whether the last run a schedule started is still live, following continue-as-new: a run
-- that continued lives on in its successor. The live statuses come from vocabulary.py.
with recursive chain (id, status, depth) as (
  select w.id, w.status, 0 from ilr.workflows w where w.id = %(wf)s
  union all
  select w.id, w.status, c.depth + 1
    from ilr.workflows w join chain c on w.continued_from = c.id
   where c.status = 'continued' and c.depth < 10000)
select exists (select 1 from chain where status = any(%(live)s::text[])) as live;

-- name: schedule_record_fire
-- The guarantee: (schedule, source, tick) is the primary key, so a tick already decided
-- inserts nothing here and the caller starts nothing.
insert into ilr.schedule_fires (schedule_id, source, tick, outcome, workflow_id, reason,
                                started_at)
values (%(id)s, %(source)s, %(tick)s, %(outcome)s, %(wf)s, %(reason)s,
        case when %(outcome)s = 'started' then now() end)
on conflict (schedule_id, source, tick) do nothing
returning tick;

-- name: schedule_fire_started
-- A buffered tick started once its previous run ended (or failed to start: outcome failed).
update ilr.schedule_fires
   set outcome = %(outcome)s, workflow_id = %(wf)s, reason = %(reason)s,
       started_at = case when %(outcome)s = 'started' then now() end
 where schedule_id = %(id)s and source = 'schedule' and tick = %(tick)s
   and outcome = 'buffered'
returning tick;

-- name: schedule_fire_failed
-- The tick's workflow id was taken (a start by hand, an earlier schedule with this id).
update ilr.schedule_fires
   set outcome = %(outcome)s, workflow_id = %(wf)s, reason = %(reason)s, started_at = null
 where schedule_id = %(id)s and source = %(source)s and tick = %(tick)s
returning tick;

-- name: schedule_insert_workflow
-- A scheduled start. The id is derived from the schedule and the tick: inserting it again
-- inserts nothing (the caller then records the fire as failed, naming the id).
insert into ilr.workflows (id, name, version, input)
values (%(wf)s, %(name)s, %(version)s, %(input)s)
on conflict (id) do nothing
returning id;

-- name: schedule_advance
-- The end of a firing pass for one schedule, in the pass's transaction.
update ilr.schedules
   set next_fire_at = %(next_fire_at)s, last_tick = coalesce(%(last_tick)s, last_tick),
       last_workflow_id = coalesce(%(last_wf)s, last_workflow_id),
       buffered_tick = %(buffered)s, missed_ticks = missed_ticks + %(missed)s, updated_at = now()
 where id = %(id)s;

-- name: schedule_started_by_trigger
update ilr.schedules set last_workflow_id = %(wf)s, updated_at = now() where id = %(id)s;

-- name: schedule_pause
update ilr.schedules
   set paused = true, paused_at = now(), paused_by = %(by)s,
       note = coalesce(%(note)s, note), updated_at = now()
 where id = %(id)s;

-- name: schedule_resume
-- Ticks that fell while it was paused are not made up: it fires next at the first tick after
-- the resume (the caller computes it from this transaction's now()). A buffered tick is kept.
update ilr.schedules
   set paused = false, paused_at = null, paused_by = null, note = coalesce(%(note)s, note),
       next_fire_at = %(next_fire_at)s, updated_at = now()
 where id = %(id)s;

-- name: schedule_delete
-- Its fire history goes with it (on delete cascade); the runs it started stay.
delete from ilr.schedules where id = %(id)s returning id;

-- name: schedule_fires
select source, tick, outcome, workflow_id, reason, decided_at, started_at,
       (select w.status from ilr.workflows w where w.id = f.workflow_id) as status
  from ilr.schedule_fires f
 where f.schedule_id = %(id)s
 order by f.decided_at desc, f.tick desc
 limit %(limit)s;

-- name: schedules_next_fire
-- Seconds until the earliest tick of any running schedule (negative: one is due now), so a
-- worker wakes on time instead of at its next poll; null when there is none.
select extract(epoch from min(next_fire_at) - now())::float8 as seconds
  from ilr.schedules where not paused;
