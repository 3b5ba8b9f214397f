-- Named queries, loaded by name with db.query("name"). Every value is a parameter.
-- Each block starts with a `-- name: <name>` line; the comment lines after it say why.

-- name: fence
-- The first statement of every worker write (spec 5.2). It matches only while the claim's
-- epoch is current and the lease has not expired, extends the lease, and takes the row lock
-- that serializes this write against any claim, signal or cancel.
update ilr.workflows
   set lease_expires_at = now() + make_interval(secs => %(ttl)s), updated_at = now()
 where id = %(wf)s and epoch = %(epoch)s and status = 'running' and lease_expires_at > now()
returning cancel_requested_at, now() as now, lease_expires_at;

-- name: heartbeat
-- One statement renews every run a worker holds (spec 5.3, batched). A run missing from
-- the result was fenced: its epoch moved on or its lease expired.
update ilr.workflows w
   set lease_expires_at = now() + make_interval(secs => %(ttl)s), updated_at = now()
  from unnest(%(ids)s::text[], %(epochs)s::bigint[]) as h(id, epoch)
 where w.id = h.id and w.epoch = h.epoch and w.status = 'running' and w.lease_expires_at > now()
returning w.id, w.cancel_requested_at;

-- name: claim
-- Claim due work (spec 5.3): pending or sleeping rows whose time has come, and running rows
-- whose lease expired (a takeover). SKIP LOCKED lets workers claim side by side. The claim
-- history row is written by the same statement, with the lease the previous holder had.
with due as (
  select id, status as prev_status, lease_expires_at as prev_lease_expires_at
    from ilr.workflows
   where ((status in ('pending','sleeping') and available_at <= now())
       or (status = 'running' and lease_expires_at <= now()))
     and (name, version) in (select * from unnest(%(names)s::text[], %(versions)s::text[]))
   order by available_at
   limit %(limit)s
   for update skip locked),
claimed as (
  update ilr.workflows w
     set status = 'running', epoch = w.epoch + 1, owner = %(owner)s,
         takeovers = w.takeovers + (due.prev_status = 'running')::int,
         lease_expires_at = now() + make_interval(secs => %(ttl)s), updated_at = now()
    from due
   where w.id = due.id
  returning w.id, w.name, w.version, w.input, w.epoch, w.waiting, w.takeovers,
            w.cancel_requested_at, due.prev_status, due.prev_lease_expires_at),
history as (
  insert into ilr.claims (workflow_id, epoch, owner, version, claimed_at, prev_status,
                          prev_lease_expires_at)
  select id, epoch, %(owner)s, version, now(), prev_status, prev_lease_expires_at from claimed)
select * from claimed;

-- name: load_steps
select seq, name, kind, fingerprint, output, error, epoch, created_at
  from ilr.steps where workflow_id = %(wf)s order by seq;

-- name: insert_step
-- A recorded step resets the takeover count (spec 5.1: a crash loop spends retries only
-- while no step gets recorded) and clears the waiting state it satisfied.
with step as (
  insert into ilr.steps (workflow_id, seq, name, kind, fingerprint, output, error, epoch)
  values (%(wf)s, %(seq)s, %(name)s, %(kind)s, %(fingerprint)s, %(output)s, %(error)s, %(epoch)s)
  returning workflow_id)
update ilr.workflows set takeovers = 0, waiting = null
 where id = (select workflow_id from step);

-- name: suspend_retry
-- A retryable step error with attempts left (spec B5): the row goes back to pending, due
-- after the backoff, and the claim is released in the same fenced transaction.
update ilr.workflows
   set status = 'pending', owner = null, lease_expires_at = null, waiting = %(waiting)s,
       available_at = now() + make_interval(secs => %(delay)s), updated_at = now()
 where id = %(wf)s;

-- name: finish
-- A terminal outcome (completed, failed, cancelled, stuck) written under the fence.
update ilr.workflows
   set status = %(status)s, result = %(result)s, error = %(error)s, owner = null,
       lease_expires_at = null, waiting = null, updated_at = now()
 where id = %(wf)s;

-- name: release
-- A worker stopping on SIGTERM hands its run back at once, so a peer need not wait for the
-- lease to expire.
update ilr.workflows
   set status = 'pending', owner = null, lease_expires_at = null, available_at = now(),
       updated_at = now()
 where id = %(wf)s;

-- name: mark_stuck_unfenced
-- A swallowed Suspend (spec 5.1): the suspend transaction already released the row, so the
-- fence cannot match; the write is guarded by the unchanged epoch instead (DESIGN B13).
update ilr.workflows
   set status = 'stuck', error = %(error)s, owner = null, lease_expires_at = null,
       updated_at = now()
 where id = %(wf)s and epoch = %(epoch)s and status in ('sleeping','pending');

-- name: register_deployment
insert into ilr.deployments (name, version, code_sha256)
values (%(name)s, %(version)s, %(sha)s)
on conflict (name, version) do nothing;

-- name: get_deployment
select name, version, code_sha256, created_at, retired_at
  from ilr.deployments where name = %(name)s and version = %(version)s;

-- name: replace_deployment_hash
update ilr.deployments set code_sha256 = %(sha)s where name = %(name)s and version = %(version)s;

-- name: list_deployments
select name, version, code_sha256, created_at, retired_at
  from ilr.deployments order by name, created_at, version;

-- name: newest_version
select version from ilr.deployments
 where name = %(name)s and retired_at is null
 order by created_at desc, version desc limit 1;

-- name: insert_workflow
-- Idempotent on id: a second start with the same id inserts nothing and the caller compares.
insert into ilr.workflows (id, name, version, input)
values (%(id)s, %(name)s, %(version)s, %(input)s)
on conflict (id) do nothing
returning id;

-- name: get_workflow
select id, name, version, input, status, epoch, owner, lease_expires_at, takeovers,
       available_at, waiting, cancel_requested_at, result, error, parent_id, continued_from,
       forked_from, created_at, updated_at
  from ilr.workflows where id = %(id)s;

-- name: list_workflows
select id, name, version, status, epoch, owner, available_at, created_at, updated_at
  from ilr.workflows
 where (%(status)s::text is null or status = %(status)s)
   and (%(name)s::text is null or name = %(name)s)
   and (%(version)s::text is null or version = %(version)s)
 order by created_at, id
 limit %(limit)s;

-- name: claim_history
select workflow_id, epoch, owner, version, claimed_at, prev_status, prev_lease_expires_at
  from ilr.claims where workflow_id = %(wf)s order by epoch;

-- name: notify_ready
select pg_notify('ilr_ready', %(id)s);

-- name: db_now
select now() as now, clock_timestamp() as clock;
