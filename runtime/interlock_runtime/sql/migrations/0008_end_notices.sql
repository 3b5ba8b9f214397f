-- Migration 0008: a waiting result() hears the end of the run it waits for (docs/api.md).
--
-- rt.result() LISTENs on ilr_ended and marks the running row it waits on (awaited); the status
-- change that ends a marked run sends its id there, at commit. Only marked rows notify: a
-- notifying commit holds Postgres' one notify lock through its flush, so notices for runs
-- nobody waits on would serialize every worker's completion for nothing. The mark and the
-- end take the same row lock, so whichever comes second sees the other: a mark after the
-- end finds the run ended (result() then does not wait), an end after the mark notifies.
alter table ilr.workflows add column awaited boolean not null default false;

create function ilr.workflow_ended() returns trigger language plpgsql as $$
begin
  perform pg_notify('ilr_ended', new.id);
  return null;
end $$;
create trigger workflows_ended after update of status on ilr.workflows
  for each row when (new.awaited
                     and old.status in ('awaiting_worker','pending','running','sleeping')
                     and new.status not in ('awaiting_worker','pending','running','sleeping'))
  execute function ilr.workflow_ended();
