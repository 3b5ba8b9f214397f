-- Migration 0003: operator identity for the console (issue 19).
--
-- The console used to share one token and record whatever name was typed. Now each person
-- has an operator row with a slow salted password hash (never the password), logs in for a
-- session whose token is stored only as its sha256 (never the token), and every login, refused
-- login, approval and revoke is written to an append-only audit table.
--
-- A grant bound to one workflow (an approval: principal 'workflow:<id>') ends with that
-- workflow: ilr.end_workflow_grants revokes it, reason 'workflow finished', in the transaction
-- that completes, fails, cancels or continues the workflow. Grants of workflows that finished
-- before this migration are left as they were (a migration keeps every row).

create table ilr.operators (
  name text primary key check (name ~ '^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$'),
  password_hash text not null,              -- scrypt$n$r$p$salt$hash (console/auth.py)
  created_at timestamptz not null default now(),
  created_by text not null default current_user,
  disabled_at timestamptz,                  -- set: no login, every session ended
  disabled_by text
);

create table ilr.operator_sessions (
  token_hash text primary key,              -- sha256 of the cookie's token, hex
  operator text not null references ilr.operators(name),
  csrf text not null,
  created_at timestamptz not null default now(),
  expires_at timestamptz not null,
  ended_at timestamptz,                     -- logged out, or the operator was disabled
  ended_reason text
);
create index operator_sessions_open on ilr.operator_sessions (operator) where ended_at is null;

create table ilr.operator_audit (
  id bigserial primary key,
  at timestamptz not null default now(),
  event text not null check (event in ('login', 'login_refused', 'logout', 'approve', 'reject',
                                       'revoke', 'reconcile', 'operator_added',
                                       'operator_disabled')),
  operator text not null,                   -- who acted (approve, revoke, ...), who logged in,
                                            -- the name given (login_refused), or the operator
                                            -- added or disabled (by: in detail)
  subject text,                             -- the workflow, grant or effect acted on
  detail jsonb
);
create trigger operator_audit_append_only before update or delete on ilr.operator_audit
  for each statement execute function ilr.append_only();

-- Why a grant was revoked, when the runtime revoked it ('workflow finished').
alter table ilr.grants add column revoke_reason text;
create index grants_by_principal on ilr.grants (principal) where revoked_at is null;

-- The worker finishes workflows but may never write grants (sql/roles.sql): this function does
-- exactly one thing, end the live grants bound to one workflow, and returns how many it ended.
create function ilr.end_workflow_grants(wf_id text, reason text) returns int
language sql security definer set search_path = pg_catalog, ilr as $$
  with ended as (
    update ilr.grants
       set revoked_at = now(), revoked_by = '$runtime', revoke_reason = reason
     where principal = 'workflow:' || wf_id and revoked_at is null
       and (expires_at is null or expires_at > now())
    returning 1)
  select count(*)::int from ended
$$;

-- Where the least-privilege roles exist (interlock roles), the same grants as sql/roles.sql:
-- the console (an ilr_operator login) reads operators, keeps sessions and writes the audit;
-- creating or disabling an operator needs the schema owner (`interlock operator`).
do $$
begin
  revoke all on function ilr.end_workflow_grants(text, text) from public;
  if exists (select 1 from pg_roles where rolname = 'ilr_worker') then
    grant execute on function ilr.end_workflow_grants(text, text) to ilr_worker;
    grant select on ilr.operators to ilr_operator;
    grant select, insert, update on ilr.operator_sessions to ilr_operator;
    grant select, insert on ilr.operator_audit to ilr_operator;
    grant usage on sequence ilr.operator_audit_id_seq to ilr_operator;
    grant select (name, created_at, created_by, disabled_at, disabled_by) on ilr.operators
      to ilr_auditor;
    grant select on ilr.operator_audit to ilr_auditor;
  end if;
end $$;
