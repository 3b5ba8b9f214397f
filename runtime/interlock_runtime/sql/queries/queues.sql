-- Named queries of queues and of starts before a worker exists (queues.py, docs/queues.md).
-- Every value is a parameter.

-- name: queue_upsert
-- rt.queue: the queue's limits, all of them replaced (a limit not given is lifted).
insert into ilr.queues (name, concurrency, worker_concurrency, per_key_concurrency, rate_limit,
                        rate_period, per_key_rate_limit, per_key_rate_period)
values (%(name)s, %(concurrency)s, %(worker_concurrency)s, %(per_key_concurrency)s,
        %(rate_limit)s, make_interval(secs => %(rate_period)s::float8), %(per_key_rate_limit)s,
        make_interval(secs => %(per_key_rate_period)s::float8))
on conflict (name) do update
   set concurrency = excluded.concurrency, worker_concurrency = excluded.worker_concurrency,
       per_key_concurrency = excluded.per_key_concurrency, rate_limit = excluded.rate_limit,
       rate_period = excluded.rate_period, per_key_rate_limit = excluded.per_key_rate_limit,
       per_key_rate_period = excluded.per_key_rate_period, updated_at = now()
returning name;

-- name: queue_list
-- Every declared queue and every queue a live run names, with its limits and current use.
with names as (
  select name from ilr.queues
  union
  select distinct queue from ilr.workflows
   where status in ('awaiting_worker','pending','running','sleeping'))
select n.name, q.concurrency, q.worker_concurrency, q.per_key_concurrency, q.rate_limit,
       extract(epoch from q.rate_period)::float8 as rate_period_s, q.per_key_rate_limit,
       extract(epoch from q.per_key_rate_period)::float8 as per_key_rate_period_s,
       coalesce(q.limited, false) as limited,
       (select count(*) from ilr.workflows w
         where w.queue = n.name and w.status = 'running' and w.lease_expires_at > now()) as running,
       (select count(*) from ilr.workflows w
         where w.queue = n.name and w.status = 'pending' and w.available_at <= now()) as ready,
       (select count(*) from ilr.workflows w
         where w.queue = n.name and w.status in ('pending','sleeping')
           and w.available_at > now()) as waiting,
       (select count(*) from ilr.workflows w
         where w.queue = n.name and w.status = 'awaiting_worker') as awaiting_worker,
       (select count(*) from ilr.workflows w
         where w.queue = n.name and q.rate_period is not null
           and w.started_at > now() - q.rate_period) as started_in_window
  from names n left join ilr.queues q on q.name = n.name
 where %(name)s::text is null or n.name = %(name)s
 order by n.name;

-- name: queue_keys
-- interlock queue describe: the keys of one queue with live or recent runs, busiest first.
select queue_key,
       count(*) filter (where status = 'running' and lease_expires_at > now()) as running,
       count(*) filter (where status = 'pending' and available_at <= now()) as ready,
       count(*) filter (where started_at > now() - make_interval(secs => %(window)s::float8))
         as started_in_window
  from ilr.workflows
 where queue = %(name)s and queue_key is not null
   and (status in ('awaiting_worker','pending','running','sleeping')
        or started_at > now() - make_interval(secs => %(window)s::float8))
 group by queue_key
 order by running desc, ready desc, queue_key
 limit %(limit)s;

-- name: queue_limited_served
-- Before each claim: the queues with limits among those the worker serves (null: all). None
-- means the plain claim; any means the limited claim, under their locks.
select name from ilr.queues
 where limited and (%(queues)s::text[] is null or name = any(%(queues)s))
 order by name;

-- name: queue_lock
-- The claiming transaction's first statement: one advisory lock per limited queue, in name
-- order (the caller sorts), held to commit. Claims of the same queue serialize here, and the
-- claim that follows is a new statement, so it counts what the previous holder committed.
select pg_advisory_xact_lock(470841875, hashtext(q)) from unnest(%(limited)s::text[]) as q;

