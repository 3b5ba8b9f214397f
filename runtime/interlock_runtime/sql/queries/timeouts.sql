-- Named queries of timeouts (timeouts.py, docs/timeouts.md). Every value is a parameter.

-- name: set_execution_deadline
-- In rt.start's transaction, right after the insert: the deadline is the database's now() (the
-- start transaction's time, as created_at) plus the timeout, so no client clock is involved.
update ilr.workflows
   set execution_timeout = make_interval(secs => %(seconds)s::float8),
       execution_deadline = now() + make_interval(secs => %(seconds)s::float8)
 where id = %(id)s
returning execution_deadline;

-- name: workflow_timeouts
-- What a second start compares, and what describe shows.
select extract(epoch from execution_timeout)::float8 as execution_timeout_s, execution_deadline,
       now() as now
  from ilr.workflows where id = %(id)s;

-- name: expire_workflows
-- The sweep: live runs past their deadline that no worker holds (waiting, never claimed, not
-- served by any deployment yet, or held under a lease that expired) end as timed out. A run
-- whose lease is live is left to its worker, which stops at its next durable call and never
-- in the middle of one (an effect's send is never cut). SKIP LOCKED: a row a claim or a fenced
-- write holds is decided by that transaction.
with expired as (
  select id from ilr.workflows
   where execution_deadline <= now()
     and (status in ('awaiting_worker','pending','sleeping')
          or (status = 'running' and lease_expires_at <= now()))
   order by execution_deadline
   limit %(limit)s
   for update skip locked)
update ilr.workflows w
   set status = 'timed_out', owner = null, lease_expires_at = null, waiting = null,
       updated_at = now(),
       error = jsonb_build_object(
         'type', 'WorkflowTimedOut', 'timeout', 'execution', 'by', 'sweep',
         'deadline', w.execution_deadline,
         'execution_timeout', extract(epoch from w.execution_timeout)::float8,
         'was', w.status,
         'message', 'the execution deadline passed while the workflow was ' || w.status
                    || '; start it again with a longer execution timeout if it needs more time')
  from expired
 where w.id = expired.id
returning w.id, w.parent_id, w.error;

-- name: step_timer_start
-- Before each attempt of a step with a timeout, committed before its body runs: the first
-- attempt's start is kept (the schedule-to-close clock survives crashes and takeovers), the
-- latest one and the count are updated. Returns the database's now() for the local deadlines.
insert into ilr.step_timers (workflow_id, seq, name, start_to_close, schedule_to_close)
values (%(wf)s, %(seq)s, %(name)s, %(start_to_close)s, %(schedule_to_close)s)
on conflict (workflow_id, seq) do update
   set last_started_at = now(), attempts = ilr.step_timers.attempts + 1,
       start_to_close = excluded.start_to_close, schedule_to_close = excluded.schedule_to_close
returning first_started_at, last_started_at, attempts, now() as now;

-- name: step_timers
-- describe: each timed step's clocks and deadlines.
select seq, name, start_to_close, schedule_to_close, first_started_at, last_started_at, attempts,
       last_started_at + make_interval(secs => start_to_close) as attempt_deadline,
       first_started_at + make_interval(secs => schedule_to_close) as step_deadline
  from ilr.step_timers where workflow_id = %(wf)s order by seq;
