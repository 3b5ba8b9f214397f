-- Migration 0001: the schema of the first release (spec section 4, plus the claim history).
--
-- A migration is never edited once released: the runtime records each applied file's sha256 in
-- ilr.schema_version and refuses a database whose history differs from its own files. A change
-- is a new numbered file (docs/operations.md, "Upgrading the schema").
--
-- Every time the protocol depends on is the database clock (now()), never a worker's clock.
-- The guards at the bottom make the database itself refuse what the protocol forbids:
-- a second step row or an edited one, a forked or edited journal, a second COMMITTED,
-- a changed payload binding, a terminal effect coming back to life.

create schema if not exists ilr;

-- A (name, version) pair a worker serves, with the sha256 of its module's source bytes.
create table if not exists ilr.deployments (
  name text not null,
  version text not null,
  code_sha256 text not null,
  created_at timestamptz not null default now(),
  retired_at timestamptz,
  primary key (name, version)
);

create table if not exists ilr.workflows (
  id text primary key,
  name text not null,
  version text not null,
  input jsonb not null,
  status text not null default 'pending' check (status in
    ('pending','running','sleeping','completed','failed','cancelled','stuck','continued')),
  epoch bigint not null default 0,          -- fencing token, +1 on every claim
  owner text,
  lease_expires_at timestamptz,
  takeovers int not null default 0,         -- claims that died since the last recorded step
  available_at timestamptz not null default now(),   -- 'infinity' while waiting with no timeout
  waiting jsonb,                            -- {seq, kind, until, signal, attempt}
  cancel_requested_at timestamptz,
  cancel_requested_by text,
  result jsonb,
  error jsonb,
  parent_id text,
  continued_from text,
  forked_from text,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  foreign key (name, version) references ilr.deployments
);
create index if not exists wf_due on ilr.workflows (available_at) where status in ('pending','sleeping');
create index if not exists wf_leased on ilr.workflows (lease_expires_at) where status = 'running';

-- Claim history, written by the claim statement itself (DESIGN B13). LeaseMutex and
-- TakeoverOnlyAfterExpiry are checked over it: prev_lease_expires_at is the lease the
-- previous holder had (heartbeats included) at the moment of this claim.
create table if not exists ilr.claims (
  workflow_id text not null references ilr.workflows(id),
  epoch bigint not null,
  owner text not null,
  version text not null,
  claimed_at timestamptz not null,
  prev_status text not null,
  prev_lease_expires_at timestamptz,
  primary key (workflow_id, epoch)
);

create table if not exists ilr.steps (
  workflow_id text not null references ilr.workflows(id),
  seq int not null,
  name text not null,
  kind text not null check (kind in ('step','decide','effect','sleep','signal','patch','child')),
  fingerprint text,                         -- effect: effect_id||':'||payload_hash; decide: request_hash
  output jsonb,
  error jsonb,
  epoch bigint not null,
  created_at timestamptz not null default now(),
  primary key (workflow_id, seq)
);

-- Written in autocommit BEFORE each model call, so discarded calls can be counted.
create table if not exists ilr.llm_calls (
  id bigserial primary key,
  workflow_id text not null,
  seq int not null,
  epoch bigint not null,
  request_hash text not null,
  started_at timestamptz not null default now()
);

create table if not exists ilr.signals (
  id bigserial primary key,
  workflow_id text not null references ilr.workflows(id),
  name text not null,
  payload jsonb not null,
  sender text,
  consumed_seq int,
  created_at timestamptz not null default now(),
  unique (workflow_id, consumed_seq)
);

-- Policy grants and human approvals.
create table if not exists ilr.grants (
  id text primary key,
  principal text not null,
  action text not null,
  max_cents bigint,                         -- null: no cap
  payload_hash text,                        -- set by an approval: only this exact payload
  facts_seen jsonb,                         -- set by an approval: the premises it authorizes
  granted_by text not null,
  expires_at timestamptz,
  revoked_at timestamptz,
  revoked_by text,
  created_at timestamptz not null default now()
);