-- name: queue_running_settled
-- The claiming transaction's second statement: lock the running rows of the limited queues
-- FOR SHARE, in id order (the heartbeat locks its rows in id order too). A renewal in flight
-- (a heartbeat's update not yet committed) is waited for, so the claim that follows, a new
-- statement, counts its lease as renewed; a plain read would see the lease as it was before
-- and might count it expired, and claim a run past a limit that the renewal then fills
-- (docs/queues.md#the-claim). Renewals that come after wait for this transaction's commit.
select 1 from ilr.workflows r
 where r.queue = any(%(limited)s) and r.status = 'running'
 order by r.id
   for share;

-- name: claim_limited
-- The claim of a worker that serves a limited queue (docs/queues.md#the-claim). Inside the
-- transaction that holds the queues' locks; statement_timestamp() rather than now(), which is
-- the transaction's start and could be a lock wait old. Three steps:
--   1. what each limited queue (and key) uses now: live leases, first starts in the window;
--   2. the due rows in priority order, leaving out those a limit holds whatever else is
--      claimed (a full queue or key, a spent rate for a first start);
--   3. of those, the ones that fit: ranked within their queue (and key), a row is taken only
--      if its rank is within what each of its limits has left.
-- A first start is a row never claimed (started_at null); only first starts spend the rate.
with lim as (
  select q.name, q.concurrency, q.worker_concurrency, q.per_key_concurrency, q.rate_limit,
         q.per_key_rate_limit, q.per_key_rate_period,
         (select count(*) from ilr.workflows r
           where r.queue = q.name and r.status = 'running'
             and r.lease_expires_at > statement_timestamp())::int as running,
         (select count(*) from ilr.workflows r
           where r.queue = q.name and r.status = 'running' and r.owner = %(owner)s
             and r.lease_expires_at > statement_timestamp())::int as mine,
         (select count(*) from ilr.workflows r
           where r.queue = q.name and q.rate_period is not null
             and r.started_at > statement_timestamp() - q.rate_period)::int as started
    from ilr.queues q
   where q.name = any(%(limited)s)),
keyed as (
  select r.queue, r.queue_key,
         count(*) filter (where r.status = 'running'
                            and r.lease_expires_at > statement_timestamp())::int as running,
         count(*) filter (where r.started_at > statement_timestamp()
                                                - lim.per_key_rate_period)::int as started
    from ilr.workflows r join lim on lim.name = r.queue
   where r.queue_key is not null
     and (lim.per_key_concurrency is not null or lim.per_key_rate_limit is not null)
     and (r.status = 'running' or r.started_at > statement_timestamp() - lim.per_key_rate_period)
   group by r.queue, r.queue_key),
cand as (
  select w.id, w.queue, w.queue_key, w.priority, w.available_at, w.started_at is null as fresh,
         w.status as prev_status, w.lease_expires_at as prev_lease_expires_at
    from ilr.workflows w
    left join lim on lim.name = w.queue
    left join keyed k on k.queue = w.queue and k.queue_key = w.queue_key
   where ((w.status in ('pending','sleeping') and w.available_at <= statement_timestamp())
       or (w.status = 'running' and w.lease_expires_at <= statement_timestamp()))
     and (w.name, w.version) in (select * from unnest(%(names)s::text[], %(versions)s::text[]))
     and (%(queues)s::text[] is null or w.queue = any(%(queues)s))
     and (lim.name is null or (
              (lim.concurrency is null or lim.running < lim.concurrency)
          and (lim.worker_concurrency is null or lim.mine < lim.worker_concurrency)
          and (w.started_at is not null or lim.rate_limit is null or lim.started < lim.rate_limit)
          and (w.queue_key is null or lim.per_key_concurrency is null
               or coalesce(k.running, 0) < lim.per_key_concurrency)
          and (w.queue_key is null or w.started_at is not null or lim.per_key_rate_limit is null
               or coalesce(k.started, 0) < lim.per_key_rate_limit)))
   order by w.priority, w.available_at, w.id
   limit %(scan)s
   for update of w skip locked),
ranked as (
  select c.*,
         row_number() over in_queue as queue_rank,
         count(*) filter (where c.fresh) over in_queue as fresh_queue_rank,
         row_number() over in_key as key_rank,
         count(*) filter (where c.fresh) over in_key as fresh_key_rank
    from cand c
  window in_queue as (partition by c.queue order by c.priority, c.available_at, c.id),
         in_key as (partition by c.queue, c.queue_key order by c.priority, c.available_at, c.id)),
admitted as (
  select r.* from ranked r
    left join lim on lim.name = r.queue
    left join keyed k on k.queue = r.queue and k.queue_key = r.queue_key
   where lim.name is null or (
             (lim.concurrency is null or r.queue_rank <= lim.concurrency - lim.running)
         and (lim.worker_concurrency is null or r.queue_rank <= lim.worker_concurrency - lim.mine)
         and (not r.fresh or lim.rate_limit is null
              or r.fresh_queue_rank <= lim.rate_limit - lim.started)
         and (r.queue_key is null or lim.per_key_concurrency is null
              or r.key_rank <= lim.per_key_concurrency - coalesce(k.running, 0))
         and (r.queue_key is null or not r.fresh or lim.per_key_rate_limit is null
              or r.fresh_key_rank <= lim.per_key_rate_limit - coalesce(k.started, 0)))
   order by r.priority, r.available_at, r.id
   limit %(limit)s),
claimed as (
  update ilr.workflows w
     set status = 'running', epoch = w.epoch + 1, owner = %(owner)s,
         takeovers = w.takeovers + (a.prev_status = 'running')::int,
         started_at = coalesce(w.started_at, statement_timestamp()),
         lease_expires_at = statement_timestamp() + make_interval(secs => %(ttl)s),
         updated_at = now()
    from admitted a
   where w.id = a.id
  returning w.id, w.name, w.version, w.input, w.epoch, w.waiting, w.takeovers,
            w.cancel_requested_at, w.parent_id, w.traceparent, statement_timestamp() as claimed_now,
            a.prev_status, a.prev_lease_expires_at, w.execution_deadline,
            exists (select 1 from ilr.steps s where s.workflow_id = w.id) as has_steps),
history as (
  insert into ilr.claims (workflow_id, epoch, owner, version, claimed_at, prev_status,
                          prev_lease_expires_at)
  select id, epoch, %(owner)s, version, statement_timestamp(), prev_status, prev_lease_expires_at
    from claimed)
select * from claimed;

-- name: next_due_limited
-- next_due for a worker serving limited queues (with next_due's `limited` column). A due row of a limited queue that the claim
-- left is held by a limit: a slot freeing wakes the worker (NOTIFY from the trigger of
-- migration 0005), and so does the moment a rate window lets the next start through.
select extract(epoch from least(
         (select min(w.available_at) from ilr.workflows w
           where w.status in ('pending','sleeping')
             and (w.name, w.version) in (select * from unnest(%(names)s::text[], %(versions)s::text[]))
             and (%(queues)s::text[] is null or w.queue = any(%(queues)s))
             and (w.available_at > now() or w.queue <> all(%(limited)s))),
         (select min(w.lease_expires_at) from ilr.workflows w
           where w.status = 'running'
             and (w.name, w.version) in (select * from unnest(%(names)s::text[], %(versions)s::text[]))
             and (%(queues)s::text[] is null or w.queue = any(%(queues)s))),
         (select min(r.started_at + q.rate_period) from ilr.queues q
            join ilr.workflows r on r.queue = q.name
           where q.name = any(%(limited)s) and r.started_at > now() - q.rate_period),
         (select min(r.started_at + q.per_key_rate_period) from ilr.queues q
            join ilr.workflows r on r.queue = q.name
           where q.name = any(%(limited)s) and r.queue_key is not null
             and r.started_at > now() - q.per_key_rate_period)
       ) - now())::float8 as seconds,
       array(select name from ilr.queues
              where limited and (%(queues)s::text[] is null or name = any(%(queues)s))
              order by name) as limited;

-- ============================================================================================
-- Starts: on a queue, with a priority and keys; before any worker serves the workflow.
-- ============================================================================================

-- name: lock_workflow_name
-- A start that found no deployment takes this lock, then looks again (newest_version): a
-- registration of the name either committed before (the start sees it) or waits and then
-- resolves the row this start inserts (ilr.resolve_awaiting).
select ilr.lock_workflow_name(%(name)s);

-- name: resolve_awaiting
-- In the transaction that registers a deployment: runs started before it now have a version
-- and become pending.
select ilr.resolve_awaiting(%(name)s) as resolved;

-- name: start_workflow
-- rt.start. Idempotent on id: a second start with the same id inserts nothing and the caller
-- compares. A live run with the same (queue, dedup_id) raises a unique violation (wf_dedup).
-- A run inserted pending wakes the workers (NOTIFY ilr_ready, delivered at commit) in this
-- statement: one round trip less than notify_ready after it.
with started as (
  insert into ilr.workflows (id, name, version, input, status, queue, priority, queue_key,
                             dedup_id, wanted_version)
  values (%(id)s, %(name)s, %(version)s, %(input)s, %(status)s, %(queue)s, %(priority)s,
          %(queue_key)s, %(dedup_id)s, %(wanted_version)s)
  on conflict (id) do nothing
  returning id, status),
woken as (
  select pg_notify('ilr_ready', id) from started where status = 'pending')
select id, (select count(*) from woken) as woken from started;

-- name: start_served
-- rt.start's usual case in one statement, sent in autocommit: one round trip and one commit,
-- where the general form (start_workflow in a transaction) takes four. The version is the one
-- asked for if it is deployed, else the newest live one, exactly as rt.start resolves it; the
-- run is inserted pending and wakes the workers. No version found, or the id taken: nothing is
-- written (id is null), and rt.start goes the general way (awaiting_worker, or the comparison
-- with the first start). The trace context goes in with the row. A deployment that describes
-- its input type takes the general way too (which checks the input before its insert), unless
-- the caller checked the input against the class itself (input_checked) or against this very
-- description (schema_md5: the md5 of the one the caller checked against, read earlier): the
-- input is checked at the door either way (docs/typed.md#checked-at-the-door).
with served as (
  select version, input_schema from ilr.deployments
   where name = %(name)s
     and case when %(wanted_version)s::text is null then retired_at is null
              else version = %(wanted_version)s end
   order by created_at desc, version desc limit 1),
started as (
  insert into ilr.workflows (id, name, version, input, status, queue, priority, queue_key,
                             dedup_id, wanted_version, traceparent)
  select %(id)s, %(name)s, served.version, %(input)s, 'pending', %(queue)s, %(priority)s,
         %(queue_key)s, %(dedup_id)s, %(wanted_version)s, %(traceparent)s
    from served
   where %(input_checked)s or served.input_schema is null
      or md5(served.input_schema::text) = %(schema_md5)s::text
  on conflict (id) do nothing
  returning id),
woken as (
  select pg_notify('ilr_ready', id) from started)
select (select id from started) as id, (select count(*) from woken) as woken;

-- name: dedup_holder
-- The live run that holds a (queue, dedup_id), for the refusal's message.
select id, status from ilr.workflows
 where queue = %(queue)s and dedup_id = %(dedup_id)s
   and status in ('awaiting_worker','pending','running','sleeping');

-- name: start_options
-- What a start recorded beyond name and input, to compare a second start with the same id.
select wanted_version, queue, priority, queue_key, dedup_id, started_at
  from ilr.workflows where id = %(id)s;

-- name: cancel_awaiting
-- Cancelling a run that no worker has ever served ends it at once: no code of it ran, so
-- there is nothing to compensate, and no worker may ever come to see the request.
update ilr.workflows
   set status = 'cancelled', error = '{"type": "Cancelled", "before": "any worker served it"}',
       available_at = now(), updated_at = now()
 where id = %(id)s and status = 'awaiting_worker'
returning id;
