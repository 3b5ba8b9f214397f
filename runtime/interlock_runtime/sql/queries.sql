-- Named queries, loaded by name with db.query("name"). Every value is a parameter.
-- Each block starts with a `-- name: <name>` line; the comment lines after it say why.

-- name: fence
-- The first statement of every worker write (docs/design.md#fence). It matches only while the claim's
-- epoch is current and the lease has not expired, extends the lease, and takes the row lock
-- that serializes this write against any claim, signal or cancel.
update ilr.workflows
   set lease_expires_at = now() + make_interval(secs => %(ttl)s), updated_at = now()
 where id = %(wf)s and epoch = %(epoch)s and status = 'running' and lease_expires_at > now()
returning cancel_requested_at, now() as now, lease_expires_at;

-- name: heartbeat
-- One statement renews every run a worker holds (docs/design.md#claims, batched). One row per run
-- asked about: `renewed`, or why not. `ended`: the row is no longer running under this epoch
-- because the run itself ended it (completed, suspended, ...) between the worker's snapshot of its
-- runs and this statement, which is not a fence; otherwise a run not renewed was fenced (its
-- epoch moved on or its lease expired). `held` locks the rows first, in id order, for `ended`: a
-- locking read waits for a write in flight and returns the row as committed, where a plain read
-- keeps the statement's older snapshot and calls a run that ended meanwhile fenced. The renewal
-- itself tests the row as committed either way (an update rechecks its conditions after a wait).
with asked as (
  select * from unnest(%(ids)s::text[], %(epochs)s::bigint[]) as h(id, epoch)
), held as (
  select w.id, w.epoch, w.status
    from ilr.workflows w
   where w.id in (select id from asked)
   order by w.id
     for no key update
), renewed as (
  update ilr.workflows w
     set lease_expires_at = now() + make_interval(secs => %(ttl)s), updated_at = now()
    from asked h
   where w.id = h.id and w.epoch = h.epoch and w.status = 'running' and w.lease_expires_at > now()
  returning w.id, w.cancel_requested_at
)
select h.id, r.id is not null as renewed, r.cancel_requested_at,
       r.id is null and l.epoch = h.epoch and l.status <> 'running' as ended
  from asked h
  left join renewed r on r.id = h.id
  left join held l on l.id = h.id;

-- name: claim
-- Claim due work (docs/design.md#claims): pending or sleeping rows whose time has come, and running rows
-- whose lease expired (a takeover). SKIP LOCKED lets workers claim side by side. The claim
-- history row is written by the same statement, with the lease the previous holder had.
-- Queues (docs/queues.md): only the queues the worker serves (null: all), never a limited one
-- (those are claimed by claim_limited under their locks); lower priority numbers first.
with due as (
  select id, status as prev_status, lease_expires_at as prev_lease_expires_at
    from ilr.workflows
   where ((status in ('pending','sleeping') and available_at <= now())
       or (status = 'running' and lease_expires_at <= now()))
     and (name, version) in (select * from unnest(%(names)s::text[], %(versions)s::text[]))
     and (%(queues)s::text[] is null or queue = any(%(queues)s))
     and queue not in (select name from ilr.queues where limited)
   order by priority, available_at
   limit %(limit)s
   for update skip locked),
claimed as (
  update ilr.workflows w
     set status = 'running', epoch = w.epoch + 1, owner = %(owner)s,
         takeovers = w.takeovers + (due.prev_status = 'running')::int,
         started_at = coalesce(w.started_at, now()),
         lease_expires_at = now() + make_interval(secs => %(ttl)s), updated_at = now()
    from due
   where w.id = due.id
  returning w.id, w.name, w.version, w.input, w.epoch, w.waiting, w.takeovers,
            w.cancel_requested_at, w.parent_id, w.traceparent, now() as claimed_now, due.prev_status,
            due.prev_lease_expires_at, w.execution_deadline,
            -- a fresh workflow has no history: the worker skips reading it
            exists (select 1 from ilr.steps s where s.workflow_id = w.id) as has_steps),
history as (
  insert into ilr.claims (workflow_id, epoch, owner, version, claimed_at, prev_status,
                          prev_lease_expires_at)
  select id, epoch, %(owner)s, version, now(), prev_status, prev_lease_expires_at from claimed)
select * from claimed;

-- name: next_due
-- Seconds until the earliest timer, backoff or lease expiry among the pairs this worker serves,
-- so it wakes on time instead of waiting for the next poll (only in the queues it serves).
-- `limited`: the served queues that have limits now (queue_limited_served), read here before
-- each wait so the claim after the wake-up needs no round trip of its own for them.
select extract(epoch from least(
         (select min(available_at) from ilr.workflows
           where status in ('pending','sleeping')
             and (name, version) in (select * from unnest(%(names)s::text[], %(versions)s::text[]))
             and (%(queues)s::text[] is null or queue = any(%(queues)s))),
         (select min(lease_expires_at) from ilr.workflows
           where status = 'running'
             and (name, version) in (select * from unnest(%(names)s::text[], %(versions)s::text[]))
             and (%(queues)s::text[] is null or queue = any(%(queues)s)))
       ) - now())::float8 as seconds,
       array(select name from ilr.queues
              where limited and (%(queues)s::text[] is null or name = any(%(queues)s))
              order by name) as limited;

-- name: load_steps
select seq, name, kind, fingerprint, output, error, epoch, created_at
  from ilr.steps where workflow_id = %(wf)s order by seq;

-- name: insert_step
-- A recorded step resets the takeover count (docs/design.md#durable-replay: a crash loop spends retries only
-- while no step gets recorded) and clears the waiting state it satisfied. Returns the output
-- as stored, so the first run sees exactly what a replay will (jsonb normalizes numbers).
with step as (
  insert into ilr.steps (workflow_id, seq, name, kind, fingerprint, output, error, epoch)
  values (%(wf)s, %(seq)s, %(name)s, %(kind)s, %(fingerprint)s, %(output)s, %(error)s, %(epoch)s)
  returning workflow_id, output),
touched as (
  update ilr.workflows set takeovers = 0, waiting = null
   where id = (select workflow_id from step))
select output from step;

-- name: record_step_fenced
-- One fenced step record in one statement, so one round trip where the general form takes
-- four (BEGIN, fence, insert_step, COMMIT): the fence's update, with its condition (this
-- claim's epoch, status running, a live lease by the database clock) and its lease extension,
-- also does what insert_step does to the workflow row (takeovers reset, waiting cleared; one
-- statement may not update a row twice), and the step row hangs off the row it returns. Claim
-- gone: no row, nothing written. Returns the fence's row and the output as stored.
with fence as (
  update ilr.workflows
     set lease_expires_at = now() + make_interval(secs => %(ttl)s), updated_at = now(),
         takeovers = 0, waiting = null
   where id = %(wf)s and epoch = %(epoch)s and status = 'running'
     and lease_expires_at > now()
  returning id, cancel_requested_at, now() as now, lease_expires_at),
step as (
  insert into ilr.steps (workflow_id, seq, name, kind, fingerprint, output, error, epoch)
  select id, %(seq)s, %(name)s, %(kind)s, %(fingerprint)s, %(output)s, %(error)s, %(epoch)s
    from fence
  returning output)
select cancel_requested_at, now, lease_expires_at, (select output from step) as output
  from fence;

-- name: as_stored
-- A value as a jsonb column returns it (key order, number format), for a deferred step record.
select %(value)s::jsonb as value;

-- name: suspend_until
-- Release the claim and wait (docs/design.md#suspend, B5): status pending for a retry backoff, sleeping for
-- a timer or a signal; available_at is when a worker may claim it again ('infinity' while
-- waiting for a signal with no timeout). Runs inside the fenced transaction of the caller.
update ilr.workflows
   set status = %(status)s, owner = null, lease_expires_at = null, waiting = %(waiting)s,
       available_at = %(until)s::timestamptz, takeovers = 0, updated_at = now()
 where id = %(wf)s;

-- name: take_signal
-- The mailbox check of the suspend transaction: consume the oldest unconsumed signal of this
-- name, at most once (unique (workflow_id, consumed_seq)).
update ilr.signals s
   set consumed_seq = %(seq)s
  from (select id from ilr.signals
         where workflow_id = %(wf)s and name = %(name)s and consumed_seq is null
         order by id limit 1 for update) oldest
 where s.id = oldest.id
returning s.id, s.payload;

-- name: lock_workflow
-- Signals, cancels and approvals lock the workflow row first (lock order: workflow, effect,
-- grant), which serializes them against claims and fenced writes.
select id, status, name, version from ilr.workflows where id = %(id)s for update;

-- name: insert_signal
insert into ilr.signals (workflow_id, name, payload, sender)
values (%(wf)s, %(name)s, %(payload)s, %(sender)s)
returning id;

-- name: wake
-- Wake a non-terminal workflow now (docs/design.md#suspend). Setting available_at on a running workflow is
-- deliberate: its suspend transaction's mailbox check will see the new row.
update ilr.workflows
   set available_at = now(),
       status = case when status = 'sleeping' then 'pending' else status end,
       updated_at = now()
 where id = %(id)s;

-- name: request_cancel
update ilr.workflows
   set cancel_requested_at = coalesce(cancel_requested_at, now()),
       cancel_requested_by = coalesce(cancel_requested_by, %(by)s)
 where id = %(id)s
returning cancel_requested_at;

-- name: log_llm_call
-- Autocommit, before the model call: a crash after the call leaves this row and no decide
-- step, which is how discarded calls are counted.
insert into ilr.llm_calls (workflow_id, seq, epoch, request_hash)
values (%(wf)s, %(seq)s, %(epoch)s, %(request_hash)s);

-- name: insert_child
-- A child runs on its parent's queue at its parent's priority unless ctx.child names others
-- (as a Temporal child takes its parent's task queue: the parent's workers serve that queue),
-- and continues its parent's trace: its claims are children of the span that started it
-- (the parent's run), else of the parent's stored context. No queue key, no dedup id: those
-- belong to the parent.
insert into ilr.workflows (id, name, version, input, parent_id, queue, priority, traceparent)
select %(id)s, %(name)s, %(version)s, %(input)s, p.id, coalesce(%(queue)s, p.queue),
       coalesce(%(priority)s, p.priority), coalesce(%(traceparent)s, p.traceparent)
  from ilr.workflows p where p.id = %(parent)s;

-- name: insert_successor
-- The next run of the same workflow: its queue, priority, key and trace context.
insert into ilr.workflows (id, name, version, input, parent_id, continued_from, queue, priority,
                           queue_key, traceparent)
select %(id)s, name, version, %(input)s, parent_id, id, queue, priority, queue_key, traceparent
  from ilr.workflows where id = %(from)s;

-- name: finish
-- A terminal outcome (completed, failed, cancelled, stuck) written under the fence.
update ilr.workflows
   set status = %(status)s, result = %(result)s, error = %(error)s, owner = null,
       lease_expires_at = null, waiting = null, updated_at = now()
 where id = %(wf)s;

-- name: finish_fenced
-- The completion in one statement, so one round trip and one transaction (issue 23): the
-- fence's condition (this claim's epoch, status running, a live lease by the database clock)
-- is the WHERE of the outcome's own update, and every other write of the statement hangs off
-- its row: the step record the run deferred (none when seq is null; it resets takeovers as
-- insert_step does) and the end of the run's grants (ends_grants). Claim gone: no row, nothing
-- written. The worker falls back to fence + finish for anything else (a parent to signal,
-- more than one deferred record).
with outcome as (
  update ilr.workflows
     set status = %(status)s, result = %(result)s, error = %(error)s, owner = null,
         lease_expires_at = null, waiting = null, updated_at = now(),
         takeovers = case when %(seq)s::int is null then takeovers else 0 end
   where id = %(wf)s and status = 'running' and epoch = %(epoch)s
     and lease_expires_at > now()
  returning id),
step as (
  insert into ilr.steps (workflow_id, seq, name, kind, fingerprint, output, error, epoch)
  select id, %(seq)s, %(name)s, %(kind)s, %(fingerprint)s, %(output)s, %(step_error)s, %(epoch)s
    from outcome where %(seq)s::int is not null
  returning seq),
grants as (
  select ilr.end_workflow_grants(id, 'workflow finished') as ended
    from outcome where %(ends_grants)s)
select id, (select count(*) from step) as steps, (select count(*) from grants) as grants
  from outcome;

-- name: release
-- A worker stopping on SIGTERM hands its run back at once, so a peer need not wait for the
-- lease to expire.
update ilr.workflows
   set status = 'pending', owner = null, lease_expires_at = null, available_at = now(),
       updated_at = now()
 where id = %(wf)s;

-- name: mark_stuck_unfenced
-- A swallowed Suspend (docs/design.md#durable-replay): the suspend transaction already released the row, so the
-- fence cannot match; the write is guarded by the unchanged epoch instead (docs/design.md#refinements).
update ilr.workflows
   set status = 'stuck', error = %(error)s, owner = null, lease_expires_at = null,
       updated_at = now()
 where id = %(wf)s and epoch = %(epoch)s and status in ('sleeping','pending');

-- name: register_deployment
insert into ilr.deployments (name, version, code_sha256, input_schema)
values (%(name)s, %(version)s, %(sha)s, %(input_schema)s)
on conflict (name, version) do nothing;

-- name: get_deployment
select name, version, code_sha256, created_at, retired_at, input_schema
  from ilr.deployments where name = %(name)s and version = %(version)s;

-- name: set_deployment_input_schema
-- The description of the workflow's declared input type (docs/typed.md#checked-at-the-door), as
-- the registering worker derives it, when it differs from the stored one (a worker's restart
-- writes nothing).
update ilr.deployments set input_schema = %(input_schema)s
 where name = %(name)s and version = %(version)s
   and input_schema is distinct from %(input_schema)s::jsonb;

-- name: deployment_input_schema
-- What a start by name checks its input against, read in the start's own transaction.
-- Its md5 is what a later start sends with the one-statement start (start_served).
select input_schema, md5(input_schema::text) as input_schema_md5
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
       available_at, waiting, cancel_requested_at, cancel_requested_by, result, error, parent_id,
       continued_from,
       forked_from, created_at, updated_at, queue, priority, queue_key, started_at
  from ilr.workflows where id = %(id)s;

-- name: workflow_outcome
-- result()'s look when it does not mark: only what it returns (not the input, which may be
-- large and would be decoded at every look).
select status, result, error from ilr.workflows where id = %(id)s;

-- name: await_end
-- result()'s look, marking a run awaited so that its end is announced on ilr_ended (migration
-- 0008). A running row is marked: its worker's writes wait out the mark's row lock (one
-- commit). So is a sleeping row not yet due (a timer ahead, a signal or an approval awaited
-- for hours): no claim is after it now, and its waiter need not poll it. A pending or due row
-- is not: a claim (FOR UPDATE SKIP LOCKED) would pass over it while the mark held it, and one
-- is about to come. The select reads the row as it was when the statement began; the update
-- re-reads it under its lock. `heard`: an end from now on will be announced (this statement
-- marked the row, or it was marked before).
with marked as (
  update ilr.workflows set awaited = true
   where id = %(id)s and not awaited
     and (status = 'running' or (status = 'sleeping' and available_at > now()))
  returning id)
select status, result, error, awaited or exists (select 1 from marked) as heard
  from ilr.workflows where id = %(id)s;

-- name: migrate
-- A workflow changes version only while no worker runs it.
update ilr.workflows set version = %(version)s, updated_at = now()
 where id = %(id)s and status in ('pending','sleeping')
returning id;

-- name: drain_report
select name, version, status, count(*) as workflows
  from ilr.workflows group by name, version, status order by name, version, status;

-- name: insert_fork
-- A run still awaiting a worker has no version and no steps: nothing to fork (fork() says so).
insert into ilr.workflows (id, name, version, input, forked_from, queue, priority, queue_key)
select %(new_id)s, name, version, input, id, queue, priority, queue_key
  from ilr.workflows where id = %(id)s and status <> 'awaiting_worker';

-- name: copy_steps_for_fork
-- The prefix below at_seq, copied as written (epoch 0: written by the fork, not by a claim).
insert into ilr.steps (workflow_id, seq, name, kind, fingerprint, output, error, epoch)
select %(new_id)s, seq, name, kind, fingerprint, output, error, 0
  from ilr.steps where workflow_id = %(id)s and seq < %(at_seq)s;

-- name: list_workflows
select id, name, version, status, epoch, owner, available_at, created_at, updated_at, queue
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

-- ============================================================================================
-- Gated effects (docs/design.md#gated-effects). Lock order everywhere: workflow row, then effect row, then grant.
-- ============================================================================================

-- name: get_effect
select effect_id, workflow_id, target, tier, payload, payload_hash, state, grant_id,
       dispatch_workflow_id, dispatch_epoch, first_dispatched_at, send_deadline, settle_margin,
       sends, late_result, reconciled, now() as now
  from ilr.effects where effect_id = %(eid)s;

-- name: insert_effect
insert into ilr.effects (effect_id, workflow_id, target, tier, payload, payload_hash, action)
values (%(eid)s, %(wf)s, %(target)s, %(tier)s, %(payload)s, %(payload_hash)s, %(action)s)
on conflict (effect_id) do nothing;

-- name: lock_effect
select effect_id, workflow_id, target, tier, payload, payload_hash, state, grant_id,
       dispatch_workflow_id, dispatch_epoch, first_dispatched_at, send_deadline, settle_margin,
       sends, late_result
  from ilr.effects where effect_id = %(eid)s for update;

-- name: journal_entries
select body from ilr.journal where effect_id = %(eid)s order by seq;

-- name: all_journal_entries
select body from ilr.journal order by seq;

-- name: append_entry
insert into ilr.journal (effect_id, kind, body, prev, hash)
values (%(eid)s, %(kind)s, %(body)s, %(prev)s, %(hash)s);

-- name: lock_grant_for_share
-- FOR SHARE: a concurrent revoke (UPDATE) waits for this transaction, and this one waits for
-- a revoke in progress, so authority is linearized with the dispatch (RevokeLinearizable).
-- Through a SECURITY DEFINER function so the worker role needs no write privilege on grants.
select * from ilr.lock_grant_for_share(%(grant)s);

-- name: get_grant
select id, principal, action, constraints, payload_hash, facts_seen, granted_by, expires_at,
       revoked_at, created_at,
       (revoked_at is null and (expires_at is null or expires_at > now())) as live
  from ilr.grants where id = %(grant)s;

-- name: mark_dispatched
update ilr.effects
   set state = 'dispatched', grant_id = %(grant)s, dispatch_workflow_id = %(wf)s,
       dispatch_epoch = %(epoch)s, first_dispatched_at = coalesce(first_dispatched_at, now()),
       send_deadline = now() + make_interval(secs => %(send_timeout)s),
       settle_margin = make_interval(secs => %(settle_margin)s), sends = sends + 1
 where effect_id = %(eid)s;

-- name: mark_resend
-- The durable record of a resend attempt, committed before any byte goes out: the dispatch
-- pair moves to this claim and the deadline restarts. No second DISPATCHED entry is written.
update ilr.effects
   set dispatch_workflow_id = %(wf)s, dispatch_epoch = %(epoch)s,
       send_deadline = now() + make_interval(secs => %(send_timeout)s), sends = sends + 1
 where effect_id = %(eid)s;

-- name: set_effect_state
update ilr.effects set state = %(state)s where effect_id = %(eid)s;

-- name: set_late_result
update ilr.effects set late_result = %(late)s where effect_id = %(eid)s;

-- name: insert_grant
insert into ilr.grants (id, principal, action, constraints, payload_hash, facts_seen, granted_by,
                        expires_at)
values (%(id)s, %(principal)s, %(action)s, %(constraints)s, %(payload_hash)s, %(facts_seen)s,
        %(by)s, case when %(expires_in)s::float8 is null then null
                     else now() + make_interval(secs => %(expires_in)s::float8) end);

-- name: revoke_grant
-- Waits for every T_dispatch / T_resolve holding the grant FOR SHARE; keeps the first revoke.
update ilr.grants
   set revoked_at = coalesce(revoked_at, now()), revoked_by = coalesce(revoked_by, %(by)s)
 where id = %(grant)s
returning revoked_at;

-- name: effects_still_open_under_grant
-- After the revoke commits nothing new can dispatch under the grant; these may still land.
select effect_id from ilr.effects
 where grant_id = %(grant)s and state = 'dispatched' order by effect_id;

-- name: ambiguous_effects
select effect_id, workflow_id, target, tier, payload, sends, first_dispatched_at, send_deadline,
       reconciled
  from ilr.effects where state = 'ambiguous' order by first_dispatched_at, effect_id;

-- name: reconcile_effect
update ilr.effects set reconciled = %(reconciled)s
 where effect_id = %(eid)s and state = 'ambiguous'
returning effect_id;

-- name: effects_of_workflow
select effect_id, action, target, tier, state, grant_id, sends, dispatch_epoch, send_deadline,
       late_result, reconciled
  from ilr.effects where workflow_id = %(wf)s or dispatch_workflow_id = %(wf)s
 order by effect_id;

-- name: orphaned_effects
-- Effects left dispatched by a workflow that will never run again.
-- Only past send_deadline + settle_margin: before that nobody may query or resend.
select e.effect_id, e.target, w.id as workflow_id, w.status, w.epoch
  from ilr.effects e join ilr.workflows w on w.id = e.dispatch_workflow_id
 where e.state = 'dispatched' and w.status in ('stuck','failed','cancelled','timed_out')
   and now() > e.send_deadline + e.settle_margin
 order by e.effect_id;

-- name: orphan_claim
-- The synthetic claim of rt.recover_orphans: an epoch bump with owner $recovery, recorded in
-- the claim history like any other claim.
with prev as (
  select id, status from ilr.workflows
   where id = %(wf)s and status in ('stuck','failed','cancelled','timed_out') for update),
claimed as (
  update ilr.workflows w
     set status = 'running', epoch = w.epoch + 1, owner = '$recovery',
         lease_expires_at = now() + make_interval(secs => %(ttl)s), updated_at = now()
    from prev where w.id = prev.id
  returning w.id, w.name, w.version, w.input, w.epoch, prev.status as prev_status),
history as (
  insert into ilr.claims (workflow_id, epoch, owner, version, claimed_at, prev_status)
  select id, epoch, '$recovery', version, now(), prev_status from claimed)
select * from claimed;

-- name: orphan_restore
update ilr.workflows
   set status = %(status)s, owner = null, lease_expires_at = null, updated_at = now()
 where id = %(wf)s and epoch = %(epoch)s;

-- name: signal_parent
select ilr.signal_parent(%(child)s, %(done)s) as signal_id;

-- ============================================================================================
-- The staleness watchdog (`interlock watchdog`): what should have run and did not.
-- ============================================================================================

-- name: overdue_workflows
-- An awaiting_worker run is due from its available_at too: past it, no deployment serves the
-- name (or the wanted_version) it was started for.
select id, name, version, wanted_version, status, available_at, lease_expires_at, owner,
       extract(epoch from now() - case when status = 'running' then lease_expires_at
                                       else available_at end)::float8 as overdue_s
  from ilr.workflows
 where (status in ('awaiting_worker','pending','sleeping')
        and available_at < now() - make_interval(secs => %(threshold)s))
    or (status = 'running' and lease_expires_at < now() - make_interval(secs => %(threshold)s))
 order by overdue_s desc;

-- name: overdue_effects
select effect_id, workflow_id, target, tier, dispatch_workflow_id, dispatch_epoch,
       send_deadline, settle_margin,
       extract(epoch from now() - (send_deadline + settle_margin))::float8 as overdue_s
  from ilr.effects
 where state = 'dispatched'
   and send_deadline + settle_margin < now() - make_interval(secs => %(threshold)s)
 order by overdue_s desc;

-- name: unreconciled_ambiguous
select effect_id, workflow_id, target, tier, first_dispatched_at
  from ilr.effects where state = 'ambiguous' and reconciled is null
 order by first_dispatched_at;

-- ============================================================================================
-- Circuit breakers
-- ============================================================================================

-- name: breaker_state
select target, threshold, cooldown, consecutive_failures, opened_at,
       (opened_at is not null and now() < opened_at + cooldown) as open
  from ilr.breakers where target = %(target)s;

-- name: breaker_failure
-- One more consecutive failure; at the threshold the breaker opens (and each further failure
-- restarts the cool-down, so a half-open probe that fails closes the door again).
insert into ilr.breakers (target, threshold, cooldown, consecutive_failures, opened_at)
values (%(target)s, %(threshold)s, make_interval(secs => %(cooldown)s), 1,
        case when %(threshold)s <= 1 then now() end)
on conflict (target) do update
   set threshold = excluded.threshold, cooldown = excluded.cooldown,
       consecutive_failures = ilr.breakers.consecutive_failures + 1,
       opened_at = case when ilr.breakers.consecutive_failures + 1 >= excluded.threshold
                        then now() else ilr.breakers.opened_at end,
       updated_at = now()
returning consecutive_failures, opened_at;

-- name: breaker_success
update ilr.breakers set consecutive_failures = 0, opened_at = null, updated_at = now()
 where target = %(target)s and (consecutive_failures > 0 or opened_at is not null);

-- name: breaker_reset
update ilr.breakers set consecutive_failures = 0, opened_at = null, updated_at = now()
 where target = %(target)s
returning target;

-- name: breakers
select target, threshold, cooldown, consecutive_failures, opened_at,
       (opened_at is not null and now() < opened_at + cooldown) as open
  from ilr.breakers order by target;

-- ============================================================================================
-- Workflow-bound grants end with their workflow (migration 0003).
-- ============================================================================================

-- name: end_workflow_grants
-- In the transaction that completes, fails, cancels or continues the workflow: its live grants
-- (principal workflow:<id>, i.e. its approvals) are revoked, reason 'workflow finished'.
select ilr.end_workflow_grants(%(wf)s, 'workflow finished') as ended;

-- ============================================================================================
-- Operators of the console: accounts, sessions, audit (console/auth.py, cli/operator.py).
-- ============================================================================================

-- name: operator_insert
insert into ilr.operators (name, password_hash) values (%(name)s, %(hash)s)
on conflict (name) do nothing
returning name;

-- name: operator_get
select name, password_hash, created_at, disabled_at from ilr.operators where name = %(name)s;

-- name: operator_list
select o.name, o.created_at, o.created_by, o.disabled_at, o.disabled_by,
       (select count(*) from ilr.operator_sessions s
         where s.operator = o.name and s.ended_at is null and s.expires_at > now()) as sessions,
       (select max(a.at) from ilr.operator_audit a
         where a.operator = o.name and a.event = 'login') as last_login
  from ilr.operators o order by o.name;

-- name: operator_disable
update ilr.operators
   set disabled_at = coalesce(disabled_at, now()), disabled_by = coalesce(disabled_by, %(by)s)
 where name = %(name)s
returning disabled_at;

-- name: operator_end_sessions
-- A disabled operator's live sessions end in the transaction that disables them (expired ones
-- stay as they ended: expired).
update ilr.operator_sessions set ended_at = now(), ended_reason = %(reason)s
 where operator = %(name)s and ended_at is null and expires_at > now()
returning token_hash;

-- name: session_insert
-- Only for an operator not disabled: a disable racing the login leaves no session behind.
insert into ilr.operator_sessions (token_hash, operator, csrf, expires_at)
select %(token_hash)s, name, %(csrf)s, now() + make_interval(secs => %(ttl)s::float8)
  from ilr.operators where name = %(operator)s and disabled_at is null
returning expires_at;

-- name: session_get
-- A live session: not ended, not expired by the database clock, its operator not disabled.
select s.operator, s.csrf, s.expires_at
  from ilr.operator_sessions s join ilr.operators o on o.name = s.operator
 where s.token_hash = %(token_hash)s and s.ended_at is null and s.expires_at > now()
   and o.disabled_at is null;

-- name: session_end
update ilr.operator_sessions set ended_at = now(), ended_reason = %(reason)s
 where token_hash = %(token_hash)s and ended_at is null
returning operator;

-- name: audit_insert
insert into ilr.operator_audit (event, operator, subject, detail)
values (%(event)s, %(operator)s, %(subject)s, %(detail)s)
returning id, at;

-- name: audit_list
select id, at, event, operator, subject, detail
  from ilr.operator_audit order by id desc limit %(limit)s;

-- ============================================================================================
-- The console's reads (console/store.py).
-- ============================================================================================

-- name: console_inbox
-- Waiting for approval and not yet approved: an approve signal not consumed yet means a
-- person approved and the workflow has not picked it up (the page shows it as approved).
select w.id from ilr.workflows w
 where w.status in ('pending', 'running', 'sleeping') and w.waiting->>'signal' = 'approve'
   and not exists (select 1 from ilr.signals s
                    where s.workflow_id = w.id and s.name = 'approve' and s.consumed_seq is null)
 order by w.created_at, w.id;

-- name: console_signals
select id, name, payload, sender, consumed_seq, created_at
  from ilr.signals where workflow_id = %(wf)s order by id;

-- name: console_effects
select effect_id, workflow_id, target, tier, state, grant_id, sends, first_dispatched_at,
       send_deadline, settle_margin, reconciled
  from ilr.effects
 order by first_dispatched_at desc nulls last, effect_id
 limit %(limit)s;

-- name: console_journal
select seq, kind, body from ilr.journal where effect_id = %(eid)s order by seq;

-- name: console_grants
select g.id, g.principal, g.action, g.constraints, g.payload_hash, g.facts_seen, g.granted_by,
       g.expires_at, g.revoked_at, g.revoked_by, g.revoke_reason, g.created_at,
       (g.revoked_at is null and (g.expires_at is null or g.expires_at > now())) as live,
       (select count(*) from ilr.effects e where e.grant_id = g.id) as effects,
       (select count(*) from ilr.effects e
         where e.grant_id = g.id and e.state = 'dispatched') as in_flight
  from ilr.grants g
 order by g.created_at desc, g.id
 limit %(limit)s;

-- name: console_grant
select id, principal, action, constraints, payload_hash, facts_seen, granted_by, expires_at,
       revoked_at, revoked_by, revoke_reason, created_at,
       (revoked_at is null and (expires_at is null or expires_at > now())) as live
  from ilr.grants where id = %(grant)s;

-- name: console_grant_effects
select effect_id, workflow_id, state, tier, sends, send_deadline
  from ilr.effects where grant_id = %(grant)s order by effect_id;

-- name: console_whoami
select current_user as u;

-- name: console_pending_approval
-- An approval given and not yet taken by the workflow (an approve signal not consumed).
select id, sender from ilr.signals
 where workflow_id = %(wf)s and name = 'approve' and consumed_seq is null
 order by id limit 1;

-- name: durability_settings
-- durability.check: this session's values of the settings that keep an acknowledged commit.
select current_setting('synchronous_commit') as synchronous_commit,
       current_setting('synchronous_standby_names') as synchronous_standby_names,
       current_setting('fsync') as fsync;
