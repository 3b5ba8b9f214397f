-- Migration 0002: authority without a domain.
--
-- A grant used to cap a payload field named "amount" (max_cents) and always name an action.
-- Now the application declares its own constraints, bounds on named payload fields
-- ({"amount": {"max": 5000}}, see authority.py), and an approval may leave the action open:
-- it binds one exact payload (payload_hash), whatever the action. Every existing cap becomes
-- the same constraint, so every grant keeps allowing exactly what it allowed.

alter table ilr.grants add column constraints jsonb;
update ilr.grants
   set constraints = jsonb_build_object('amount', jsonb_build_object('max', max_cents))
 where max_cents is not null;
alter table ilr.grants alter column action drop not null;

-- The worker's door to the grants returns the new columns (a changed row type: drop, create).
drop function ilr.lock_grant_for_share(text);
create function ilr.lock_grant_for_share(grant_id text)
returns table (id text, principal text, action text, constraints jsonb, payload_hash text,
               facts_seen jsonb, granted_by text, expires_at timestamptz,
               revoked_at timestamptz, live boolean)
language sql security definer set search_path = pg_catalog, ilr as $$
  select g.id, g.principal, g.action, g.constraints, g.payload_hash, g.facts_seen, g.granted_by,
         g.expires_at, g.revoked_at,
         (g.revoked_at is null and (g.expires_at is null or g.expires_at > now())) as live
    from ilr.grants g where g.id = grant_id for share
$$;
-- Where the least-privilege roles exist (interlock roles), give the new function their grants.
do $$
begin
  if exists (select 1 from pg_roles where rolname = 'ilr_worker') then
    revoke all on function ilr.lock_grant_for_share(text) from public;
    grant execute on function ilr.lock_grant_for_share(text) to ilr_worker, ilr_operator;
  end if;
end $$;

alter table ilr.grants drop column max_cents;
