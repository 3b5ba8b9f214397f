-- Migration 0005: named queues with limits, priorities, and starts before any worker exists
-- (issue 21, items 4 and 7; docs/queues.md).
--
-- A workflow is started on a queue ('default' unless named). A queue row sets limits that hold
-- across every worker, because the claim counts the ground truth in this table (runs whose
-- lease is live, first starts inside the rate window) while holding the queue's advisory lock:
-- two workers cannot both take the last slot. The 'default' queue never has a row, so a
-- runtime that uses no queue claims exactly as before.
--
-- A start whose workflow no deployment serves yet is recorded as 'awaiting_worker' with no
-- version; the first registration of that name (a worker starting, rt.register) resolves it.

create table ilr.queues (
  name text primary key check (name <> 'default'),
  concurrency int check (concurrency >= 1),                 -- runs at once, all workers
  worker_concurrency int check (worker_concurrency >= 1),   -- runs at once in one worker
  per_key_concurrency int check (per_key_concurrency >= 1), -- runs at once per queue_key
  rate_limit int check (rate_limit >= 1),                   -- first starts per rate_period
  rate_period interval check (rate_period > interval '0'),
  per_key_rate_limit int check (per_key_rate_limit >= 1),   -- first starts per key per period
  per_key_rate_period interval check (per_key_rate_period > interval '0'),
  limited boolean generated always as (
    concurrency is not null or worker_concurrency is not null or per_key_concurrency is not null
    or rate_limit is not null or per_key_rate_limit is not null) stored,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  check ((rate_limit is null) = (rate_period is null)),
  check ((per_key_rate_limit is null) = (per_key_rate_period is null))
);

alter table ilr.workflows
  add column queue text not null default 'default',
  add column priority int not null default 0,               -- lower runs first
  add column queue_key text,                                -- per-key limits (e.g. a customer)
  add column dedup_id text,                                 -- one live run per (queue, dedup_id)
  add column started_at timestamptz,                        -- its first claim: the rate window
  add column wanted_version text;                           -- awaiting_worker: the version asked for

-- A run waiting for its first deployment has no version yet; the foreign key to deployments
-- does not apply to it (a null column is not checked).
alter table ilr.workflows alter column version drop not null;
alter table ilr.workflows drop constraint if exists workflows_status_check;
alter table ilr.workflows add constraint workflows_status_check check (status in
  ('awaiting_worker','pending','running','sleeping','completed','failed','cancelled','stuck',
   'continued'));
alter table ilr.workflows add constraint workflows_version_known
  check (version is not null or status = 'awaiting_worker' or status = 'cancelled');

-- The claim orders by priority then readiness; the limits count live runs and recent starts
-- of one queue (and key).
create index wf_due_priority on ilr.workflows (priority, available_at)
  where status in ('pending','sleeping');
create index wf_queue_running on ilr.workflows (queue, queue_key) where status = 'running';
create index wf_queue_started on ilr.workflows (queue, started_at) where started_at is not null;
create index wf_awaiting on ilr.workflows (name) where status = 'awaiting_worker';
create unique index wf_dedup on ilr.workflows (queue, dedup_id)
  where dedup_id is not null and status in ('awaiting_worker','pending','running','sleeping');

-- A slot of a named queue frees when one of its runs stops running (ends, sleeps, is handed
-- back): wake the workers, which would otherwise wait for their next poll to claim it.
create function ilr.queue_slot_freed() returns trigger language plpgsql as $$
begin
  perform pg_notify('ilr_ready', 'queue:' || new.queue);
  return null;
end $$;
create trigger workflows_queue_slot_freed after update of status on ilr.workflows
  for each row when (old.status = 'running' and new.status <> 'running' and new.queue <> 'default')
  execute function ilr.queue_slot_freed();

-- Starts and registrations of one workflow name serialize on this lock, so a start that found
-- no deployment cannot slip past the registration that would have resolved it.
create function ilr.lock_workflow_name(wf_name text) returns void
language sql security definer set search_path = pg_catalog, ilr as $$
  select pg_advisory_xact_lock(470841874, hashtext(wf_name))
$$;

-- A registration resolves the runs waiting for this name: a pinned version once that version
-- is deployed, otherwise the newest live version. available_at stays the start's time, so they
-- are claimed in the order they were started. The worker may not write versions, so this
-- function does exactly that one thing for it.
create function ilr.resolve_awaiting(wf_name text) returns int
language plpgsql security definer set search_path = pg_catalog, ilr as $$
declare
  newest text;
  moved int;
begin
  perform ilr.lock_workflow_name(wf_name);
  select d.version into newest from ilr.deployments d
   where d.name = wf_name and d.retired_at is null
   order by d.created_at desc, d.version desc limit 1;
  update ilr.workflows w
     set version = coalesce(w.wanted_version, newest), status = 'pending', updated_at = now()
   where w.name = wf_name and w.status = 'awaiting_worker'
     and (case when w.wanted_version is null then newest is not null
               else exists (select 1 from ilr.deployments d
                             where d.name = wf_name and d.version = w.wanted_version) end);
  get diagnostics moved = row_count;
  if moved > 0 then
    perform pg_notify('ilr_ready', 'deployed:' || wf_name);
  end if;
  return moved;
end $$;

do $$
begin
  revoke all on function ilr.lock_workflow_name(text), ilr.resolve_awaiting(text) from public;
  if exists (select 1 from pg_roles where rolname = 'ilr_worker') then
    grant select on ilr.queues to ilr_worker, ilr_operator, ilr_auditor;
    grant insert, update, delete on ilr.queues to ilr_operator;
    grant update (started_at) on ilr.workflows to ilr_worker;
    grant execute on function ilr.lock_workflow_name(text), ilr.resolve_awaiting(text),
      ilr.queue_slot_freed() to ilr_worker, ilr_operator;
  end if;
end $$;
