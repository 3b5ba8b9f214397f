-- Queries: the status a workflow publishes with ctx.set_status (context.py), read by rt.query,
-- `interlock query` and the console. Each block starts with a `-- name: <name>` line.

-- name: workflow_status_object
-- The latest status step (kind 'step', the runtime's own name $status) of one workflow, read
-- from the committed history: no worker runs and nothing is woken. The workflow row comes
-- back even when it set no status (seq null), so an unknown id is told from a silent one.
select w.id, w.status, w.result, s.seq, s.output, s.epoch, s.created_at as set_at
  from ilr.workflows w
  left join lateral (
    select seq, output, epoch, created_at from ilr.steps
     where workflow_id = w.id and kind = 'step' and name = %(name)s
     order by seq desc limit 1) s on true
 where w.id = %(id)s;