create table if not exists ilr.effects (
  effect_id text primary key,
  workflow_id text not null references ilr.workflows(id),   -- first proposer
  target text not null,
  tier smallint not null check (tier in (1,2,3)),
  payload jsonb not null,
  payload_hash text not null,               -- bound at first proposal, immutable (trigger)
  state text not null default 'proposed' check (state in ('proposed','dispatched','committed','ambiguous')),
  grant_id text references ilr.grants(id),  -- grant of the current or last dispatch
  dispatch_workflow_id text,
  dispatch_epoch bigint,                    -- (dispatch_workflow_id, dispatch_epoch) may finish the send
  first_dispatched_at timestamptz,          -- tier-1 window age is measured from here
  send_deadline timestamptz,                -- no query or resend before send_deadline + settle_margin
  settle_margin interval,
  sends int not null default 0,             -- incremented in the transaction that authorizes a send
  late_result jsonb,
  reconciled jsonb                          -- human attestation for AMBIGUOUS; never journaled
);
create index if not exists effects_open on ilr.effects (send_deadline) where state = 'dispatched';
create index if not exists effects_by_grant on ilr.effects (grant_id) where state = 'dispatched';

create table if not exists ilr.journal (
  seq bigserial primary key,
  effect_id text not null references ilr.effects(effect_id),
  kind text not null,
  body text not null,                       -- the sealed entry, stored verbatim (never jsonb)
  prev text,
  hash text not null unique,
  unique nulls not distinct (effect_id, prev)
);
-- The kinds of vocabulary.EntryKind. Dropped and added again so that a database made before
-- migrations existed, whose list may lack AUDITED, learns it when upgraded.
alter table ilr.journal drop constraint if exists journal_kind_check;
alter table ilr.journal add constraint journal_kind_check check (kind in
  ('PROPOSED','AUTHORIZED','DISPATCHED','COMMITTED','REFUSED','AMBIGUOUS','LATE_RESULT','AUDITED'));
create unique index if not exists one_commit on ilr.journal (effect_id) where kind = 'COMMITTED';

create or replace function ilr.append_only() returns trigger language plpgsql as
  $$ begin raise exception 'ilr.% is append-only', tg_table_name; end $$;
create or replace trigger steps_append_only before update or delete on ilr.steps
  for each statement execute function ilr.append_only();
create or replace trigger journal_append_only before update or delete on ilr.journal
  for each statement execute function ilr.append_only();

create or replace function ilr.effects_guard() returns trigger language plpgsql as $$
begin
  if new.payload_hash <> old.payload_hash then
    raise exception 'payload binding: % is immutable', old.effect_id;
  end if;
  if old.state in ('committed','ambiguous') and new.state <> old.state then
    raise exception 'effect % is terminal (%)', old.effect_id, old.state;
  end if;
  return new;
end $$;
create or replace trigger effects_guard before update on ilr.effects
  for each row execute function ilr.effects_guard();

-- Columns added after the first release of this file (kept idempotent for older databases).
alter table ilr.workflows add column if not exists cancel_requested_by text;
alter table ilr.grants add column if not exists revoked_by text;

-- ============================================================================================
-- Narrow doors for the worker role (sql/roles.sql). A worker may read grants but never write
-- them; yet T_dispatch must hold the grant FOR SHARE, which Postgres allows only to a role that
-- may UPDATE the table. These SECURITY DEFINER functions do exactly one thing each, so a worker
-- needs no write privilege on grants and cannot insert a signal (an approval) itself.
-- ============================================================================================

create or replace function ilr.lock_grant_for_share(grant_id text)
returns table (id text, principal text, action text, max_cents bigint, payload_hash text,
               facts_seen jsonb, granted_by text, expires_at timestamptz,
               revoked_at timestamptz, live boolean)
language sql security definer set search_path = pg_catalog, ilr as $$
  select g.id, g.principal, g.action, g.max_cents, g.payload_hash, g.facts_seen, g.granted_by,
         g.expires_at, g.revoked_at,
         (g.revoked_at is null and (g.expires_at is null or g.expires_at > now())) as live
    from ilr.grants g where g.id = grant_id for share
$$;

-- A child's completion transaction tells its parent: only `$done:<child>` signals, only to the
-- child's own parent, only while the parent is not terminal (then nobody waits).
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
  if parent_status in ('completed','failed','cancelled','stuck','continued') then return null; end if;
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

-- A circuit breaker per target (Ratchet's breaker): after `threshold` consecutive definite
-- failures or timeouts, new dispatches are refused (REFUSED:circuit_open) until a reset or the
-- cool-down. In Postgres so that every worker sees the same state.
create table if not exists ilr.breakers (
  target text primary key,
  threshold int not null check (threshold >= 1),
  cooldown interval not null,
  consecutive_failures int not null default 0,
  opened_at timestamptz,
  updated_at timestamptz not null default now()
);
