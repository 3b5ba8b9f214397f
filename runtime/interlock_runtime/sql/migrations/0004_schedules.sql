-- Migration 0004: durable schedules (issue 21, item 3; docs/schedules.md).
--
-- A schedule starts a workflow on a cron expression or a fixed interval. Workers fire due
-- schedules by the database clock inside one transaction that locks the schedule row (FOR
-- UPDATE SKIP LOCKED), records the fire and inserts the workflow. "At most one start per tick"
-- does not rest on that lock alone: the fire's primary key (schedule, source, tick) makes the
-- database refuse a second record of the same tick, and the workflow id is derived from the
-- schedule id and the tick, so a second insert of the same start is a no-op.

create table ilr.schedules (
  id text primary key,
  workflow_name text not null,
  workflow_version text,                    -- null: the newest deployed version at each fire
  input jsonb not null,                     -- handed to each run as its envelope's "input"
  cron text,                                -- five fields, evaluated in time_zone
  every_seconds bigint check (every_seconds >= 1),
  offset_seconds bigint not null default 0 check (offset_seconds >= 0),
  time_zone text not null default 'UTC',
  overlap text not null default 'skip' check (overlap in ('skip','buffer_one','allow_all')),
  catchup_window interval not null default '60 seconds',
  paused boolean not null default false,
  paused_at timestamptz,
  paused_by text,
  note text,
  next_fire_at timestamptz not null,        -- the next tick not yet decided
  last_tick timestamptz,                    -- the last tick decided (started, skipped, buffered)
  last_workflow_id text,                    -- the last run it started: what overlap looks at
  buffered_tick timestamptz,                -- buffer_one: the one tick waiting for that run
  missed_ticks bigint not null default 0,   -- ticks dropped as older than the catch-up window
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  check ((cron is null) <> (every_seconds is null)),
  check (every_seconds is null or offset_seconds < every_seconds)
);
create index schedules_due on ilr.schedules (next_fire_at) where not paused;

-- One row per decided tick. The primary key is the guarantee: a tick is recorded once, so it is
-- started at most once, whatever the number of workers and however they crash.
create table ilr.schedule_fires (
  schedule_id text not null references ilr.schedules(id) on delete cascade,
  source text not null check (source in ('schedule','trigger')),
  tick timestamptz not null,                -- the scheduled time (a trigger: when it was asked)
  outcome text not null check (outcome in ('started','skipped','buffered','failed')),
  workflow_id text,                         -- the run it started (started, or buffered later)
  reason text,                              -- why it was skipped or failed
  decided_at timestamptz not null default now(),
  started_at timestamptz,
  primary key (schedule_id, source, tick)
);

-- Where the least-privilege roles exist (interlock roles), the same grants as sql/roles.sql:
-- a worker fires schedules (it moves their firing columns and records fires) but cannot
-- create, change, pause or delete one; the operator can; the auditor reads.
do $$
begin
  if exists (select 1 from pg_roles where rolname = 'ilr_worker') then
    grant select on ilr.schedules, ilr.schedule_fires to ilr_worker, ilr_operator, ilr_auditor;
    grant update (next_fire_at, last_tick, last_workflow_id, buffered_tick, missed_ticks,
                  updated_at) on ilr.schedules to ilr_worker;
    grant insert, update on ilr.schedule_fires to ilr_worker;
    grant insert, update, delete on ilr.schedules, ilr.schedule_fires to ilr_operator;
  end if;
end $$;
