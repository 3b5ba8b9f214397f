-- Separation of duties (issue: least-privilege roles). Group roles, no login; `interlock roles`
-- applies this file (idempotent) and can create login users that are members of one of them.
--
--   ilr_worker    runs workflow code: claims, steps, journal appends, effect state. It can read
--                 grants but never write them, and cannot send signals (approvals) or cancel:
--                 an agent's worker must never be able to grant itself authority.
--   ilr_operator  people and their tools: start, approve, revoke, cancel, reconcile, fork.
--   ilr_auditor   read only.
--
-- Steps and journal rows are append-only for everyone (triggers in schema.sql).

do $$ begin
  if not exists (select 1 from pg_roles where rolname = 'ilr_worker') then create role ilr_worker nologin; end if;
  if not exists (select 1 from pg_roles where rolname = 'ilr_operator') then create role ilr_operator nologin; end if;
  if not exists (select 1 from pg_roles where rolname = 'ilr_auditor') then create role ilr_auditor nologin; end if;
end $$;

revoke all on all tables in schema ilr from ilr_worker, ilr_operator, ilr_auditor;
revoke all on all functions in schema ilr from public;
grant usage on schema ilr to ilr_worker, ilr_operator, ilr_auditor;

-- auditor: everything, read only; of the console's operators only who exists (no password
-- hashes), and no sessions
grant select on all tables in schema ilr to ilr_auditor;
revoke select on ilr.operators, ilr.operator_sessions from ilr_auditor;
grant select (name, created_at, created_by, disabled_at, disabled_by) on ilr.operators
  to ilr_auditor;

-- worker
grant select on all tables in schema ilr to ilr_worker;
revoke select on ilr.operators, ilr.operator_sessions, ilr.operator_audit from ilr_worker;
grant insert on ilr.workflows to ilr_worker;                      -- children, successors
grant update (status, epoch, owner, lease_expires_at, takeovers, available_at, waiting, result,
              error, updated_at) on ilr.workflows to ilr_worker;  -- claims, fences; never cancel
grant insert on ilr.claims, ilr.steps, ilr.journal, ilr.llm_calls to ilr_worker;
grant insert on ilr.effects to ilr_worker;
grant update (state, grant_id, dispatch_workflow_id, dispatch_epoch, first_dispatched_at,
              send_deadline, settle_margin, sends, late_result) on ilr.effects to ilr_worker;
grant insert on ilr.deployments to ilr_worker;
grant update (code_sha256) on ilr.deployments to ilr_worker;     -- --allow-code-change
grant update (input_schema) on ilr.deployments to ilr_worker;    -- its input type's description
grant update (consumed_seq) on ilr.signals to ilr_worker;        -- the mailbox check
grant insert, update on ilr.breakers to ilr_worker;              -- counting failures
grant update (next_fire_at, last_tick, last_workflow_id, buffered_tick, missed_ticks, updated_at)
  on ilr.schedules to ilr_worker;                                -- firing schedules, never
grant insert, update on ilr.schedule_fires to ilr_worker;        -- making or pausing one
grant insert, update on ilr.step_timers to ilr_worker;           -- timed steps' attempt starts
grant usage on all sequences in schema ilr to ilr_worker;
grant execute on function ilr.lock_grant_for_share(text), ilr.signal_parent(text, jsonb),
  ilr.append_only(), ilr.effects_guard() to ilr_worker;
grant execute on function ilr.end_workflow_grants(text, text) to ilr_worker;  -- a finish ends its grants
grant update (started_at) on ilr.workflows to ilr_worker;         -- a first claim (queues' rate window)
grant execute on function ilr.lock_workflow_name(text), ilr.resolve_awaiting(text),
  ilr.queue_slot_freed() to ilr_worker, ilr_operator;             -- registering resolves awaiting runs
grant execute on function ilr.workflow_ended() to ilr_worker, ilr_operator;  -- ends heard by result()
grant update (awaited) on ilr.workflows to ilr_worker;            -- a result() waited on in a worker

-- operator
grant select on all tables in schema ilr to ilr_operator;
grant insert, update on ilr.workflows, ilr.grants, ilr.signals to ilr_operator;
grant insert on ilr.steps to ilr_operator;                          -- rt.fork copies a prefix
grant update (reconciled) on ilr.effects to ilr_operator;
grant update on ilr.breakers to ilr_operator;                      -- interlock breaker reset
grant insert, update, delete on ilr.schedules, ilr.schedule_fires to ilr_operator;  -- schedules
grant insert, update, delete on ilr.queues to ilr_operator;       -- interlock queue set
grant insert, update (input_schema) on ilr.deployments to ilr_operator;  -- rt.register
-- the console: reads operators (to check a password), keeps sessions, writes the audit; adding
-- or disabling an operator is for the schema owner (`interlock operator`)
grant insert, update on ilr.operator_sessions to ilr_operator;
grant insert on ilr.operator_audit to ilr_operator;
grant usage on all sequences in schema ilr to ilr_operator;
grant execute on function ilr.lock_grant_for_share(text), ilr.signal_parent(text, jsonb),
  ilr.append_only(), ilr.effects_guard() to ilr_operator;
