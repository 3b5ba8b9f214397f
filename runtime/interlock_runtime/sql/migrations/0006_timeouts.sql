-- Migration 0006: timeouts (issue 21, item 2; docs/timeouts.md).
--
-- A workflow may carry an execution deadline: now() at its start plus the execution timeout
-- it was started with, on the database clock, so no crash or worker restart moves it. A child
-- and a continue-as-new successor inherit the deadline of the run that made them (one budget
-- for the whole tree and chain). A workflow past its deadline ends with status 'timed_out'.
--
-- A step with a start-to-close or schedule-to-close timeout keeps a timer row: when its first
-- attempt started (database clock, committed before the body runs) and how many attempts
-- started, so the schedule-to-close clock keeps counting across crashes and takeovers.

alter table ilr.workflows
  add column execution_timeout interval,          -- as asked at the start (null: none)
  add column execution_deadline timestamptz;      -- when it times out (null: never)

alter table ilr.workflows drop constraint if exists workflows_status_check;
alter table ilr.workflows add constraint workflows_status_check check (status in
  ('awaiting_worker','pending','running','sleeping','completed','failed','cancelled','stuck',
   'continued','timed_out'));
-- a run that timed out before any deployment served it has no version, like a cancelled one
alter table ilr.workflows drop constraint if exists workflows_version_known;
alter table ilr.workflows add constraint workflows_version_known
  check (version is not null or status = 'awaiting_worker' or status = 'cancelled'
         or status = 'timed_out');

-- The sweep (timeouts.expire) finds live rows past their deadline.
create index wf_execution_deadline on ilr.workflows (execution_deadline)
  where execution_deadline is not null
    and status in ('awaiting_worker','pending','running','sleeping');

-- Every way of waiting sets available_at (a timer, a signal with no timeout: 'infinity', a
-- retry backoff). Holding it at the deadline makes a waiting run claimable when its deadline
-- comes, so the claim that wakes it ends it as timed out; no query that suspends needs to
-- know about deadlines. Children and successors take over the deadline of their maker here.
create function ilr.workflow_deadline() returns trigger language plpgsql as $$
begin
  if tg_op = 'INSERT' and new.execution_deadline is null
     and (new.continued_from is not null or new.parent_id is not null) then
    select w.execution_deadline, w.execution_timeout
      into new.execution_deadline, new.execution_timeout
      from ilr.workflows w where w.id = coalesce(new.continued_from, new.parent_id);
    if new.continued_from is null then
      new.execution_timeout := null;  -- a child's deadline is its parent's, not its own
    end if;
  end if;
  if new.execution_deadline is not null and new.available_at > new.execution_deadline then
    new.available_at := new.execution_deadline;
  end if;
  return new;
end $$;
create trigger workflows_deadline_insert before insert on ilr.workflows
  for each row execute function ilr.workflow_deadline();
-- only the updates that need it call the function (heartbeats and fences never do)
create trigger workflows_deadline_update before update on ilr.workflows
  for each row when (new.execution_deadline is not null
                     and new.available_at > new.execution_deadline)
  execute function ilr.workflow_deadline();

-- A parent that timed out is terminal: its children's completions no longer signal it.
create or replace function ilr.signal_parent(child_id text, done jsonb) returns bigint
language plpgsql security definer set search_path = pg_catalog, ilr as $$
declare
  parent text;
  parent_status text;
  signal_id bigint;
begin
  select w.parent_id into parent from ilr.workflows w where w.id = child_id;
  if parent is null then return null; end if;
  select w.status into parent_status from ilr.workflows w where w.id = parent for update;
  if parent_status in ('completed','failed','cancelled','stuck','continued','timed_out') then
    return null;
  end if;
  insert into ilr.signals (workflow_id, name, payload, sender)
  values (parent, '$done:' || regexp_replace(child_id, '#[0-9]+$', ''), done, child_id)
  returning id into signal_id;
  update ilr.workflows
     set available_at = now(),
         status = case when status = 'sleeping' then 'pending' else status end,
         updated_at = now()
   where id = parent;
  perform pg_notify('ilr_ready', parent);
  return signal_id;
end $$;

create table ilr.step_timers (
  workflow_id text not null,
  seq int not null,
  name text not null,
  start_to_close float8,                    -- seconds, one attempt (null: none)
  schedule_to_close float8,                 -- seconds, all attempts from the first start
  first_started_at timestamptz not null default now(),
  last_started_at timestamptz not null default now(),
  attempts int not null default 1,
  primary key (workflow_id, seq)
);

do $$
begin
  if exists (select 1 from pg_roles where rolname = 'ilr_worker') then
    grant select on ilr.step_timers to ilr_worker, ilr_operator, ilr_auditor;
    grant insert, update on ilr.step_timers to ilr_worker;
  end if;
end $$;
